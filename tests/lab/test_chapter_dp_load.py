"""Chapter 4 under other load: each script run records the load beside it, a loaded
repeat is run again (bounded) and never compared, and where the load never drops the
finding says so instead of a ratio. The scripts' runs are planted here (a fake
``_run_script`` writing the record a script writes); tests/lab/test_makers.py runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainscope.lab import chapter_dp
from trainscope.lab.steps import MakeContext
from trainscope.render.document import Document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dp_ddp"
STEP_MS = {"single": 1.0, "dp": 1.1, "ddp": 2.5}


def _record(script: str, step_ms: float) -> dict[str, Any]:
    return {
        "script": script, "world_size": 2 if script == "ddp" else 1,
        "threads_per_process": 1, "global_batch": 256, "loss_last": 0.5,
        "step_times_s": [step_ms / 1e3] * 5,
    }  # fmt: skip


class Planted:
    """Stands in for the scripts: attempt ``i`` of a script runs beside the other load
    ``loads[script][i]`` (the last value repeats), loaded runs 10x slower."""

    def __init__(self, loads: dict[str, list[float]]) -> None:
        self.loads = loads
        self.calls: list[str] = []

    def __call__(self, ctx: MakeContext, argv: list[str], log: Path) -> float:
        script = Path(argv[1]).stem
        i = sum(1 for c in self.calls if c == script)
        self.calls.append(script)
        seq = self.loads.get(script, [0.0])
        other = seq[min(i, len(seq) - 1)]
        slow = 10.0 if other >= 0.5 else 1.0
        record = Path(argv[argv.index("--json") + 1])
        record.write_text(json.dumps(_record(script, STEP_MS[script] * slow)))
        return other


@pytest.fixture
def load_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINSCOPE_IGNORE_LOAD", raising=False)
    monkeypatch.setattr(chapter_dp, "available_cpus", lambda: 2)


def _make(tmp_path: Path, planted: Planted, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(chapter_dp, "examples_dir", lambda: EXAMPLES)
    monkeypatch.setattr(chapter_dp, "_run_script", planted)
    monkeypatch.setitem(chapter_dp.BUDGET, True, ("8", 3))
    folder = tmp_path / "04-dp-ddp"
    chapter_dp.make(MakeContext(folder, True, None, lambda argv: 0))
    return folder


def _findings(folder: Path, tmp_path: Path) -> list[str]:
    plots = tmp_path / "plots"
    plots.mkdir(exist_ok=True)
    return chapter_dp.section(folder, Document("lab"), plots).findings


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs examples/dp_ddp of the checkout")
def test_a_loaded_repeat_is_run_again_and_only_clean_ones_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_rule: None
) -> None:
    # dp.py's second run had 1.9 cores of other load beside it; its re-run was quiet.
    planted = Planted({"dp": [0.0, 1.9, 0.0]})
    folder = _make(tmp_path, planted, monkeypatch)
    assert planted.calls.count("dp") == 4 and planted.calls.count("single") == 3
    loaded = json.loads((folder / "dp-r2.json").read_text())
    assert loaded["cpu"]["other_cores"] == 1.9 and loaded["cpu"]["cores"] == 2
    findings = _findings(folder, tmp_path)
    dp = next(f for f in findings if f.startswith("dp.py vs single.py"))
    # The 10x slower loaded repeat is not among the three compared: 1.10 ms, n=3.
    assert "1.10 ms vs 1.00 ms, n=3 and 3" in dp, dp


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs examples/dp_ddp of the checkout")
def test_load_that_never_drops_is_not_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_rule: None
) -> None:
    planted = Planted({"ddp": [1.4]})  # every ddp.py run beside 1.4 cores of load
    folder = _make(tmp_path, planted, monkeypatch)
    assert planted.calls.count("ddp") == 3 + chapter_dp.REMEASURE  # bounded
    findings = _findings(folder, tmp_path)
    assert any(
        f.startswith("not a finding: other processes kept 1.4 cores busy during all 5 "
                     "repeat(s) of ddp.py") for f in findings
    ), findings  # fmt: skip
    assert not any(f.startswith("ddp.py vs single.py") for f in findings), findings
    assert any(f.startswith("dp.py vs single.py") for f in findings)


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs examples/dp_ddp of the checkout")
def test_a_resumed_chapter_reruns_nothing_that_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_rule: None
) -> None:
    folder = _make(tmp_path, Planted({}), monkeypatch)
    again = Planted({})
    monkeypatch.setattr(chapter_dp, "_run_script", again)
    chapter_dp.make(MakeContext(folder, True, None, lambda argv: 0))
    assert again.calls == []


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs examples/dp_ddp of the checkout")
def test_a_lab_folder_given_relative_runs_its_scripts_by_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_rule: None
) -> None:
    """The scripts run with the chapter's folder as their working directory: with the
    README's ``--out runs/lab`` their paths were relative to it twice (chapter 4 failed)."""
    monkeypatch.chdir(tmp_path)
    planted = Planted({})
    seen: list[list[str]] = []

    def run(ctx: MakeContext, argv: list[str], log: Path) -> float:
        seen.append(argv)
        return planted(ctx, argv, log)

    monkeypatch.setattr(chapter_dp, "examples_dir", lambda: EXAMPLES)
    monkeypatch.setattr(chapter_dp, "_run_script", run)
    monkeypatch.setitem(chapter_dp.BUDGET, True, ("8", 3))
    chapter_dp.make(MakeContext(Path("runs/lab/04-dp-ddp"), True, None, lambda argv: 0))
    assert seen
    for argv in seen:
        script, record = Path(argv[1]), Path(argv[argv.index("--json") + 1])
        assert script.is_absolute() and script.is_file()
        assert record.is_absolute() and record.parent == tmp_path / "runs/lab/04-dp-ddp"
