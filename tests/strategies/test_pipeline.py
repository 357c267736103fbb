"""strategy pipeline on 2 and 4 gloo CPU processes: parity with one process, the bubble's
accounting, and what a rank keeps.

A 4-block character GPT on a 17,000-character corpus in Tiny Shakespeare's 65 symbols
(written by the test, so nothing is skipped without the shared copy; the full 1.1M
characters cost each rank ~1.5 s of encoding and shuffling windows, and parity does not
depend on the text), k = 4 AdamW steps with gradient clipping on, the same seed and
global batch. The pipeline changes only the order of sums: each microbatch's loss is its
own mean and the schedule divides gradients by M (the whole batch's mean), the tied
embedding's two gradient parts are summed across the first and the last stage, and the
clipping norm is summed over the stages. Measured: weights within 1e-8 of one process's,
losses within 1e-6. The
tolerances below leave a wide margin for that rounding; a missing gradient part or a
wrong divisor moves weights by ~1e-3 (the lr) and the test fails by far.

Every launch here forks its ranks from the test process (tests/forked_launch.py): what
the ranks train and record is tested, not how torchrun starts them (tests/launch/ and
tests/strategies/test_user_torchrun.py start real ones)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.forked_launch import forked_launches
from tests.strategies.test_parity import step_lines, weights
from trainscope.cli import main

STEPS = 4
ATOL = 1e-6
LOSS_ATOL = 1e-5
# A test runs at most a few forked launches of a few seconds each (scaled by conftest).
LAUNCH_TIMEOUT = 120
# Tiny Shakespeare's symbols: the vocabulary (65) the estimates below are computed for.
ALPHABET = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


WORDS = ["to", "be", "or", "not", "the", "king", "queen", "my", "lord", "and", "thou"]


def write_corpus(folder: Path) -> Path:
    """``folder/input.txt`` (gpt-char's layout): every symbol of ALPHABET once, then
    ~20,000 characters of lines of words drawn with a fixed seed (skewed towards a few
    letters, as text is: 4 steps visibly lower the loss). Returns ``folder``."""
    rng = random.Random(0)
    lines = [" ".join(rng.choices(WORDS, k=8)).capitalize() + "." for _ in range(500)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.txt").write_text(ALPHABET + "\n".join(lines) + "\n")
    return folder


def _common(data: Path) -> list[str]:
    return [
        "run", "--workload", "gpt-char", "--data-dir", str(data),
        "--n-layer", "4", "--n-head", "2", "--n-embd", "32", "--block-size", "16",
        "--dropout", "0", "--set", "workload.options.eval_windows=16",
        "--epochs", "1", "--max-steps-per-epoch", str(STEPS), "--batch-size", "16",
        "--grad-clip", "0.05",  # small: every step is clipped, by the global norm
        "--seed", "0", "--log-every", "1", "--device", "cpu", "--threads", "1",
        "--set", "dist.timeout_s=60", "-q", "--no-progress",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def pipe_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``get(*flags)``: the run directory of gpt-char with those flags, run once."""
    root = tmp_path_factory.mktemp("pipeline")
    data = write_corpus(root / "corpus")
    done: dict[tuple[str, ...], Path] = {}

    def get(*flags: str) -> Path:
        if flags not in done:
            out = root / (("-".join(flags) or "single").replace("-", "_").strip("_"))
            with forked_launches():  # what the ranks train is tested, not how they start
                code = main([*_common(data), *flags, "--out", str(out)])
            summary = json.loads((out / "summary.json").read_text())
            assert code == 0 and summary["status"] == "completed", summary.get("error")
            done[flags] = out
        return done[flags]

    return get


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


LAYOUTS = {
    "gpipe-2": ("--nproc", "2", "--pp-schedule", "gpipe", "--microbatches", "4"),
    "1f1b-2": ("--nproc", "2", "--pp-schedule", "1f1b", "--microbatches", "4"),
    "interleaved-2": ("--nproc", "2", "--pp-schedule", "interleaved-1f1b", "--microbatches", "4"),
    "1f1b-4": ("--nproc", "4", "--pp-schedule", "1f1b", "--microbatches", "4"),
    "measured-2": ("--nproc", "2", "--microbatches", "4", "--pp-split", "measured"),
    # 2D: two replicas of a 2-stage pipeline, each on half of the batch.
    "dp2-pp2": ("--nproc", "4", "--dp-size", "2", "--microbatches", "2"),
}


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pipeline_trains_what_one_process_trains(layout: str, pipe_run) -> None:
    single = pipe_run()
    run = pipe_run("--strategy", "pipeline", *LAYOUTS[layout])
    got, want = weights(run), weights(single)
    assert sorted(got) == sorted(want)  # every stage's tensors, under the model's names
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0.0, atol=ATOL, msg=name)
    losses = [e["loss"] for e in step_lines(run / "metrics.jsonl")]
    base = [e["loss"] for e in step_lines(single / "metrics.jsonl")]
    assert len(losses) == len(base) == STEPS
    assert losses == pytest.approx(base, abs=LOSS_ATOL)
    assert abs(base[-1] - base[0]) > 100 * LOSS_ATOL  # training moved: the check has teeth
    # Evaluation runs through every stage too: the same validation loss.
    val = [e["val_loss"] for e in _summary(run)["epochs"]]
    assert val == pytest.approx([e["val_loss"] for e in _summary(single)["epochs"]], abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_the_stages_of_every_rank_add_up_and_the_bubble_is_recorded(pipe_run) -> None:
    run = pipe_run("--strategy", "pipeline", *LAYOUTS["gpipe-2"])
    summary = _summary(run)
    pipeline = summary["parallel"]["pipeline"]
    assert pipeline["schedule"] == "gpipe" and pipeline["microbatches"] == 4
    assert pipeline["spans"] == [[0, 2], [2, 4]] and pipeline["theory_bubble"] == pytest.approx(0.2)
    assert pipeline["tied_bytes"] > 0  # the embedding tied to the head: first and last stage
    for rank, record in enumerate([summary, _summary(run / "ranks" / "rank1")]):
        stages = record["stages_s"]
        assert "pipeline_wait" in stages and stages["pipeline_wait"] >= 0
        assert sum(stages.values()) == pytest.approx(record["wall_time_s"], rel=1e-9)
        for step in step_lines(
            run / ("metrics.jsonl" if rank == 0 else "ranks/rank1/metrics.jsonl")
        ):
            assert set(step["stages"]) >= {"forward", "backward", "pipeline_wait", "comm"}
            assert min(step["stages"].values()) >= -1e-9
        comm = record["comm"]
        assert comm["pipeline_steps"] == STEPS - 1  # the first step is left out
        assert 0.0 <= comm["measured_bubble"] < 1.0
        # The wait splits into time blocked on sends and receives and the schedule's own;
        # rank 1 waits for every forward activation it receives, so its blocked time is
        # more than nothing.
        split = comm["pipeline_p2p_wait_s"] + comm["pipeline_schedule_s"]
        assert split == pytest.approx(comm["pipeline_wait_s"], rel=1e-9)
        assert comm["pipeline_p2p_wait_s"] > 0 if rank == 1 else comm["pipeline_p2p_wait_s"] >= 0
        chunks = comm["last_step_chunks"]
        # Each microbatch's forward and backward on this rank's stage, in time order.
        assert sorted((k, m) for k, s, m, _, _ in chunks if k in "FB") == sorted(
            (k, m) for k in "FB" for m in range(4)
        )
        assert all(s == rank for k, s, _, _, _ in chunks if k in "FB")
        # GPipe: every forward before any backward.
        first_b = min(a for k, _, _, a, _ in chunks if k == "B")
        assert max(b for k, _, _, _, b in chunks if k == "F") <= first_b
    # The loss lives on the last stage; rank 0 logs the global one it receives.
    ranks0 = step_lines(run / "metrics.jsonl")
    assert all("rank_loss" not in e for e in ranks0)
    assert all("rank_loss" in e for e in step_lines(run / "ranks" / "rank1" / "metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_each_rank_holds_only_its_stages(pipe_run) -> None:
    run = pipe_run("--strategy", "pipeline", *LAYOUTS["gpipe-2"])
    single = _summary(pipe_run())["memory"]["parameters_bytes"]
    summary = _summary(run)
    per_rank = [summary["memory"]["parameters_bytes"],
                _summary(run / "ranks" / "rank1")["memory"]["parameters_bytes"]]  # fmt: skip
    # Each rank far less than the whole; together the whole plus the tied copy on the last.
    assert max(per_rank) < 0.75 * single
    assert sum(per_rank) == single + summary["parallel"]["pipeline"]["tied_bytes"]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_gpipe_holds_every_microbatch_and_1f1b_at_most_its_stages_share(pipe_run) -> None:
    """With S = 2 stages and M = 4 microbatches, GPipe's stage 0 holds the activations of
    all 4 at once; 1F1B's stage k holds at most S - k = 2 - k of them (the meter's peak of
    saved-for-backward bytes in flight). Both save the same bytes over the step."""
    gpipe = pipe_run("--strategy", "pipeline", *LAYOUTS["gpipe-2"])
    one_f = pipe_run("--strategy", "pipeline", *LAYOUTS["1f1b-2"])

    def per_rank(run: Path) -> list[dict[str, Any]]:
        records = [_summary(run), _summary(run / "ranks" / "rank1")]
        return [r["memory"]["activations"] for r in records]

    for stage, (g, f) in enumerate(zip(per_rank(gpipe), per_rank(one_f))):
        assert g["peak_in_flight_bytes"] == g["saved_by_autograd_bytes"]  # all 4 at once
        assert f["saved_by_autograd_bytes"] == pytest.approx(g["saved_by_autograd_bytes"], rel=0.02)
        per_microbatch = g["saved_by_autograd_bytes"] / 4
        assert f["peak_in_flight_bytes"] <= (2 - stage) * per_microbatch * 1.05
        assert f["peak_in_flight_bytes"] >= (2 - stage) * per_microbatch * 0.5


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_a_measured_split_records_the_costs_it_cut_by(pipe_run) -> None:
    pipeline = _summary(pipe_run("--strategy", "pipeline", *LAYOUTS["measured-2"]))["parallel"][
        "pipeline"
    ]
    costs = pipeline["measured_costs"]
    assert pipeline["split"] == "measured" and len(costs["blocks_ms"]) == 4
    assert all(c > 0 for c in costs["blocks_ms"]) and costs["first_ms"] > 0
    (a, b), (c, d) = pipeline["spans"]
    assert a == 0 and b == c and d == 4 and 0 < b < 4  # every block once, in order


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_two_replicas_of_a_pipeline_record_their_grid(pipe_run) -> None:
    run = pipe_run("--strategy", "pipeline", *LAYOUTS["dp2-pp2"])
    summary = _summary(run)
    assert summary["parallel"]["pipeline"]["dp_size"] == 2
    assert summary["local_batch_size"] == 8 and summary["world_size"] == 4
    # Ranks 0, 1 are replica 0's stages, 2, 3 replica 1's: the last stages hold the loss.
    for rank, has_loss in ((1, True), (2, False), (3, True)):
        lines = step_lines(run / "ranks" / f"rank{rank}" / "metrics.jsonl")
        assert all(("rank_loss" in e) is has_loss for e in lines)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_every_microbatch_is_on_its_ranks_track_in_the_trace(pipe_run, tmp_path: Path) -> None:
    from tests.analysis.test_trace import check_trace, load_strict
    from trainscope.analysis.trace import write_chrome_trace
    from trainscope.records.run_dir import load_run

    run = pipe_run("--strategy", "pipeline", *LAYOUTS["gpipe-2"])
    for rank, metrics in ((0, run / "metrics.jsonl"), (1, run / "ranks/rank1/metrics.jsonl")):
        for step in step_lines(metrics):
            kinds = [c[0] for c in step["microbatches"]]
            assert kinds.count("F") == kinds.count("B") == 4
            # The last stage's losses; on the first step torch's schedule also computes
            # one loss to set up its shapes (timed too: it ran).
            losses = kinds.count("L")
            assert losses == 0 if rank == 0 else losses in ((4, 5) if step["step"] == 1 else (4,))
            assert all(c[3] >= step["t"] - 1e-6 and c[4] >= c[3] for c in step["microbatches"])
    trace = load_strict(write_chrome_trace(load_run(run), tmp_path / "trace.json"))
    check_trace(trace)
    events = trace["traceEvents"]
    for pid in (0, 1):
        chunks = [e for e in events if e.get("cat") == "microbatch" and e["pid"] == pid]
        assert len([e for e in chunks if e["name"].startswith("F")]) == 4 * STEPS
        assert {e["args"]["stage"] for e in chunks if "stage" in e["args"]} == {pid}
        # The schedule's stages are shown as their microbatches, not as back-to-back boxes.
        boxes = {e["name"] for e in events if e.get("cat") == "stage" and e["pid"] == pid}
        assert not boxes & {"forward", "backward", "pipeline_wait"}
        assert {"data_wait", "optimizer"} <= boxes


def _arch(n_head: int = 2):  # noqa: ANN202
    from trainscope.estimate.archs import Arch

    return Arch("gpt-char", "gpt", layers=4, hidden=32, heads=n_head, vocab=65, positions=16,
                ffn=128, bias=False, dropout=0.0, attn_dropout=0.0)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
@pytest.mark.parametrize("layout", ["gpipe-2", "1f1b-2", "interleaved-2"])
def test_the_estimator_predicts_each_stages_memory(layout: str, pipe_run) -> None:
    """estimate-memory --pp-stages against the meter, rank by rank: model states exactly
    (counted bytes both), activations in flight exactly under GPipe and within 1% under
    1F1B and interleaved 1F1B (measured under 1F1B: 1,024 and 1,536 bytes more, 0.2% and
    0.5%: a few small storages, the position ids among them, live across microbatches
    there). Interleaved: two stages per rank, of different sizes (the embeddings on the
    first, the head on the last), held in torch's order: measured, rank 0 exactly
    (665,600 bytes, 5 stage-microbatches at the peak), rank 1 0.4% above."""
    from trainscope.estimate.split import pipeline_ranks

    run = pipe_run("--strategy", "pipeline", *LAYOUTS[layout])
    schedule = {"gpipe-2": "gpipe", "1f1b-2": "1f1b", "interleaved-2": "interleaved-1f1b"}[layout]
    est = pipeline_ranks(_arch(), stages=2, microbatches=4, schedule=schedule, batch=16,
                         seq_len=16, precision="fp32", optimizer="adamw", device="cpu")  # fmt: skip
    for record, e in zip([_summary(run), _summary(run / "ranks" / "rank1")], est):
        m = record["memory"]
        states = m["parameters_bytes"] + m["gradients_bytes"] + m["optimizer_states_bytes"]
        assert states == e.states.total and m["parameters_bytes"] == 4 * e.parameters
        measured = m["activations"]["peak_in_flight_bytes"]
        if schedule == "gpipe":
            assert measured == e.activations
        else:
            assert measured == pytest.approx(e.activations, rel=1e-2)


def resumed_equals_uninterrupted(tmp_path: Path, *flags: str) -> None:
    """2 epochs in one go, and 1 epoch checkpointed then resumed to 2: the same weights,
    bit for bit (each rank saves and restores its own stages' or shards' state)."""
    common = [*_common(write_corpus(tmp_path / "corpus")), "--max-steps-per-epoch", "3", *flags]
    whole, split = tmp_path / "whole", tmp_path / "split"
    checkpointed = [*common, "--epochs", "1", "--checkpoint-every-epoch", "--out", str(split)]
    with forked_launches():  # each rank's own checkpoint is tested, not how ranks start
        assert main([*common, "--epochs", "2", "--out", str(whole)]) == 0
        assert main(checkpointed) == 0
        assert main(["run", "--resume", str(split), "--epochs", "2", "-q", "--no-progress"]) == 0
    summary = _summary(split)
    assert summary["status"] == "completed" and summary["steps"] == 6
    got, want = weights(split), weights(whole)
    assert sorted(got) == sorted(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT)
def test_a_pipeline_resumes_bit_exact(tmp_path: Path) -> None:
    resumed_equals_uninterrupted(tmp_path, "--strategy", "pipeline", "--nproc", "2")
