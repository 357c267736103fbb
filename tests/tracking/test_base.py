"""Sinks fan-out, failure isolation, thread safety, the scalar names, and make_sinks."""

from __future__ import annotations

import builtins
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.tracking import CONFIG, fake_epoch, fake_sample, fake_steps, fake_summary
from trainscope.errors import ConfigError, TrainscopeError
from trainscope.tracking import (
    SINK_NAMES,
    Sink,
    Sinks,
    epoch_scalars,
    flat_summary,
    make_sinks,
    step_scalars,
    system_scalars,
)

pytestmark = pytest.mark.timeout(120)


class Recorder(Sink):
    """Keeps every call it gets."""

    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.calls: list[tuple[str, Any]] = []

    def start(self, run_dir: Path, config: dict[str, Any], summary: dict[str, Any]) -> None:
        self.calls.append(("start", run_dir))

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        self.calls.append(("log_steps", [r["step"] for r in records]))

    def log_epoch(self, row: dict[str, Any]) -> None:
        self.calls.append(("log_epoch", row["epoch"]))

    def log_system(self, sample: dict[str, Any]) -> None:
        self.calls.append(("log_system", sample["t"]))

    def finish(self, summary: dict[str, Any]) -> None:
        self.calls.append(("finish", summary["status"]))


class Failing(Recorder):
    """Raises in one method, records the rest."""

    def __init__(self, fail_in: str, error: BaseException | None = None) -> None:
        super().__init__("failing")
        self.fail_in = fail_in
        self.error = error or RuntimeError("tracking service\nunreachable")

    def __getattribute__(self, attr: str) -> Any:
        if attr == object.__getattribute__(self, "fail_in"):

            def fail(*args: Any) -> None:
                raise object.__getattribute__(self, "error")

            return fail
        return object.__getattribute__(self, attr)


def drive(sinks: Sinks, run_dir: Path) -> None:
    """One short run's worth of calls."""
    sinks.start(run_dir, CONFIG, {"status": "running"})
    sinks.log_steps(fake_steps(1, 1, 2))
    sinks.log_system(fake_sample(100.0))
    sinks.log_epoch(fake_epoch(1, val=True))
    sinks.log_steps(fake_steps(2, 3, 2))
    sinks.finish(fake_summary())


EXPECTED_CALLS = [
    "start",
    "log_steps",
    "log_system",
    "log_epoch",
    "log_steps",
    "finish",
]


def test_base_sink_methods_are_no_ops(tmp_path: Path) -> None:
    drive(Sinks([Sink()]), tmp_path)  # nothing raises, nothing to check beyond that


def test_fan_out_reaches_every_sink_in_order(tmp_path: Path) -> None:
    a, b = Recorder("a"), Recorder("b")
    sinks = Sinks([a, b])
    drive(sinks, tmp_path)
    for sink in (a, b):
        assert [c for c, _ in sink.calls] == EXPECTED_CALLS
    assert a.calls[1] == ("log_steps", [1, 2]) and a.calls[-1] == ("finish", "completed")
    assert sinks.names == ["a", "b"] and len(sinks) == 2
    assert sinks.warnings_list == [] and sinks.describe()["disabled"] == []


def test_empty_sinks_do_nothing(tmp_path: Path) -> None:
    sinks = make_sinks([])
    assert len(sinks) == 0 and sinks.names == []
    drive(sinks, tmp_path)
    assert sinks.describe() == {"sinks": [], "disabled": [], "warnings": []}


def test_a_failing_sink_is_disabled_once_and_the_others_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, bad, after = Recorder("before"), Failing("log_steps"), Recorder("after")
    sinks = Sinks([before, bad, after])
    drive(sinks, tmp_path)
    # The failing sink got start, then nothing after its failure (not even finish).
    assert [c for c, _ in bad.calls] == ["start"]
    for sink in (before, after):
        assert [c for c, _ in sink.calls] == EXPECTED_CALLS
    assert len(sinks.warnings_list) == 1
    message = sinks.warnings_list[0]
    assert "'failing'" in message and "log_steps()" in message
    assert "RuntimeError: tracking service unreachable" in message  # one line
    assert "\n" not in message
    err = capsys.readouterr().err
    assert err.count("warning: tracking sink 'failing'") == 1
    assert sinks.describe() == {
        "sinks": ["before", "failing", "after"],
        "disabled": ["failing"],
        "warnings": [message],
    }


@pytest.mark.parametrize("method", ["start", "log_system", "log_epoch", "finish"])
def test_failure_in_any_method_is_contained(tmp_path: Path, method: str) -> None:
    good = Recorder()
    sinks = Sinks([Failing(method), good])
    drive(sinks, tmp_path)
    assert [c for c, _ in good.calls] == EXPECTED_CALLS
    assert sinks.describe()["disabled"] == ["failing"]
    assert f"{method}()" in sinks.warnings_list[0]


def test_calls_after_finish_are_ignored(tmp_path: Path) -> None:
    sink = Recorder()
    sinks = Sinks([sink])
    drive(sinks, tmp_path)
    sinks.log_system(fake_sample(200.0))  # the sampler's last tick racing the end
    sinks.log_steps(fake_steps(3, 9, 1))
    sinks.finish(fake_summary())
    assert [c for c, _ in sink.calls] == EXPECTED_CALLS


def test_keyboard_interrupt_is_not_swallowed(tmp_path: Path) -> None:
    sinks = Sinks([Failing("log_steps", KeyboardInterrupt())])
    with pytest.raises(KeyboardInterrupt):
        sinks.log_steps(fake_steps(1, 1, 1))
    assert sinks.warnings_list == []


def test_two_sinks_of_the_same_name_are_disabled_separately(tmp_path: Path) -> None:
    bad, good = Failing("log_epoch"), Recorder("failing")  # same name on purpose
    sinks = Sinks([bad, good])
    drive(sinks, tmp_path)
    assert [c for c, _ in good.calls] == EXPECTED_CALLS


class Overlap(Sink):
    """Notices when two threads are inside it at the same time."""

    name = "overlap"

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.calls = 0

    def _enter(self) -> None:
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        time.sleep(0.0005)  # widen the window a race would need
        self.calls += 1
        self.inside -= 1

    def log_steps(self, records: list[dict[str, Any]]) -> None:
        self._enter()

    def log_system(self, sample: dict[str, Any]) -> None:
        self._enter()


def test_log_system_from_other_threads_never_overlaps_other_calls() -> None:
    sink = Overlap()
    sinks = Sinks([sink])

    def sampler() -> None:
        for i in range(50):
            sinks.log_system(fake_sample(float(i), gpu=False))

    threads = [threading.Thread(target=sampler) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(50):
        sinks.log_steps(fake_steps(1, i + 1, 1))
    for t in threads:
        t.join(timeout=60)
    assert sink.calls == 200 and sink.overlaps == 0


# --- scalar names ------------------------------------------------------------------------


def test_step_scalars() -> None:
    record = fake_steps(1, 4, 1)[0]
    out = step_scalars(record)
    assert out["train/loss"] == pytest.approx(2.5 / 4)
    assert set(out) == {"train/loss"} | {f"stages/{k}_s" for k in record["stages"]}
    assert out["stages/forward_s"] == record["stages"]["forward"]


def test_epoch_scalars_skip_missing_validation() -> None:
    assert set(epoch_scalars(fake_epoch(1, val=False))) == {
        "epoch/train_loss",
        "epoch/duration_s",
        "epoch/samples_per_s",
    }
    out = epoch_scalars(fake_epoch(2, val=True))
    assert out["epoch/val_accuracy"] == pytest.approx(0.7)
    assert "epoch/epoch" not in out  # the epoch is the x-axis, not a value


def test_system_scalars_convert_units_and_skip_failed_gpus() -> None:
    out = system_scalars(fake_sample(5.0))
    assert out == {
        "system/cpu_percent": 150.0,
        "system/rss_mib": 512.0,
        "system/memory_percent": 40.0,
        "system/gpu0_util_percent": 87.0,
        "system/gpu0_memory_used_mib": 2048.0,
        "system/gpu0_power_w": 312.5,
    }
    assert set(system_scalars(fake_sample(5.0, gpu=False))) == {
        "system/cpu_percent",
        "system/rss_mib",
        "system/memory_percent",
    }


def test_flat_summary_keeps_scalars_and_flattens_dicts() -> None:
    out = flat_summary(fake_summary())
    assert out["status"] == "completed" and out["test_accuracy"] == 0.9375
    assert out["steps"] == 8 and isinstance(out["steps"], int)
    assert out["stages_s/forward"] == 2.0 and out["per_class_accuracy/1"] == 0.875
    assert "epochs" not in out and "first_losses" not in out  # lists are left out
    assert "error" not in out  # None is left out


# --- make_sinks ----------------------------------------------------------------------------


def test_unknown_sink_name_lists_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        make_sinks(["tensorboard", "mlflow"])
    message = str(info.value)
    assert "'mlflow'" in message
    for name in SINK_NAMES:
        assert name in message


@pytest.mark.parametrize("name", SINK_NAMES)
def test_missing_package_gives_the_pip_hint(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # None in sys.modules makes `import <name>` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(TrainscopeError) as info:
        make_sinks([name])
    assert not isinstance(info.value, ConfigError)
    assert f'pip install "trainscope[{name}]"' in str(info.value)


def test_a_broken_install_is_reported_like_a_missing_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "wandb":  # e.g. a protobuf version clash failing at import time
            raise TypeError("Descriptors cannot be created directly")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(TrainscopeError, match=r"trainscope\[wandb\].*") as info:
        make_sinks(["wandb"])
    assert "Descriptors cannot be created directly" in str(info.value)


def test_importing_the_package_imports_no_tracker_and_no_torch() -> None:
    code = (
        "import sys, trainscope.tracking; "
        "print(sorted(m for m in ('torch', 'wandb', 'tensorboard') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
