"""``trainscope doctor``: the findings as text and as strict JSON, one line for what is
not a run, a partial diagnosis of a damaged record, and record text made safe to print."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import trainscope
from tests.diagnosis.test_rules import HEALTHY, write_run
from trainscope.cli import main


def test_doctor_prints_each_finding_with_its_evidence_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003})
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"trainscope doctor: {run} (completed, 40 steps)"
    assert out[1].startswith("1. [major] input-bound: The model waits for batches: data wait")
    assert out[2] == "   evidence: data wait per step 3.00 ms (3.00–3.00, IQR, n=35)"
    assert any(line.startswith("   estimated gain: with 1 DataLoader worker") for line in out)
    assert out[-1] == (
        f"   fix: trainscope run --config {run}/config.yaml --num-workers 1 --out {run}-input-bound"
    )


def test_a_healthy_run_says_there_is_nothing_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(write_run(tmp_path / "ok"))]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "Nothing to fix beyond the noise: no rule found more than a minor point."
    )


def test_json_is_a_strict_list_most_important_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003},
                    summary={"local_batch_size": 16})  # fmt: skip
    assert main(["doctor", str(run), "--json"]) == 0
    findings = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert [f["rule"] for f in findings][0] == "input-bound"
    assert set(findings[0]) >= {"rule", "severity", "evidence", "estimated_gain", "fix_command"}
    assert trainscope.doctor(run).as_list() == findings  # the Python API says the same


def test_what_is_not_a_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("trainscope: error:") and "summary.json" in line
    (tmp_path / "summary.json").write_text("{not json")
    assert main(["doctor", str(tmp_path)]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_damaged_record_gives_a_partial_diagnosis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative and non-finite stage times, no stage totals, no wall time, a run that
    failed at step 3: what can be read is diagnosed, the rest is said."""
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003}, steps=3,
                    summary={"status": "failed", "error": "boom"})  # fmt: skip
    lines = (run / "metrics.jsonl").read_text().splitlines()
    bad = json.loads(lines[0])
    bad["stages"].update(forward=-1.0)
    lines[0] = json.dumps(bad)
    lines.append('{"event": "step", "step": 4, "stages": {"forward": NaN}}')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    summary = json.loads((run / "summary.json").read_text())
    del summary["stages_s"], summary["wall_time_s"]
    summary["steady_state"] = {"warmup_steps": -2}
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["doctor", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "input-bound" in out and err == ""  # what was left out is said once, in the list
    last = out.strip().splitlines()[-1]
    assert last.startswith("Could not read (left out of the diagnosis): ")
    assert "warmup_steps" in last  # the schema's note on the summary field
    assert "2 stage time(s) in metrics.jsonl that are not seconds >= 0" in last
    assert "stages_s" in last and "wall_time_s" in last


def test_record_text_is_escaped_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    losses = [2.0] * 10 + [math.inf] * 30
    hostile = {"status": "failed", "error": "non-finite \x1b[2J\x1b]0;pwned\x07"}
    run = write_run(tmp_path / "r", losses=losses, summary=hostile)
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "diverged" in out


def test_apply_refuses_absurd_steps_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "r", {**HEALTHY, "data_wait": 0.003})
    for flags in (["--steps", "0"], ["--repeats", "1000000"]):
        assert main(["doctor", str(run), "--apply", *flags, "--out", str(tmp_path / "s")]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("trainscope: error: --steps must be 1..100000 and --repeats")
    assert not (tmp_path / "s").exists()


def test_apply_on_a_healthy_run_re_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "ok")
    assert main(["doctor", str(run), "--apply", "--out", str(tmp_path / "s")]) == 0
    assert "No finding has a fix to apply: nothing re-run." in capsys.readouterr().out
    assert not (tmp_path / "s").exists()


def test_a_memory_limit_and_a_link_reach_the_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.diagnosis.test_memory_rules import ACTS

    run = write_run(tmp_path / "m", summary={"memory": ACTS})
    assert main(["doctor", str(run), "--json", "--memory-limit", "44MiB"]) == 0
    (found,) = json.loads(capsys.readouterr().out)
    assert found["rule"] == "activations-near-limit" and found["measured_by"] == "memory"
    assert main(["doctor", str(run), "--json", "--memory-limit", "1G"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    grads = {"tensor_bytes": [4096] * 40, "unit_bytes": [40 * 4096]}
    summary = {"strategy": "allreduce", "world_size": 2, "gradients": grads}
    sync = write_run(tmp_path / "s", {**HEALTHY, "comm": 0.004}, summary=summary)
    assert main(["doctor", str(sync), "--json", "--interconnect", "pcie4-x16"]) == 0
    (sync_finding,) = json.loads(capsys.readouterr().out)
    assert "α–β model (PCIe 4.0 x16" in sync_finding["evidence"][-1]


@pytest.mark.parametrize("bad", ["lots", "0", "-3G", "2P", "1e9"])
def test_a_bad_memory_limit_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    run = write_run(tmp_path / "r")
    assert main(["doctor", str(run), f"--memory-limit={bad}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainscope: error: --memory-limit")
