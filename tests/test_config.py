"""Tests for trainscope.config: defaults, validation, merge of overrides, YAML round trips."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import raises_within_memory
from trainscope.config import (
    DataConfig,
    DistConfig,
    RunConfig,
    RuntimeConfig,
    TrainConfig,
    WorkloadConfig,
    from_dict,
    load_yaml,
    merge,
    resolve,
)
from trainscope.errors import ConfigError, TrainscopeError

# ----------------------------------------------------------------------------- defaults


def test_defaults_are_valid_and_documented_values() -> None:
    cfg = RunConfig()
    assert cfg.workload.name == "digits"
    assert cfg.data.batch_size == 32 and cfg.data.num_workers == 0
    assert cfg.train.epochs == 30 and cfg.train.optimizer == "sgd" and cfg.train.lr == 0.05
    assert cfg.runtime.device == "auto" and cfg.runtime.precision == "fp32"
    assert cfg.out is None and cfg.overwrite is False
    assert cfg.runtime.threads == "auto"
    # Read from (empty) config data, the default workload's recipe fills the training
    # settings (recipes.DIGITS); the dataclass defaults are the generic ones.
    default = from_dict({})
    assert from_dict(None) == default and resolve(None, {}) == default
    assert (default.train.schedule, default.train.warmup_steps) == ("cosine", 100)
    assert default.workload == cfg.workload and default.runtime == cfg.runtime


def test_config_error_is_a_trainscope_error() -> None:
    # The CLI prints TrainscopeErrors as one line; ConfigError must be one of them.
    assert issubclass(ConfigError, TrainscopeError)


# --------------------------------------------------------------------------- validation

# (nested config data, a regex the one-line message must match)
INVALID: list[tuple[dict[str, Any], str]] = [
    # workload
    ({"workload": {"name": "nope"}}, r"unknown workload 'nope'.*digits, mnist, synthetic"),
    ({"workload": {"name": "pkg.module"}}, r"unknown workload 'pkg.module'"),
    ({"workload": {"name": "1pkg.mod:make"}}, r"unknown workload"),
    ({"workload": {"name": "pkg.mod:1make"}}, r"unknown workload"),
    ({"workload": {"name": ":make"}}, r"unknown workload"),
    ({"workload": {"name": "pkg.mod:"}}, r"unknown workload"),
    ({"workload": {"synthetic_shape": [1, 28]}}, r"synthetic_shape must be three positive"),
    ({"workload": {"synthetic_shape": [1, 28, 28, 1]}}, r"synthetic_shape must be three"),
    ({"workload": {"synthetic_shape": [1, 0, 28]}}, r"synthetic_shape must be three positive"),
    ({"workload": {"synthetic_shape": [1, 28, -4]}}, r"synthetic_shape must be three positive"),
    ({"workload": {"synthetic_samples": 0}}, r"synthetic_samples must be a positive integer"),
    ({"workload": {"num_classes": 1}}, r"num_classes must be at least 2, got 1"),
    ({"workload": {"num_classes": 0}}, r"num_classes must be at least 2"),
    # data
    ({"data": {"batch_size": 0}}, r"batch_size must be a positive integer, got 0"),
    ({"data": {"batch_size": -3}}, r"batch_size must be a positive integer, got -3"),
    ({"data": {"num_workers": -1}}, r"num_workers must be >= 0, got -1"),
    ({"data": {"persistent_workers": True}}, r"persistent_workers needs num_workers > 0"),
    ({"data": {"prefetch_factor": 2}}, r"prefetch_factor needs num_workers > 0"),
    (
        {"data": {"prefetch_factor": 0, "num_workers": 2}},
        r"prefetch_factor must be a positive integer, got 0",
    ),
    # train
    ({"train": {"epochs": 0}}, r"epochs must be a positive integer, got 0"),
    ({"train": {"max_steps_per_epoch": 0}}, r"max_steps_per_epoch must be a positive integer"),
    ({"train": {"optimizer": "lamb"}}, r"unknown optimizer 'lamb'.*sgd, adam, adamw"),
    (
        {"train": {"optimizer_impl": "fast"}},
        r"^unknown optimizer_impl 'fast': choose one of auto, for-loop, foreach, fused$",
    ),
    ({"train": {"optimizer_impl": "Fused"}}, r"unknown optimizer_impl 'Fused'"),
    ({"train": {"optimizer_impl": 1}}, r"train\.optimizer_impl must be a string, got 1"),
    ({"train": {"lr": 0}}, r"lr must be a finite number > 0, got 0"),
    ({"train": {"lr": -0.1}}, r"lr must be a finite number > 0, got -0.1"),
    ({"train": {"lr": float("nan")}}, r"lr must be a finite number > 0, got nan"),
    ({"train": {"lr": float("inf")}}, r"lr must be a finite number > 0, got inf"),
    ({"train": {"momentum": -0.5}}, r"momentum must be a finite number >= 0, got -0\.5"),
    ({"train": {"weight_decay": -1e-4}}, r"weight_decay must be a finite number >= 0"),
    ({"train": {"eval_every": 0}}, r"eval_every must be a positive integer"),
    ({"train": {"log_every": -1}}, r"log_every must be a positive integer"),
    # runtime
    ({"runtime": {"device": "tpu"}}, r"unknown device 'tpu'"),
    ({"runtime": {"device": "cuda:"}}, r"unknown device 'cuda:'"),
    ({"runtime": {"device": "cuda:x"}}, r"unknown device 'cuda:x'"),
    ({"runtime": {"device": "CPU"}}, r"unknown device 'CPU'"),
    ({"runtime": {"precision": "fp8"}}, r"unknown precision 'fp8'.*fp32, tf32, fp16, bf16"),
    ({"runtime": {"timing": "fast"}}, r"unknown timing mode 'fast'.*auto, exact"),
    ({"runtime": {"threads": 0}}, r"threads must be a positive integer, got 0"),
    ({"runtime": {"threads": -2}}, r"threads must be a positive integer"),
    ({"runtime": {"threads": 10**6}}, r"threads must be at most 4096"),
    ({"runtime": {"threads": "many"}}, r"threads must be an integer >= 1 or auto, got 'many'"),
    ({"runtime": {"threads": 1.5}}, r"runtime.threads must be an integer or a word, got 1.5"),
    ({"runtime": {"threads": True}}, r"runtime.threads must be an integer or a word, got True"),
    (
        {"runtime": {"system_interval_s": 0}},
        r"system_interval_s must be >= 0\.1 and <= 86400, got 0",
    ),
    # structure
    ({"nope": 1}, r"unknown config key 'nope'"),
    ({"train": {"nope": 1}}, r"unknown config key train\.nope"),
    ({"data": 5}, r"config section 'data' must be a mapping"),
    ({"data": [1, 2]}, r"config section 'data' must be a mapping"),
    # null where not allowed
    ({"train": {"epochs": None}}, r"train\.epochs must not be null"),
    ({"workload": {"name": None}}, r"workload\.name must not be null"),
    ({"runtime": {"device": None}}, r"runtime\.device must not be null"),
    # wrong types
    ({"data": {"batch_size": True}}, r"data\.batch_size must be an integer, got True"),
    ({"data": {"batch_size": "x"}}, r"data\.batch_size must be an integer, got 'x'"),
    ({"data": {"batch_size": 1.5}}, r"data\.batch_size must be an integer, got 1\.5"),
    ({"train": {"epochs": False}}, r"train\.epochs must be an integer"),
    ({"workload": {"download": 1}}, r"workload\.download must be true or false, got 1"),
    ({"data": {"pin_memory": "yes"}}, r"data\.pin_memory must be true or false"),
    ({"train": {"lr": "0.1"}}, r"train\.lr must be a number, got '0\.1'"),
    ({"train": {"lr": True}}, r"train\.lr must be a number, got True"),
    ({"runtime": {"device": 0}}, r"runtime\.device must be a string, got 0"),
    ({"workload": {"name": ["digits"]}}, r"workload\.name must be a string"),
]


@pytest.mark.parametrize(("data", "pattern"), INVALID, ids=[repr(d) for d, _ in INVALID])
def test_invalid_config_is_one_line_config_error(data: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as exc:
        from_dict(data)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "data",
    [
        {"workload": {"synthetic_shape": 5}},
        {"workload": {"synthetic_shape": ["x", 28, 28]}},
        {"workload": {"synthetic_shape": [1.5, 28, 28]}},
        {"workload": {"options": 3}},
        {"out": 3},
        {"overwrite": 3},
    ],
    ids=["shape-not-a-list", "shape-str-item", "shape-float-item", "options", "out", "overwrite"],
)
def test_wrong_types_are_config_errors(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        from_dict(data)


def test_dataclasses_validate_on_direct_construction() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        DataConfig(batch_size=0)
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig(optimizer="rmsprop")
    with pytest.raises(ConfigError, match="precision"):
        RuntimeConfig(precision="int8")
    with pytest.raises(ConfigError, match="workload"):
        WorkloadConfig(name="resnet")


@pytest.mark.parametrize(
    "name",
    ["digits", "mnist", "synthetic", "pkg.mod:factory", "my_pkg.sub_mod:make_workload", "m:f"],
)
def test_valid_workload_names(name: str) -> None:
    # A factory name is only checked for form here; importing it is build_workload's job.
    assert from_dict({"workload": {"name": name}}).workload.name == name


def test_values_that_are_valid() -> None:
    cfg = from_dict(
        {
            "workload": {"synthetic_shape": [3, 32, 16], "num_classes": 2, "data_dir": None},
            "data": {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
            "train": {"lr": 1, "max_steps_per_epoch": None, "optimizer": "adamw"},
            "runtime": {"device": "cuda:1", "system_interval_s": 0.25},
        }
    )
    assert cfg.workload.synthetic_shape == (3, 32, 16)  # YAML lists become tuples
    assert cfg.data.prefetch_factor == 4 and cfg.data.persistent_workers is True
    assert cfg.train.lr == 1  # an int is a fine float
    assert cfg.train.max_steps_per_epoch is None
    assert cfg.runtime.device == "cuda:1"  # form only: whether it exists is checked at run time


def test_null_section_means_defaults() -> None:
    assert from_dict({"data": None, "train": None}) == from_dict({})


# -------------------------------------------------------------------------------- merge


def test_merge_dotted_overrides() -> None:
    base = {"data": {"batch_size": 16, "num_workers": 2}, "train": {"epochs": 3}}
    out = merge(
        base,
        {"data.batch_size": 8, "runtime.precision": "bf16", "out": "runs/x", "train.lr": 0.1},
    )
    assert out == {
        "data": {"batch_size": 8, "num_workers": 2},
        "train": {"epochs": 3, "lr": 0.1},
        "runtime": {"precision": "bf16"},
        "out": "runs/x",
    }
    # The base is not modified.
    assert base == {"data": {"batch_size": 16, "num_workers": 2}, "train": {"epochs": 3}}


def test_merge_later_override_wins_and_deep_keys() -> None:
    out = merge({}, {"workload.options.width": 64, "workload.options.depth": 2})
    assert out == {"workload": {"options": {"width": 64, "depth": 2}}}


def test_merge_into_a_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"cannot override train\.lr\.x: lr is not a section"):
        merge({"train": {"lr": 0.1}}, {"train.lr.x": 1})


def test_merge_refuses_keys_deeper_than_a_config_may_nest() -> None:
    deep = "workload.options." + ".".join(["x"] * 5000)
    with pytest.raises(ConfigError, match=r"cannot override 'workload\.options\.x.*more than 32"):
        merge({}, {deep: 1})


def test_merge_does_not_modify_nested_base() -> None:
    base = {"workload": {"options": {"width": 32}}}
    snapshot = copy.deepcopy(base)
    merge(base, {"workload.options.width": 64})
    assert base == snapshot


# ----------------------------------------------------------------------- YAML and resolve


def test_load_yaml_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*missing\.yaml does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML") as exc:
        load_yaml(bad)
    assert "\n" not in str(exc.value)
    top_list = tmp_path / "list.yaml"
    top_list.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping at the top level"):
        load_yaml(top_list)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml(empty) == {}
    with pytest.raises(ConfigError, match="is a directory, not a YAML file"):
        load_yaml(tmp_path)  # a directory is not a config file


def test_resolve_precedence_defaults_yaml_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("data: {batch_size: 16, num_workers: 1}\ntrain: {epochs: 2, lr: 0.2}\n")
    cfg = resolve(path, {"data.batch_size": 8})
    assert cfg.data.batch_size == 8  # override beats YAML
    assert cfg.data.num_workers == 1 and cfg.train.epochs == 2 and cfg.train.lr == 0.2  # YAML
    assert cfg.train.optimizer == "sgd"  # default


def test_resolve_validates_the_merged_whole(tmp_path: Path) -> None:
    # Valid on its own, the YAML becomes invalid once the override removes the workers.
    path = tmp_path / "c.yaml"
    path.write_text("data: {num_workers: 2, prefetch_factor: 4}\n")
    assert resolve(path, {}).data.prefetch_factor == 4
    with pytest.raises(ConfigError, match="prefetch_factor needs num_workers > 0"):
        resolve(path, {"data.num_workers": 0})


# ---------------------------------------------------------------------- to/from dict


def _non_default_config() -> RunConfig:
    return RunConfig(
        workload=WorkloadConfig(
            name="synthetic",
            synthetic_shape=(3, 16, 24),
            synthetic_samples=100,
            num_classes=4,
            options={"width": 8},
        ),
        data=DataConfig(batch_size=7, num_workers=2, prefetch_factor=3, drop_last=True),
        train=TrainConfig(
            epochs=2, max_steps_per_epoch=5, optimizer="adam", lr=1e-3, optimizer_impl="fused"
        ),
        runtime=RuntimeConfig(device="cpu", precision="bf16", timing="exact", progress=False),
        out="runs/a",
        overwrite=True,
    )


def test_to_dict_is_plain_data() -> None:
    d = _non_default_config().to_dict()
    assert set(d) == {"workload", "data", "train", "runtime", "dist", "out", "overwrite", "resume"}
    assert d["workload"]["synthetic_shape"] == [3, 16, 24]  # a list: YAML-friendly
    assert d["data"]["batch_size"] == 7 and d["runtime"]["precision"] == "bf16"
    # safe_dump only accepts plain types; it would raise on a tuple or a dataclass.
    yaml.safe_dump(d)


@pytest.mark.parametrize("cfg", [RunConfig(), _non_default_config()], ids=["default", "custom"])
def test_to_dict_from_dict_roundtrip(cfg: RunConfig) -> None:
    assert from_dict(cfg.to_dict()) == cfg
    # And through YAML text, as config.yaml is written and read back.
    assert from_dict(yaml.safe_load(yaml.safe_dump(cfg.to_dict(), sort_keys=False))) == cfg


# ------------------------------------------------ loader, num_workers auto and data only


# (the data section, a regex the one-line message must match)
LOADER_INVALID: list[tuple[dict[str, Any], str]] = [
    ({"loader": "turbo"}, r"unknown loader 'turbo'.*torch, fast"),
    ({"loader": "Fast"}, r"unknown loader 'Fast'"),
    ({"loader": "fast", "num_workers": 2}, r"loader fast .*num_workers"),
    ({"loader": "fast", "pin_memory": True}, r"loader fast .*pin_memory"),
    (
        {"loader": "fast", "num_workers": 2, "persistent_workers": True},
        r"loader fast .*persistent_workers",
    ),
    ({"num_workers": "many"}, r"num_workers must be an integer >= 0 or auto, got 'many'"),
    ({"num_workers": "AUTO"}, r"num_workers must be an integer >= 0 or auto, got 'AUTO'"),
    ({"num_workers": ""}, r"num_workers must be an integer >= 0 or auto"),
    ({"num_workers": True}, r"data\.num_workers must be an integer or a word, got True"),
    ({"num_workers": False}, r"data\.num_workers must be an integer or a word"),
    ({"num_workers": 1.5}, r"data\.num_workers must be an integer or a word, got 1\.5"),
    ({"num_workers": [2]}, r"data\.num_workers must be an integer or a word"),
    ({"num_workers": None}, r"data\.num_workers must not be null"),
    ({"loader": None}, r"data\.loader must not be null"),
    ({"loader": 1}, r"data\.loader must be a string"),
]


@pytest.mark.parametrize(
    ("data", "pattern"), LOADER_INVALID, ids=[repr(d) for d, _ in LOADER_INVALID]
)
def test_loader_and_num_workers_validation(data: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as exc:
        from_dict({"data": data})
    assert "\n" not in str(exc.value)


def test_train_data_only_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match=r"train\.data_only must be true or false"):
        from_dict({"train": {"data_only": "yes"}})


def test_loader_num_workers_auto_and_data_only_values_that_are_valid() -> None:
    assert RunConfig().data.loader == "torch" and RunConfig().train.data_only is False
    assert from_dict({"data": {"loader": "fast"}}).data.loader == "fast"
    assert from_dict({"data": {"loader": "torch", "num_workers": 3}}).data.num_workers == 3
    auto = from_dict({"data": {"num_workers": "auto"}}).data
    assert auto.num_workers == "auto" and auto.loader == "torch"
    # Worker options are fine with auto: they apply if the choice has workers.
    opts = from_dict(
        {"data": {"num_workers": "auto", "persistent_workers": True, "prefetch_factor": 4}}
    ).data
    assert opts.persistent_workers is True and opts.prefetch_factor == 4
    assert DataConfig(num_workers="auto").num_workers == "auto"
    assert from_dict({"train": {"data_only": True}}).train.data_only is True


def test_dataclass_validates_loader_and_auto_on_direct_construction() -> None:
    with pytest.raises(ConfigError, match="unknown loader"):
        DataConfig(loader="dali")
    with pytest.raises(ConfigError, match="or auto"):
        DataConfig(num_workers="many")
    with pytest.raises(ConfigError, match="loader fast"):
        DataConfig(loader="fast", pin_memory=True)


def test_yaml_num_workers_auto_and_loader(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  num_workers: auto\n  batch_size: 16\ntrain:\n  data_only: true\n")
    cfg = from_dict(load_yaml(path))
    assert cfg.data.num_workers == "auto" and cfg.data.batch_size == 16
    assert cfg.train.data_only is True
    # A flag (override) replaces the YAML's auto with a count, or the loader with fast.
    assert resolve(path, {"data.num_workers": 2}).data.num_workers == 2
    fast = resolve(path, {"data.num_workers": 0, "data.loader": "fast"}).data
    assert fast.loader == "fast" and fast.num_workers == 0
    # ... and the merged whole is validated: fast with the YAML's auto is fine (auto means
    # 0 there), fast with a worker count is refused.
    assert resolve(path, {"data.loader": "fast"}).data.num_workers == "auto"
    with pytest.raises(ConfigError, match="loader fast"):
        resolve(path, {"data.loader": "fast", "data.num_workers": 2})


def test_auto_fast_and_data_only_survive_the_round_trip() -> None:
    for cfg in (
        RunConfig(data=DataConfig(num_workers="auto"), train=TrainConfig(data_only=True)),
        RunConfig(data=DataConfig(loader="fast", batch_size=64)),
    ):
        d = cfg.to_dict()
        assert from_dict(d) == cfg
        assert from_dict(yaml.safe_load(yaml.safe_dump(d, sort_keys=False))) == cfg
    text = yaml.safe_dump(RunConfig(data=DataConfig(num_workers="auto")).to_dict())
    assert "num_workers: auto" in text


def _cli_overrides(*argv: str) -> dict[str, Any]:
    from trainscope.cli import build_parser, overrides_from_args

    return overrides_from_args(build_parser().parse_args(["run", *argv]))


def test_cli_num_workers_loader_and_data_only_flags() -> None:
    assert _cli_overrides("--num-workers", "auto") == {"data.num_workers": "auto"}
    assert _cli_overrides("--num-workers", "3") == {"data.num_workers": 3}
    assert _cli_overrides("--loader", "fast") == {"data.loader": "fast"}
    assert _cli_overrides("--data-only") == {"train.data_only": True}
    assert _cli_overrides() == {}  # none of them typed: the YAML or the defaults decide
    cfg = resolve(None, _cli_overrides("--num-workers", "auto", "--data-only"))
    assert cfg.data.num_workers == "auto" and cfg.train.data_only is True


@pytest.mark.parametrize("value", ["x", "1.5", "Auto", ""], ids=["x", "1.5", "Auto", "empty"])
def test_cli_num_workers_rejects_other_words(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _cli_overrides("--num-workers", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "--num-workers" in err and "expected an integer or auto" in err


# ------------------------------- limits: non-finite numbers, huge integers, resources

NAN, INF = float("nan"), float("inf")
HUGE = 10**400  # an integer no setting can hold (and no float can convert)

# (nested config data, a regex the one-line message must match); each was accepted, or
# ended in an OverflowError, before these limits existed.
OUT_OF_BOUNDS: list[tuple[dict[str, Any], str]] = [
    ({"train": {"lr": HUGE}}, r"lr must be a finite number > 0, got an integer of 401 digits"),
    ({"train": {"momentum": NAN}}, r"momentum must be a finite number >= 0, got nan"),
    ({"train": {"momentum": INF}}, r"momentum must be a finite number >= 0, got inf"),
    ({"train": {"weight_decay": NAN}}, r"weight_decay must be a finite number >= 0, got nan"),
    ({"train": {"weight_decay": INF}}, r"weight_decay must be a finite number >= 0, got inf"),
    (
        {"runtime": {"system_interval_s": 1e-9}},
        r"system_interval_s must be >= 0\.1 and <= 86400, got 1e-09",
    ),
    ({"runtime": {"system_interval_s": 0.09}}, r"system_interval_s must be >= 0\.1 and <= 86400"),
    ({"runtime": {"system_interval_s": INF}}, r"system_interval_s .* got inf"),
    ({"runtime": {"system_interval_s": HUGE}}, r"system_interval_s .* 401 digits"),
    ({"dist": {"timeout_s": INF}}, r"timeout_s must be >= 1 and <= 604800, got inf"),
    ({"dist": {"timeout_s": 1e300}}, r"timeout_s must be >= 1 and <= 604800, got 1e\+300"),
    # The process group forms under this timeout too: 1e-9 s was torch's DistNetworkError.
    ({"dist": {"timeout_s": 1e-9}}, r"timeout_s must be >= 1 and <= 604800, got 1e-09"),
    ({"train": {"seed": HUGE}}, r"seed must be an integer in 0\.\.2\*\*63 - 1, got an integer"),
    ({"train": {"seed": 2**63}}, r"seed must be an integer in 0\.\.2\*\*63 - 1"),
    ({"train": {"seed": -1}}, r"seed must be an integer in 0\.\.2\*\*63 - 1, got -1"),
    ({"data": {"shuffle_seed": 2**64}}, r"shuffle_seed must be an integer in 0\.\.2\*\*63 - 1"),
    ({"data": {"batch_size": 2**70}}, r"batch_size must be at most 2\*\*63 - 1"),
    ({"train": {"epochs": HUGE}}, r"epochs must be at most 2\*\*63 - 1"),
    ({"data": {"num_workers": 100_000}}, r"num_workers 100000 is far beyond .* at most \d+"),
    ({"data": {"num_workers": 2, "prefetch_factor": 10**9}}, r"prefetch_factor .* at most 64"),
    ({"dist": {"nproc": 100_000, "strategy": "ddp"}}, r"nproc 100000 is far beyond"),
    (
        {"workload": {"name": "synthetic", "synthetic_samples": 10**12}},
        r"synthetic data of 1000000000000 samples of 1x28x28 would take .* GiB",
    ),
    (
        {"workload": {"name": "synthetic", "synthetic_shape": [1, 100_000, 100_000]}},
        r"synthetic data .* 1x100000x100000 would take",
    ),
]


@pytest.mark.parametrize(
    ("data", "pattern"), OUT_OF_BOUNDS, ids=[repr(d)[:60] for d, _ in OUT_OF_BOUNDS]
)
def test_out_of_bounds_values_are_one_line_config_errors(
    data: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(ConfigError, match=pattern) as exc:
        from_dict(data)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 300


def test_worker_limit_follows_the_cpus_of_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from trainscope.config import max_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert max_workers() == 256
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert max_workers() == 32  # the floor: small sweeps stay allowed on small machines
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 20)
    assert max_workers() == 80
    # The loader study's default sweep (0..10) is allowed on a 2-CPU machine.
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert from_dict({"data": {"num_workers": 10}}).data.num_workers == 10
    with pytest.raises(ConfigError, match=r"at most 32 \(max\(32, 4 x the 2 CPUs"):
        from_dict({"data": {"num_workers": 33}})


@pytest.mark.parametrize(
    ("section", "key", "edge", "beyond"),
    [
        ("train", "seed", 2**63 - 1, 2**63),
        ("runtime", "system_interval_s", 0.1, 0.0999),
        ("runtime", "system_interval_s", 86400, 86400.5),
        ("dist", "timeout_s", 604800, 604800.5),
        ("dist", "timeout_s", 1, 0.999),
        ("data", "prefetch_factor", 64, 65),
    ],
)
def test_limits_are_inclusive(section: str, key: str, edge: Any, beyond: Any) -> None:
    extra = {"num_workers": 2} if key == "prefetch_factor" else {}
    cfg = from_dict({section: {key: edge, **extra}})
    assert getattr(getattr(cfg, section), key) == edge
    with pytest.raises(ConfigError, match=key):
        from_dict({section: {key: beyond, **extra}})


# ---------------------------------------------------------- YAML that parses but is refused


def _billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: 10**levels strings from a few hundred bytes."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "workload:\n  name: pkg.mod:make\n  options:\n" + "".join(
        f"    {line}\n" for line in lines
    )


def test_alias_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    # What a run writes never holds an alias, even where one list is used twice: asdict
    # copies it. So refusing aliases costs no config that trainscope wrote.
    shared = [1, 2]
    cfg = RunConfig(workload=WorkloadConfig(name="m:f", options={"a": shared, "b": shared}))
    written = tmp_path / "config.yaml"
    written.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    assert from_dict(load_yaml(written)) == cfg

    path = tmp_path / "bomb.yaml"
    path.write_text(_billion_laughs())
    error, peak = raises_within_memory(ConfigError, lambda: load_yaml(path))
    message = str(error)
    assert "bomb.yaml uses the YAML alias *l0" in message
    assert "anchors and aliases are not needed in a trainscope config" in message
    assert "\n" not in message and peak < 16 * 2**20


def test_merge_key_alias_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {epochs: 2}\ntrain:\n  <<: *b\n")
    with pytest.raises(ConfigError, match=r"merge\.yaml uses the YAML alias \*b \(line 3\)"):
        load_yaml(path)


@pytest.mark.parametrize(
    "text",
    ["x: " + "[" * 5000 + "]" * 5000 + "\n", "".join(f"{' ' * i}k{i}:\n" for i in range(400))],
    ids=["flow", "block"],
)
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"deep\.yaml nests deeper than 32 levels") as exc:
        load_yaml(path)
    assert "\n" not in str(exc.value)


def test_integer_python_cannot_parse_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "digits.yaml"
    path.write_text("train:\n  seed: 1" + "0" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"digits\.yaml holds an integer of 5001 characters"):
        load_yaml(path)


def test_oversized_and_binary_config_files(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of valid YAML (comments)
    with pytest.raises(ConfigError, match=r"big\.yaml is larger than 1 MiB"):
        load_yaml(big)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe" * 10)
    with pytest.raises(ConfigError, match=r"model\.bin is not a text file") as exc:
        load_yaml(binary)
    assert "\n" not in str(exc.value)


def test_safe_load_yaml_bounds_set_values() -> None:
    from trainscope.config import safe_load_yaml

    assert safe_load_yaml("[1, {a: 2}]", "--set x") == [1, {"a": 2}]
    with pytest.raises(ConfigError, match=r"--set x uses the YAML alias \*a"):
        safe_load_yaml("[&a [1, 2], *a]", "--set x")
    with pytest.raises(ConfigError, match=r"--set x is larger than 1 MiB"):
        safe_load_yaml("x" * (2 << 20), "--set x")
    with pytest.raises(yaml.YAMLError):  # not YAML at all: the caller words it
        safe_load_yaml("[1", "--set x")


@pytest.mark.parametrize("name", ["text-cls", "gpt-char", "digits", "mnist"])
def test_config_yaml_leaves_out_what_the_workload_does_not_read(name: str) -> None:
    """A text-cls run's config.yaml carried ``synthetic_shape`` and ``num_classes: 10``:
    only the synthetic workload (and a user's factory) reads them. Read back, the saved
    config is the same config."""
    cfg = from_dict({"workload": {"name": name}, "out": "runs/x"})
    saved = cfg.saved_dict()
    for key in ("synthetic_shape", "synthetic_samples", "num_classes"):
        assert key not in saved["workload"]
    assert saved["out"] is None and saved["overwrite"] is False and saved["resume"] is False
    again = from_dict(yaml.safe_load(yaml.safe_dump(saved)))
    assert again.to_dict() == {**cfg.to_dict(), "out": None}


@pytest.mark.parametrize("name", ["synthetic", "tests.somewhere:factory"])
def test_config_yaml_keeps_the_synthetic_settings_where_they_are_read(name: str) -> None:
    cfg = from_dict({"workload": {"name": name, "num_classes": 3}})
    assert cfg.saved_dict()["workload"]["num_classes"] == 3


def test_a_runs_config_yaml_is_its_saved_config(tmp_path: Path) -> None:
    from trainscope.train.run import run

    cfg = from_dict({"out": str(tmp_path / "r"), "train": {"epochs": 1, "max_steps_per_epoch": 1}})
    run(cfg)
    saved = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text(encoding="utf-8"))
    assert saved == cfg.saved_dict() and "num_classes" not in saved["workload"]


# ------------------------------------------------------------ optimizer impl, DDP buckets


@pytest.mark.parametrize("impl", ["auto", "for-loop", "foreach", "fused"])
def test_optimizer_impl_values_and_the_set_override(impl: str) -> None:
    assert TrainConfig().optimizer_impl == "auto"  # torch's own choice, as before
    assert resolve(None, {"train.optimizer_impl": impl}).train.optimizer_impl == impl
    cfg = RunConfig(train=TrainConfig(optimizer_impl=impl))
    assert from_dict(cfg.saved_dict()).train.optimizer_impl == impl  # config.yaml keeps it


def test_optimizer_impl_flag_and_set_give_the_same_key() -> None:
    assert _cli_overrides("--optimizer-impl", "foreach") == {"train.optimizer_impl": "foreach"}
    assert _cli_overrides("--set", "train.optimizer_impl=for-loop") == {
        "train.optimizer_impl": "for-loop"
    }


def test_bucket_mb_is_taken_by_ddp_and_allreduce_only() -> None:
    for strategy in ("ddp", "allreduce"):
        cfg = from_dict({"dist": {"strategy": strategy, "nproc": 2, "bucket_mb": 4}})
        assert cfg.dist.bucket_mb == 4
    assert DistConfig(strategy="ddp").bucket_mb is None  # DDP's own default buckets
    for strategy in ("single", "fsdp"):
        with pytest.raises(ConfigError) as exc:
            from_dict({"dist": {"strategy": strategy, "bucket_mb": 4}})
        assert str(exc.value) == f"bucket_mb applies to strategy ddp or allreduce, not {strategy}"
    with pytest.raises(ConfigError, match="bucket_mb must be"):
        DistConfig(strategy="ddp", bucket_mb=0)
