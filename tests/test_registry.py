"""The extension points: a strategy and a study added from a module of their own plus one
registry call appear everywhere trainscope lists, checks, plans, reports and predicts
strategies and studies, with nothing else edited."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.reports.cheap import unsaved_figures
from tests.reports.test_honest_numbers import BASE, CPU, Planted, report_of
from tests.studies.heap import frozen_heap
from trainscope import registry
from trainscope.cli import main
from trainscope.config import from_dict
from trainscope.errors import ConfigError
from trainscope.runtime.dist import DistInfo
from trainscope.strategies import make_strategy

pytestmark = pytest.mark.timeout(120)

TOY = '''
"""A toy strategy and a toy study, from outside trainscope."""
from trainscope.reports.section import Section
from trainscope.studies.base import finish_plan, repeats_of
from trainscope.strategies.base import Strategy


class ToySync(Strategy):
    """Several processes, its own (toy) gradient sync."""

    name = "toy-sync"

    def __init__(self, info, device, bucket_mb=None):
        super().__init__(info, device)
        self.toy_knob = bucket_mb


def plan(base_config, device, *, repeats=3, warmup=True, sizes="1,2"):
    runs = []
    for size in sizes.split(","):
        runs += repeats_of(f"size{size}", repeats, labels={"size": size},
                           overrides={"data.batch_size": 8 * int(size)})
    options = {"repeats": repeats, "warmup": warmup, "sizes": sizes}
    return finish_plan("toy-study", base_config, options, runs, warmup)


def options_from_args(args, overrides):
    return {"sizes": args.sizes}, [f"toy study of sizes {args.sizes}"]


def sections(study, doc, plots):
    doc.heading("Toy section", 2)
    doc.paragraph("configurations: " + ", ".join(c.config for c in study.configs()))
    return Section(findings=["toy finding"])
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "toy_ext.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register_strategy(
        registry.StrategyEntry(
            "toy-sync", "toy_ext:ToySync", True, "a toy: hand-written sync of its own",
            options=("dist.bucket_mb",),  # takes a knob another strategy takes too
            variants=(registry.Variant("toy-sync", measured_as="comm"),),
            # what it does, said once: the doctor, the config and the Trainer read it
            capabilities=registry.Capabilities(sync="per_tensor", comm_in=("comm",),
                                               muon=False),  # fmt: skip
        )
    )  # fmt: skip
    registry.register_study(
        registry.StudyEntry(
            "toy-study", "sizes of a toy", "toy_ext:plan", "toy_ext:sections",
            options="toy_ext:options_from_args",
            flags=(registry.Flag(("--sizes",), {"default": "1,2", "metavar": "LIST"}),),
            sets={"data.batch_size": "--sizes"},
        )
    )  # fmt: skip
    yield
    registry.unregister_strategy("toy-sync")
    registry.unregister_study("toy-study")
    sys.modules.pop("toy_ext", None)


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_a_registered_strategy_is_listed_checked_and_built(toy, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert "| allreduce | pipeline | tp | toy-sync (default single)" in _help(capsys, "run")
    cfg = from_dict({"dist": {"strategy": "toy-sync", "nproc": 2, "bucket_mb": 4}})
    assert cfg.dist.world_size == 2  # a multi-process strategy, with its own option
    with pytest.raises(
        ConfigError, match="bucket_mb applies to strategy ddp or allreduce or toy-sync, not fsdp"
    ):
        from_dict({"dist": {"strategy": "fsdp", "nproc": 2, "bucket_mb": 4}})
    built = make_strategy("toy-sync", DistInfo(), torch.device("cpu"), {"dist.bucket_mb": 4})
    assert type(built).__name__ == "ToySync" and built.toy_knob == 4
    with pytest.raises(
        ConfigError, match="unknown strategy 'nope'.*allreduce, pipeline, tp, toy-sync"
    ):
        from_dict({"dist": {"strategy": "nope"}})


def test_a_strategys_options_are_declared_once_for_config_flags_and_help(
    toy, capsys, monkeypatch
) -> None:
    """An option's flag, kind, choices and help live in its declaration: a toy strategy
    that takes a pipeline option gets it checked, offered and explained with nothing else
    edited; an option nobody declared, or of a kind the config cannot check, is refused."""
    monkeypatch.setenv("COLUMNS", "200")
    toy_entry = registry.STRATEGIES["toy-sync"]
    registry.register_strategy(
        dataclasses.replace(toy_entry, options=("dist.bucket_mb", "dist.pp_schedule"))
    )
    text = _help(capsys, "run")
    assert ("--pp-schedule NAME pipeline, toy-sync: the schedule" in text
            and "(gpipe | 1f1b | interleaved-1f1b; default 1f1b)" in text)  # fmt: skip
    assert "--bucket-mb MB ddp, allreduce, toy-sync: gradient buckets" in text
    cfg = from_dict({"dist": {"strategy": "toy-sync", "nproc": 2, "pp_schedule": "gpipe"}})
    assert cfg.dist.pp_schedule == "gpipe"
    with pytest.raises(ConfigError, match="unknown pp_schedule 'zigzag': choose one of gpipe"):
        from_dict({"dist": {"strategy": "toy-sync", "nproc": 2, "pp_schedule": "zigzag"}})
    with pytest.raises(ConfigError, match="pp_schedule applies to strategy pipeline or toy-sync"):
        from_dict({"dist": {"strategy": "ddp", "nproc": 2, "pp_schedule": "gpipe"}})
    with pytest.raises(ValueError, match="option dist.nope is not declared"):
        registry.register_strategy(registry.StrategyEntry(
            "toy-2", "toy_ext:ToySync", True, "x", options=("dist.nope",)))  # fmt: skip
    assert "toy-2" not in registry.STRATEGIES
    with pytest.raises(ValueError, match="kind 'fraction' is not one of"):
        registry.register_option(registry.StrategyOption("dist.nope", "--nope", "fraction", "x"))
    assert "dist.nope" not in registry.OPTIONS


def test_a_registered_strategy_is_planned_reported_and_has_a_no_model_note(
    toy, tmp_path, capsys, monkeypatch
) -> None:
    unsaved_figures(monkeypatch)  # the report's tables are read here, not its figures
    from trainscope.collectives.predict_cli import not_modelled
    from trainscope.studies import strategies

    assert strategies.configurations()[-1] == "toy-sync"
    plan = strategies.plan(BASE, CPU, repeats=3, strategies=["single", "toy-sync"])
    toy_run = [r for r in plan.runs if r.config == "toy-sync"][0]
    assert toy_run.overrides["dist.strategy"] == "toy-sync" and toy_run.labels["processes"] == 2
    planted = {f"toy-sync/r{k}": {"train_time_s": 0.05, "steps": 10} for k in (1, 2, 3)}
    report = report_of(plan, tmp_path, Planted(planted, fresh=True))
    names = [row[0] for row in report.tables["strategies"].cells()]
    assert names == ["single", "toy-sync"]
    # collectives --predict names it as a strategy the α–β model cannot predict.
    assert not_modelled() == ["toy-sync"]
    code = main(["collectives", "--predict", "--world", "4", "--interconnect", "nvlink4",
                 "--model", "lenet5"])  # fmt: skip
    assert code == 0
    assert "No communication model" in capsys.readouterr().err


def test_a_registered_study_has_its_command_flags_plan_and_report(
    toy, tmp_path, capsys, monkeypatch
) -> None:
    unsaved_figures(monkeypatch)  # the report's findings and text are read, not its figures
    assert "toy-study" in _help(capsys, "study")
    assert "--sizes LIST" in _help(capsys, "study", "toy-study")
    # The run setting it varies is refused from the command line, naming its own flag.
    code = main(["study", "toy-study", "--batch-size", "16", "--dry-run"])
    assert code == 2
    assert "study toy-study sets --batch-size for each of its runs; use --sizes" in (
        capsys.readouterr().err
    )
    code = main(["study", "toy-study", "--sizes", "1,3", "--repeats", "1", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0 and "toy study of sizes 1,3" in err
    assert "size3/r1: data.batch_size=24" in out
    from trainscope.studies.base import execute

    plan = registry.load("toy_ext:plan")(BASE, CPU, repeats=1, sizes="1,3")
    with frozen_heap():  # its collection after each run skips this process's heap
        execute(plan, tmp_path / "study", say=lambda _: None, run_fn=Planted({}))
    from trainscope.reports.study_report import build_study_report

    report = build_study_report(tmp_path / "study")
    assert report.findings == ["toy finding"]
    md = report.markdown_path.read_text(encoding="utf-8")
    assert "Toy section" in md and "configurations: size1, size3" in md


def test_the_readme_documents_every_registered_strategy_and_study(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    for name, entry in registry.STRATEGIES.items():
        processes = "N" if entry.multiprocess else "1"
        assert f"| `{name}` | {processes} |" in readme, name
    for name in registry.STUDIES:
        assert f"### `study {name}`" in readme, name


def test_a_strategys_capabilities_are_read_by_the_config_and_the_doctor(
    toy, tmp_path: Path
) -> None:
    """Nothing outside the toy's entry names it, yet: the config refuses Muon with it,
    the doctor proposes DDP for its per-tensor sync and FSDP for its replicated states,
    and places its ranks' waits in its comm stage."""
    from tests.diagnosis.test_memory_rules import MIB, STATES
    from tests.diagnosis.test_rules import HEALTHY, write_run
    from trainscope.diagnosis import diagnose
    from trainscope.diagnosis.stragglers import sync_stage

    with pytest.raises(ConfigError, match="muon .* not with --strategy toy-sync"):
        from_dict({"dist": {"strategy": "toy-sync", "nproc": 2},
                   "train": {"optimizer": "muon"}})  # fmt: skip
    slow_sync = write_run(tmp_path / "a", {**HEALTHY, "comm": 0.002},
                          summary={"strategy": "toy-sync"})  # fmt: skip
    assert diagnose(slow_sync).findings[0].fix == {"--strategy": "ddp"}
    states = write_run(tmp_path / "b", summary={"memory": STATES, "strategy": "toy-sync",
                                                "world_size": 2})  # fmt: skip
    (f,) = diagnose(states, memory_limit_bytes=40 * MIB).findings
    assert f.fix == {"--strategy": "fsdp"}  # it replicates the model states
    assert sync_stage("toy-sync", ["forward", "comm"]).stages == ("comm",)
    assert registry.capabilities("not-registered") == registry.Capabilities()


TOY_RULE = """
from trainscope.diagnosis.findings import Finding

def long_steps(facts):
    if not facts.step_s.ok or facts.step_s.median < 0.001:
        return None
    return Finding("toy-long-steps", "minor", "Steps take a millisecond or more.",
                   [f"step {facts.step_s.median * 1e3:.1f} ms"], "none estimated", {})
"""


def test_a_registered_doctor_rule_is_run_by_the_doctor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One module and one registry entry: the doctor runs the rule on every record."""
    from tests.diagnosis.test_rules import HEALTHY, rules_fired, write_run

    (tmp_path / "toy_rule.py").write_text(TOY_RULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = write_run(tmp_path / "a", HEALTHY)
    assert "toy-long-steps" not in rules_fired(run)
    registry.register_rule(registry.RuleEntry("toy-long-steps", "toy_rule:long_steps"))
    try:
        assert "toy-long-steps" in rules_fired(run)
    finally:
        registry.unregister_rule("toy-long-steps")
        sys.modules.pop("toy_rule", None)
    assert "toy-long-steps" not in rules_fired(run)


def test_a_registered_lab_chapter_is_chosen_and_measured_by_its_study(
    tmp_path: Path,
) -> None:
    """One registry entry: ``lab --only toy`` finds the chapter and runs its study's
    command; a chapter that takes a built-in's number is refused."""
    from trainscope.cli.lab import only_chapters
    from trainscope.lab.chapters import all_chapters
    from trainscope.lab.runner import run_lab

    toy_chapter = registry.Chapter(40, "toy", "A toy chapter", "What does a toy cost?",
                                   "profile", quick=("--repeats", "1"))  # fmt: skip
    registry.register_chapter(toy_chapter)
    try:
        assert all_chapters()[-1] is toy_chapter
        (chosen,) = only_chapters("toy")
        asked: list[list[str]] = []
        result = run_lab(tmp_path / "lab", [chosen], quick=True, data_root=None,
                         from_dirs=[], run_study=lambda argv: asked.append(argv) or 0)  # fmt: skip
        assert asked[0][:4] == ["study", "profile", "--repeats", "1"]
        assert result.states[0].status == "measured"
        registry.register_chapter(dataclasses.replace(toy_chapter, number=2))
        with pytest.raises(ConfigError, match="takes a built-in chapter's number or name"):
            all_chapters()
    finally:
        registry.unregister_chapter(40)
        registry.unregister_chapter(2)
    assert all(c.slug != "toy" for c in all_chapters())


TOY_WORKLOAD = """
from trainscope.errors import ConfigError
from trainscope.recipes import Recipe
from trainscope.workloads.builtin import synthetic

def make(cfg, cache_dir):
    return synthetic(cfg, cache_dir)

def check(options):
    if set(options) - {"width"}:
        raise ConfigError(f"toy-wl takes width only, got {sorted(options)}")

def recipe(options):
    return Recipe("toy: SGD lr 0.0123", train={"optimizer": "sgd", "lr": 0.0123})
"""


def test_a_registered_workload_is_listed_checked_given_its_recipe_and_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One module and one entry: ``--workload toy-wl`` is in the help with its recipe,
    its options are checked before a run, its recipe fills the config, and it trains."""
    from trainscope.workloads import check_options

    monkeypatch.setenv("COLUMNS", "200")  # help wrapped at hyphens would split names
    (tmp_path / "toy_wl.py").write_text(TOY_WORKLOAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    width = registry.WorkloadOption("width", "--width", "int", "W", "the toy's width")
    dropout = registry.WorkloadOption("dropout", "--dropout", "float", "P", "unused")
    registry.register_workload(registry.WorkloadEntry(
        "toy-wl", "toy_wl:make", options="toy_wl:check", recipe="toy_wl:recipe",
        flags=(width, dropout)))  # fmt: skip
    try:
        text = _help(capsys, "run")
        assert "text-cls | toy-wl | pkg.module:factory" in text
        assert "toy-wl: toy: SGD lr 0.0123" in text
        # Its flags: one of its own, one shared (each owner's words).
        assert "--width W toy-wl: the toy's width" in text
        assert "--dropout P gpt-char, text-cls: every dropout of the model; toy-wl: unused" in text
        with pytest.raises(ValueError, match="--width sets width for toy-wl, not depth"):
            registry.register_workload(registry.WorkloadEntry("toy-2", "toy_wl:make", flags=(
                registry.WorkloadOption("depth", "--width", "int"),)))  # fmt: skip
        cfg = from_dict({"workload": {"name": "toy-wl"}})
        assert cfg.train.lr == 0.0123
        with pytest.raises(ConfigError, match="toy-wl takes width only"):
            check_options(from_dict({"workload": {"name": "toy-wl",
                                                  "options": {"depth": 2}}}).workload)  # fmt: skip
        out = tmp_path / "run"
        assert main(["run", "-q", "--workload", "toy-wl", "--epochs", "1", "--width", "3",
                     "--max-steps-per-epoch", "2", "--out", str(out)]) == 0  # fmt: skip
        assert json.loads((out / "summary.json").read_text())["status"] == "completed"
        saved = (out / "config.yaml").read_text()
        assert "options:\n    width: 3" in saved
    finally:
        registry.unregister_workload("toy-wl")
        sys.modules.pop("toy_wl", None)
    with pytest.raises(ConfigError, match="unknown workload 'toy-wl'"):
        from_dict({"workload": {"name": "toy-wl"}})
