"""The run timeline: per-rank records on one axis, drawn as plots/timeline.png.

Run directories are written here in the layout training uses (summary.json with its
clock, metrics.jsonl with timed steps, system.jsonl with ``mono``; rank R in
``ranks/rank<R>/``), so the tests need neither torch nor a GPU.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.reports.runs import assert_png
from trainscope.analysis.timeline import (
    MAX_DRAWN_RANKS,
    _occupancy,
    load_timeline,
    timeline_figure,
    timeline_section,
)
from trainscope.records.run_dir import load_run
from trainscope.render.document import Document, Figure, Heading, Note, Paragraph

# The wall-clock time of rank 0's origin in the synthetic runs.
U0 = 1_700_000_000.0
SETUP_S = 0.3
VAL_S = 0.05
TEST_S = 0.04
STEP_STAGES = {"data_wait": 0.001, "h2d": 0.0001, "forward": 0.002, "backward": 0.004}


def _jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def _write_rank(
    d: Path,
    summary: dict[str, Any],
    *,
    origin: float | None,
    steps: int,
    epochs: int,
    with_t: bool,
    gpu: bool,
    step_s: float,
    comm: bool,
    old_system: bool,
    checkpoint_s: float | None,
) -> None:
    d.mkdir(parents=True, exist_ok=True)
    summary = dict(summary)
    if origin is not None:
        summary["clock"] = {"unix_at_origin": origin}
    (d / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    metrics: list[dict[str, Any]] = [{"event": "setup", "seconds": SETUP_S}]
    t, n = SETUP_S, 0
    for ep in range(1, epochs + 1):
        t_start = t
        for _ in range(steps // epochs):
            n += 1
            stages = dict(STEP_STAGES)
            if comm:
                stages["comm"] = 0.0005
            stages["optimizer"] = 0.001
            line = {"event": "step", "step": n, "epoch": ep, "loss": 2.3 * math.exp(-n / 50)}
            line |= {"batch_size": 64, "stages": stages}
            if with_t:
                line["t"] = round(t, 6)
            metrics.append(line)
            t += step_s
        val_t = t
        t += VAL_S
        metrics.append(
            {"event": "epoch", "epoch": ep, "t_start": t_start, "t_end": val_t, "train_loss": 1.0}
            | {"val_t": val_t, "val_s": VAL_S}
        )
        if checkpoint_s is not None:  # as the trainer logs one: after the epoch's validation
            path = f"checkpoints/step-{n}"
            metrics.append(
                {"event": "checkpoint", "step": n, "path": path, "t": t, "seconds": checkpoint_s}
            )
            t += checkpoint_s
    metrics.append({"event": "test", "t": t, "seconds": TEST_S, "accuracy": 0.9})
    t += TEST_S
    _jsonl(d / "metrics.jsonl", metrics)
    system = []
    for k in range(int(t / 0.1) + 1):
        mono = k * 0.1
        sample: dict[str, Any] = {"t": (origin or U0) + mono, "cpu_percent": 95.0 + k % 7}
        sample |= {"rss_bytes": 300_000_000 + 1000 * k, "system_memory_percent": 40.0}
        if not old_system:
            sample["mono"] = round(mono, 6)
        if gpu:
            sample["gpus"] = [
                {"index": 0, "util_percent": 80 + k % 5, "power_w": 250.0}
                | {"memory_used_bytes": 5 << 30, "memory_total_bytes": 80 << 30},
                {"index": 1, "error": "NVML: GPU is lost"},
            ]
        system.append(sample)
    _jsonl(d / "system.jsonl", system)


def write_run_dir(
    root: Path,
    name: str = "run",
    *,
    world_size: int = 1,
    steps: int = 20,
    epochs: int = 2,
    with_t: bool = True,
    gpu: bool = False,
    step_s: float = 0.01,
    rank_offsets: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75),
    old_system: bool = False,
    clock: bool = True,
    summary: dict[str, Any] | None = None,
    checkpoint_s: float | None = None,
) -> Path:
    """A run directory with ``world_size`` ranks; rank R's origin is ``rank_offsets[R]``
    seconds after rank 0's (every rank records the same local times). With
    ``checkpoint_s``, a checkpoint of that many seconds is written after every epoch."""
    run = root / name
    base = {"status": "completed", "workload": "digits", "model": "LeNet5", "device": "cpu"}
    base |= {"precision": "fp32", "timing_mode": "perf_counter", "world_size": world_size}
    base |= summary or {}
    for rank in range(world_size):
        _write_rank(
            run if rank == 0 else run / "ranks" / f"rank{rank}",
            base | {"rank": rank},
            origin=U0 + rank_offsets[rank] if clock else None,
            steps=steps,
            epochs=epochs,
            with_t=with_t,
            gpu=gpu,
            step_s=step_s,
            comm=world_size > 1,
            old_system=old_system,
            checkpoint_s=checkpoint_s,
        )
    return run


def _blocks(doc: Document, kind: type) -> list[Any]:
    return [b for b in doc.blocks if isinstance(b, kind)]


def test_one_rank_timeline_section_draws_png_and_svg(tmp_path: Path) -> None:
    record = load_run(write_run_dir(tmp_path))
    doc = Document("t")
    files = timeline_section(record, doc, tmp_path / "plots")
    assert [f.name for f in files] == ["timeline.png", "timeline.svg"]
    assert_png(files[0])
    assert files[1].read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert _blocks(doc, Heading)[0].text == "Timeline"
    assert _blocks(doc, Figure)[0].path == files[0]
    text = " ".join(p.text for p in _blocks(doc, Paragraph))
    assert "seconds since the run's clock origin" in text
    assert "CUDA events" in text and "host step start" in text
    assert not _blocks(doc, Note)


def test_two_ranks_draw_one_row_each_on_a_shared_axis(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, gpu=True)
    timeline = load_timeline(run)
    assert [r.rank for r in timeline.ranks] == [0, 1]
    r0, r1 = timeline.ranks
    assert r1.offset_s == pytest.approx(0.25)
    assert r1.steps[0].t - r0.steps[0].t == pytest.approx(0.25)
    assert r1.epochs[0].start - r0.epochs[0].start == pytest.approx(0.25)
    assert r1.system[("cpu_percent", None)][0][0] == pytest.approx(0.25)
    # The GPU entry with an error has no numbers and makes no series.
    assert {k for k in r0.system if k[1] is not None} == {
        ("util_percent", 0),
        ("memory_used_bytes", 0),
        ("power_w", 0),
    }
    assert [name for name, _ in r0.steps[0].stages] == [
        "data_wait",
        "h2d",
        "forward",
        "backward",
        "comm",
        "optimizer",
    ]
    doc = Document("t")
    files = timeline_section(load_run(run), doc, tmp_path / "plots")
    assert_png(files[0])
    assert "clock sync" in " ".join(p.text for p in _blocks(doc, Paragraph))


def test_checkpoints_are_spans_on_the_timeline_and_drawn(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from trainscope.analysis.timeline import _draw_stage_row

    run = write_run_dir(tmp_path, steps=20, epochs=2, checkpoint_s=0.2)
    timeline = load_timeline(run)
    (r0,) = timeline.ranks
    ckpts = [sp for sp in r0.spans if sp.name == "checkpoint"]
    # After epoch 1's validation: setup, 10 steps of 10 ms, validation.
    first = SETUP_S + 10 * 0.01 + VAL_S
    assert [(sp.step, sp.duration) for sp in ckpts] == [(10, 0.2), (20, 0.2)]
    assert ckpts[0].start == pytest.approx(first)
    assert ckpts[1].start == pytest.approx(first + 0.2 + 10 * 0.01 + VAL_S)
    # The axis reaches the end of the run, the last checkpoint included.
    assert timeline.bounds()[1] == pytest.approx(ckpts[1].start + 0.2 + TEST_S)
    fig, ax = plt.subplots()
    try:
        drawn = _draw_stage_row(ax, r0, 0.0, *timeline.bounds())
    finally:
        plt.close(fig)
    assert "checkpoint" in drawn  # in the stage row, in the checkpoint stage's colour
    doc = Document("t")
    assert_png(timeline_section(load_run(run), doc, tmp_path / "plots")[0])
    assert "checkpoint writes" in " ".join(p.text for p in _blocks(doc, Paragraph))


def test_short_steps_are_drawn_as_shares_and_the_report_says_so(tmp_path: Path) -> None:
    record = load_run(write_run_dir(tmp_path, steps=2000))
    doc = Document("t")
    assert_png(timeline_section(record, doc, tmp_path / "plots")[0])
    assert "share of that column's time" in " ".join(p.text for p in _blocks(doc, Paragraph))


def test_many_ranks_draw_a_bounded_number_of_rows(tmp_path: Path) -> None:
    offsets = tuple(0.01 * r for r in range(MAX_DRAWN_RANKS + 1))
    run = write_run_dir(tmp_path, world_size=len(offsets), steps=4, rank_offsets=offsets)
    doc = Document("t")
    assert_png(timeline_section(load_run(run), doc, tmp_path / "plots")[0])
    (note,) = _blocks(doc, Note)
    assert f"first {MAX_DRAWN_RANKS} of {MAX_DRAWN_RANKS + 1} ranks" in note.text


def test_record_without_step_times_gets_a_note_not_a_figure(tmp_path: Path) -> None:
    record = load_run(write_run_dir(tmp_path, with_t=False))
    doc = Document("t")
    assert timeline_section(record, doc, tmp_path / "plots") == []
    assert not _blocks(doc, Figure)
    (note,) = _blocks(doc, Note)
    assert "No timeline" in note.text and "`t`" in note.text
    assert not (tmp_path / "plots" / "timeline.png").exists()
    assert timeline_figure(load_timeline(record), tmp_path / "x.png") == []


def test_run_without_steps_says_so(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, steps=0)
    doc = Document("t")
    assert timeline_section(load_run(run), doc, tmp_path / "plots") == []
    assert "no training steps" in _blocks(doc, Note)[0].text


def test_older_system_samples_are_aligned_by_the_clock_origin(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, old_system=True)
    r0, r1 = load_timeline(run).ranks
    assert [x for x, _ in r0.system[("cpu_percent", None)][:3]] == pytest.approx([0, 0.1, 0.2])
    assert r1.system[("rss_bytes", None)][1][0] == pytest.approx(0.35)


def test_without_clock_nothing_is_shifted_or_guessed(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, old_system=True, clock=False)
    timeline = load_timeline(run)
    assert timeline.origin_unix is None
    assert all(r.offset_s == 0 and not r.system for r in timeline.ranks)
    notes = " ".join(timeline.notes)
    assert "rank 1: no clock origin" in notes and "system sample(s)" in notes


def test_missing_and_unreadable_ranks_are_noted(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=3)
    (run / "ranks" / "rank2" / "summary.json").unlink()
    (run / "ranks" / "rank7").mkdir()  # a stray folder is reported, not fatal
    timeline = load_timeline(run)
    assert [r.rank for r in timeline.ranks] == [0, 1]
    assert any("rank 2 left out" in n for n in timeline.notes)
    assert any("rank 7 left out" in n for n in timeline.notes)
    doc = Document("t")
    timeline_section(load_run(run), doc, tmp_path / "plots")
    assert len(_blocks(doc, Note)) == 2


def test_bad_values_in_the_record_are_skipped(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"event": "step", "step": 99, "t": NaN, "stages": {"forward": 1}}\n')
        f.write('{"event": "step", "step": 100, "t": 9.0, "stages": {"forward": -1, "x": "a"}}\n')
        f.write('{"event": "step", "step": 101, "t": true, "stages": []}\n')
        f.write('{"event": "epoch", "epoch": 3, "t_start": 5, "t_end": 1}\n')
    timeline = load_timeline(run)
    (r0,) = timeline.ranks
    assert r0.steps[-1].step == 100 and r0.steps[-1].stages == ()
    assert r0.steps_without_t == 2
    assert len(r0.epochs) == 2
    assert_png(timeline_figure(timeline, tmp_path / "t.png")[0])


def test_record_text_is_drawn_as_plain_text(tmp_path: Path) -> None:
    odd = {"workload": "$\\invalid{$ x", "model": "a\x1b[2Jb\n"}
    run = write_run_dir(tmp_path, summary=odd, gpu=True)
    assert_png(timeline_figure(load_timeline(run), tmp_path / "t.png")[0])


def test_occupancy_matches_a_direct_sum() -> None:
    rng = np.random.default_rng(0)
    starts = np.sort(rng.uniform(0, 10, 300))
    durs = rng.uniform(0, 0.2, 300)  # some overlap: they count twice, as measured
    edges = np.linspace(-1, 11, 97)
    got = _occupancy(starts, durs, edges)
    want = [
        sum(max(0.0, min(b, s + d) - max(a, s)) for s, d in zip(starts, durs))
        for a, b in zip(edges[:-1], edges[1:])
    ]
    assert got == pytest.approx(want, abs=1e-9)
    assert got.sum() == pytest.approx(durs.sum())


@pytest.mark.slow  # the scale test: 2 x 20,000 steps written, read and drawn
def test_twenty_thousand_steps_draw_in_seconds(tmp_path: Path) -> None:
    run = write_run_dir(tmp_path, world_size=2, steps=20_000, epochs=4, gpu=True)
    timeline = load_timeline(run)
    assert sum(len(r.steps) for r in timeline.ranks) == 40_000
    start = time.perf_counter()
    files = timeline_figure(timeline, tmp_path / "t.png", tmp_path / "t.svg")
    elapsed = time.perf_counter() - start
    assert_png(files[0])
    # Binned, the figure is a few thousand polygons whatever the step count (a few
    # seconds here; the bound is loose for a shared machine).
    assert elapsed < 30, f"drawing 2 x 20k steps took {elapsed:.1f} s"
    assert files[1].stat().st_size < 5_000_000


def test_a_pipeline_steps_microbatches_are_read_and_bad_ones_skipped() -> None:
    from trainscope.analysis.timeline import Chunk, _chunks

    raw = [
        ["F", 0, 1, 0.5, 0.75],
        ["B", 1, 0, 1.0, 1.25],
        ["X", 0, 0, 0.0, 1.0],  # unknown kind
        ["F", True, 0, 0.0, 1.0],  # a bool is not a stage
        ["F", 0, 0, float("nan"), 1.0],
        ["F", 0, 0, 2.0, 1.0],  # ends before it starts
        ["F", 0, 0],  # short
        "F",
    ]
    assert _chunks(raw, offset=10.0) == (
        Chunk("F", 0, 1, 10.5, 10.75),
        Chunk("B", 1, 0, 11.0, 11.25),
    )
    assert _chunks({"F": 1}, 0.0) == () and _chunks(None, 0.0) == ()


def test_a_pipeline_steps_forward_and_backward_are_drawn_where_its_microbatches_ran() -> None:
    from trainscope.analysis.timeline import Chunk, Step, _stage_intervals

    step = Step(
        step=1, epoch=1, t=10.0,
        stages=(("data_wait", 0.1), ("forward", 0.2), ("backward", 0.3),
                ("pipeline_wait", 0.4), ("optimizer", 0.05)),
        chunks=(Chunk("F", 0, 0, 10.1, 10.2), Chunk("F", 0, 1, 10.3, 10.4),
                Chunk("B", 0, 0, 10.6, 10.9), Chunk("L", 1, -1, 10.5, 10.55)),
    )  # fmt: skip
    got = _stage_intervals([step])
    assert got["data_wait"] == ([10.0], [0.1])
    assert got["forward"][0] == [10.1, 10.3]
    assert got["backward"][0] == [10.6, 10.5]  # the loss is in "loss + backward"
    assert "pipeline_wait" not in got  # the gaps between microbatches are the wait
    assert got["optimizer"][0] == [pytest.approx(11.0)]  # after the whole schedule
