"""The run report's "Ranks and stragglers" section: its tables, its findings and notes, and
record text kept literal (the analysis itself: tests/diagnosis/test_stragglers.py).

Unit tests write per-rank records by hand (no torch); the end-to-end tests run a
two-process launch (gloo on 127.0.0.1) with a workload whose rank 1 loads data slowly,
in-process with the two ranks forked from the test process (tests/forked_launch.py): the
ranks' records are tested here, not how they start (a launch's real start, the workload
found in the current directory included: tests/launch/test_processes.py). The record
writers here are shared with the analysis tests.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from trainscope.cli import main
from trainscope.diagnosis.stragglers import NO_STRAGGLER, analyze_stragglers, load_rank_steps
from trainscope.records.run_dir import load_run
from trainscope.render.document import Document, Heading, Note, TableBlock
from trainscope.reports.stragglers import rank_stage_table, straggler_section, waiting_table

pytestmark = pytest.mark.timeout(60)

MS = 1e-3

# ---------------------------------------------------------------------------------------
# Hand-written multi-rank records
# ---------------------------------------------------------------------------------------


def make_steps(
    n: int,
    *,
    seed: int,
    data_wait: float = 0.5 * MS,
    forward: float = 3 * MS,
    backward: float = 4 * MS,
    comm: float | None = 2 * MS,
    noise: float = 0.3 * MS,
) -> list[dict[str, Any]]:
    """``n`` step lines, each stage its base time plus uniform noise of up to ``noise``."""
    rng = random.Random(seed)

    def jitter(x: float) -> float:
        return max(x + rng.uniform(-noise, noise), 1e-6)

    out = []
    for i in range(1, n + 1):
        stages = {
            "data_wait": jitter(data_wait),
            "h2d": 2e-5,
            "forward": jitter(forward),
            "backward": jitter(backward),
        }
        if comm is not None:
            stages["comm"] = jitter(comm)
        stages["optimizer"] = jitter(0.6 * MS)
        out.append(
            {
                "event": "step",
                "step": i,
                "epoch": 1,
                "loss": 2.3,
                "batch_size": 16,
                "stages": stages,
            }
        )
    return out


def write_ranks(
    root: Path,
    per_rank: dict[int, list[dict[str, Any]] | None],
    *,
    strategy: str = "allreduce",
    warmup: int = 0,
    world: int | None = None,
) -> Path:
    """A run directory as a multi-process run leaves it; ``None``: that rank's file is absent."""
    world = len(per_rank) if world is None else world
    root.mkdir(parents=True)
    summary = {
        "schema_version": 1,
        "status": "completed",
        "workload": "synthetic",
        "strategy": strategy,
        "world_size": world,
        "steady_state": {"warmup_steps": warmup},
        "ranks": [{"rank": r, "local_rank": r, "host": "node-a"} for r in range(world)],
    }
    (root / "summary.json").write_text(json.dumps(summary))
    (root / "metrics.jsonl").write_text("")
    for rank, lines in per_rank.items():
        if lines is None:
            continue
        path = (
            root / "metrics.jsonl"
            if rank == 0
            else root / "ranks" / f"rank{rank}" / "metrics.jsonl"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in [{"event": "setup"}, *lines])
        path.write_text(text)
    return root


def slow_data_on_rank_1(
    n: int = 20, delay: float = 12 * MS, strategy: str = "allreduce"
) -> dict[int, list[dict[str, Any]] | None]:
    """Rank 1 waits ``delay`` longer for data each step; rank 0 waits as long for it where
    the strategy communicates (comm, inside backward, or inside forward and backward)."""
    if strategy == "ddp":
        extra, comm = {"backward": 4 * MS + delay}, None
    elif strategy == "fsdp":
        extra, comm = {"forward": 3 * MS + delay / 2, "backward": 4 * MS + delay / 2}, None
    else:
        extra, comm = {"comm": 2 * MS + delay}, 2 * MS
    rank0 = make_steps(n, seed=0, **{"comm": comm, **extra})
    rank1 = make_steps(n, seed=1, data_wait=0.5 * MS + delay, comm=comm)
    return {0: rank0, 1: rank1}


def _section(path: Path) -> tuple[Document, list[str]]:
    doc = Document("t")
    findings = straggler_section(load_run(path), doc)
    doc.to_markdown(path)  # both renderings work on what was added
    doc.to_html()
    return doc, findings


# ---------------------------------------------------------------------------------------
# Synthetic records
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "where"),
    [
        ("allreduce", "in communication (the comm stage)"),
        ("gather-scatter", "in communication (the comm stage)"),
        ("ddp", "in communication (inside backward under DDP)"),
        ("fsdp", "in communication (inside forward and backward under FSDP)"),
    ],
)
def test_a_rank_slow_in_data_wait_is_named_and_the_other_waits_for_it(
    tmp_path: Path, strategy: str, where: str
) -> None:
    run = write_ranks(tmp_path / "r", slow_data_on_rank_1(strategy=strategy), strategy=strategy)
    doc, findings = _section(run)
    assert len(findings) == 1, findings
    text = findings[0]
    assert text.startswith("rank 1 is the straggler: its data wait is ")
    assert "ms on the fastest rank; the other rank waits " in text
    assert text.endswith(f"ms/step for it {where}")
    # The waiting is the delay (12 ms) give or take the noise of the two ranks.
    waited = float(text.split("the other rank waits ")[1].split(" ms/step")[0])
    assert 10 < waited < 14
    assert isinstance(doc.blocks[0], Heading) and doc.blocks[0].text == "Ranks and stragglers"
    tables = [b.table for b in doc.blocks if isinstance(b, TableBlock)]
    assert [t.label for t in tables] == ["tab:rank-stages", "tab:rank-waiting"]
    stages = {row[0]: row for row in tables[0].rows}
    assert stages["data wait"][7] == "1"  # the slowest rank, beyond noise
    assert stages["optimizer step"][7].endswith("(within noise)")
    waiting = {row[0]: row for row in tables[1].rows}
    assert float(waiting["0"][2]) > 10 and waiting["1"][2] == "0.0"


def test_equal_ranks_with_noise_have_no_straggler(tmp_path: Path) -> None:
    per_rank = {r: make_steps(30, seed=r, noise=1 * MS) for r in range(4)}
    run = write_ranks(tmp_path / "r", per_rank)
    doc, findings = _section(run)
    assert findings == [NO_STRAGGLER]
    assert "no straggler: per-rank stage times within noise" in doc.to_markdown(tmp_path)
    stage_rows = next(b.table for b in doc.blocks if isinstance(b, TableBlock)).rows
    assert all(row[7].endswith("(within noise)") for row in stage_rows)


def test_warm_up_steps_are_left_out(tmp_path: Path) -> None:
    # The first collective waits for the slowest start-up: a huge comm on rank 1 at
    # step 1 that must not count (the summary says 2 warm-up steps).
    per_rank = slow_data_on_rank_1()
    per_rank[1][0]["stages"]["comm"] = 0.5
    run = write_ranks(tmp_path / "r", per_rank, warmup=2)
    a = analyze_stragglers(load_rank_steps(load_run(run)).steps, "allreduce", warmup_steps=2)
    assert a.steps == list(range(3, 21)) and a.warmup_left_out == 2
    assert a.straggler == 1
    _, findings = _section(run)
    assert findings[0].startswith("rank 1 is the straggler")
    table = rank_stage_table(a)
    assert "the first 2 warm-up steps left out" in table.caption


def test_a_data_only_run_has_no_waiting(tmp_path: Path) -> None:
    per_rank = {
        r: [
            {
                "event": "step",
                "step": i,
                "stages": {"data_wait": (10 if r else 0.5) * MS + i % 2 * 2e-5},
            }
            for i in range(1, 11)
        ]
        for r in (0, 1)
    }
    run = write_ranks(tmp_path / "r", per_rank, strategy="ddp")
    doc, findings = _section(run)
    assert findings == [
        "rank 1 is slower: its data wait is 10.0 ms/step against 0.51 ms on the fastest "
        "rank; this run has no gradient communication, so no rank waits for it"
    ]
    labels = [b.table.label for b in doc.blocks if isinstance(b, TableBlock)]
    assert labels == ["tab:rank-stages"]  # no waiting table without a communication stage


def test_a_missing_rank_file_is_a_clear_note(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", {0: make_steps(10, seed=0), 1: None})
    doc, findings = _section(run)
    assert len(findings) == 1
    text = findings[0]
    assert text.startswith("no straggler analysis: per-rank step records are missing")
    assert "rank 1: `ranks/rank1/metrics.jsonl` not found" in text
    assert [type(b) for b in doc.blocks] == [Heading, Note]
    assert "ranks/rank1/metrics.jsonl" in doc.to_markdown(tmp_path)


def test_a_rank_file_without_step_lines_is_named(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", {0: make_steps(10, seed=0), 1: []})
    _, findings = _section(run)
    assert "rank 1: `ranks/rank1/metrics.jsonl` has no step lines" in findings[0]


def test_the_remaining_ranks_are_compared_when_one_is_missing(tmp_path: Path) -> None:
    per_rank = slow_data_on_rank_1()
    per_rank[2] = None
    run = write_ranks(tmp_path / "r", per_rank)
    loaded = load_rank_steps(load_run(run))
    assert sorted(loaded.steps) == [0, 1] and loaded.missing == {
        2: ("ranks/rank2/metrics.jsonl", "not found")
    }
    doc, findings = _section(run)
    assert "only ranks 0, 1 are compared, and a missing rank may be the straggler" in findings[0]
    assert findings[1].startswith("rank 1 is the straggler: its data wait is ")


def test_a_one_rank_run_adds_nothing(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "r", {0: make_steps(10, seed=0)}, strategy="single")
    doc, findings = _section(run)
    assert findings == [] and doc.blocks == []
    # A record from before world_size was written counts as one rank too.
    summary = json.loads((run / "summary.json").read_text())
    del summary["world_size"], summary["ranks"]
    (run / "summary.json").write_text(json.dumps(summary))
    doc, findings = _section(run)
    assert findings == [] and doc.blocks == []


def test_record_text_stays_literal(tmp_path: Path) -> None:
    per_rank = slow_data_on_rank_1()
    for line in per_rank[1]:
        line["stages"]["**load** `x`"] = line["stages"].pop("data_wait")
    for line in per_rank[0]:
        line["stages"]["**load** `x`"] = line["stages"].pop("data_wait")
    run = write_ranks(tmp_path / "r", per_rank)
    doc, findings = _section(run)
    html = doc.to_html()
    assert "<strong>" not in html and "<code>x</code>" not in html
    assert "**load** `x`" in html


def test_markup_in_a_stage_name_is_not_obeyed(tmp_path: Path) -> None:
    # The analysis' findings are plain text: the section escapes them for the document.
    per_rank = slow_data_on_rank_1()
    for lines in per_rank.values():
        for line in lines or []:
            line["stages"]["*x* <b>"] = line["stages"].pop("data_wait")
    doc, findings = _section(write_ranks(tmp_path / "r", per_rank))
    html, md = doc.to_html(), doc.to_markdown(tmp_path)
    assert "<em>" not in html and "<b>" not in html and "*x* &lt;b&gt;" in html
    assert "<b>" not in md
    assert findings[0].startswith(r"rank 1 is the straggler: its \*x\* <b> is ")


def test_hosts_are_shown_when_ranks_span_machines(tmp_path: Path) -> None:
    a = analyze_stragglers(slow_data_on_rank_1(), "allreduce")
    table = waiting_table(a, {0: "node-a", 1: "node-b"})
    assert table.columns[1] == "Host" and [r[1] for r in table.rows] == ["node-a", "node-b"]
    assert "Host" not in waiting_table(a, {0: "node-a", 1: "node-a"}).columns


# ---------------------------------------------------------------------------------------
# A real two-process run with a slow rank
# ---------------------------------------------------------------------------------------

# The benchmark's planted straggler (benchmarks/doctor_cases.py), slower here.
WORKLOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "doctor_workloads.py"


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("strategy", "where"),
    [
        ("allreduce", "in communication (the comm stage)"),
        ("ddp", "in communication (inside backward under DDP)"),
    ],
)
def test_a_real_slow_rank_is_named_as_the_straggler(
    tmp_path: Path,
    strategy: str,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    forked_launch: list,
) -> None:
    # The workload is the user's own file in the current directory, found there as
    # --workload module:factory is; rank 1 sleeps 10 ms per sample, 40 ms per step: well
    # above what other work on a shared 2-core machine adds to either rank's steps.
    shutil.copy(WORKLOAD, tmp_path / WORKLOAD.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINSCOPE_SLOW_RANK_DELAY_S", "0.01")
    code = main([
        "run", "--workload", "doctor_workloads:slow_rank",
        "--strategy", strategy, "--nproc", "2", "--backend", "gloo",
        "--synthetic-samples", "256", "--batch-size", "8", "--loader", "torch",
        "--num-workers", "0", "--epochs", "1", "--max-steps-per-epoch", "20",
        "--timing-warmup", "2", "--no-save-weights", "--no-progress", "-q", "--out", "r",
    ])  # fmt: skip
    assert code == 0, capfd.readouterr().err
    assert [kind for kind, _ in forked_launch] == ["torchrun"]  # two ranks, forked
    record = load_run(tmp_path / "r")
    assert record.summary["world_size"] == 2 and record.summary["strategy"] == strategy
    # After the wall: a real gather across the ranks, and no weights saved (timed as 0).
    after = record.summary["after_wall_s"]
    assert after["gather_ranks"] > 0 and after["save_weights"] == 0.0, after
    doc = Document("t")
    findings = straggler_section(record, doc)
    shown = f"{doc.to_markdown(tmp_path)}\n{_per_step_ms(record)}"  # what failed, if any
    assert len(findings) == 1, shown
    assert findings[0].startswith("rank 1 is the straggler: its data wait is "), shown
    assert "the other rank waits " in findings[0] and findings[0].endswith(where), shown
    tables = {b.table.label: b.table for b in doc.blocks if isinstance(b, TableBlock)}
    waiting = {row[0]: row for row in tables["tab:rank-waiting"].rows}
    # Rank 0 waits about as long as rank 1 sleeps (40 ms/step); rank 1 hardly at all.
    assert float(waiting["0"][2]) > 20, shown
    assert float(waiting["1"][2]) < float(waiting["0"][2]) / 3, shown
    stages = {row[0]: row for row in tables["tab:rank-stages"].rows}
    assert stages["data wait"][7] == "1", shown
    if strategy == "ddp":
        _check_the_whole_report(record, tmp_path)


def _check_the_whole_report(record: Any, tmp_path: Path) -> None:
    """The 2-rank run report as a reader gets it: the straggler view and a timeline with
    one stage row per rank, a trace with one process per rank, clean in a browser, where
    the timeline and the per-rank tables are visible on a whole-page screenshot."""
    from tests.analysis.test_trace import check_trace, load_strict
    from tests.reports.browser import browser_problems, require_browser
    from trainscope.reports.run_report import build_run_report

    report = build_run_report(record.path, tmp_path / "rep")
    md = report.markdown_path.read_text(encoding="utf-8")
    assert md.splitlines()[0].endswith("(ddp, 2 processes)")
    assert "rank 1 is the straggler" in md and "![Timeline of the run" in md
    trace = load_strict(tmp_path / "rep" / "trace.json")
    check_trace(trace)
    assert {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"} == {0, 1}
    require_browser()
    shot = tmp_path / "report.png"
    # The timeline figure, the per-rank stage table (slowest rank per stage) and the
    # waiting table, each shown on the page, not only present in its source.
    must_see = ["img[alt^='Timeline']", "table#tab-rank-stages", "table#tab-rank-waiting"]
    assert browser_problems(report.html_path, screenshot=shot, visible=must_see) == []
    import matplotlib.image

    image = matplotlib.image.imread(shot)
    assert image.shape[1] >= 1000 and image.shape[0] > 2000  # the whole page, figures included
    keep = os.environ.get("TRAINSCOPE_KEEP_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / "two_rank_report.png")


def _per_step_ms(record: Any) -> str:
    """Every rank's per-step stage times in ms, one line per step (for failure messages)."""
    lines = []
    for rank, steps in sorted(load_rank_steps(record).steps.items()):
        for step in steps:
            ms = {k: round(1e3 * v, 1) for k, v in (step.get("stages") or {}).items()}
            lines.append(f"rank {rank} step {step.get('step')}: {ms}")
    return "\n".join(lines)
