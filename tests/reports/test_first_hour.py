"""What a first hour with trainscope tripped on (issue 24, section 7), from planted study
records: study tables whole when piped, counted bytes compared without the noise rule,
and numbers in plain digits in every output (Markdown, LaTeX, console). What is read
here is text: the reports' figures are built but not saved (``cheap_figures``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.reports.runs import COMPLETED, write_run
from tests.reports.test_honest_numbers import Planted, report_of
from trainscope.analysis.stats import fmt_mean_std, fmt_sig
from trainscope.config import from_dict
from trainscope.reports.compare import build_comparison, print_comparison
from trainscope.reports.run_report import build_run_report, print_report
from trainscope.reports.study_report import StudyReport, print_study_report
from trainscope.studies import checkpointing, precision, strategies

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("cheap_figures")]

# A number in exponent form: 1.01e+03, 1e-05, 2E6.
EXPONENT = re.compile(r"\d\.?\d*[eE][+-]?\d")
MIB = 2**20
CPU = torch.device("cpu")
BASE = from_dict({"runtime": {"device": "cpu", "threads": 2}, "train": {"epochs": 1}}).to_dict()


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output to a pipe as a shell gives it: no terminal, no COLUMNS, no forced colour."""
    for var in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)


def _memory(activations: int) -> dict[str, Any]:
    """A summary's counted memory section (what the memory meter writes)."""
    return {
        "parameters_bytes": MIB,
        "gradients_bytes": MIB,
        "optimizer_states_bytes": 2 * MIB,
        "activations_bytes": activations,
        "model_states_bytes": 4 * MIB,
    }


def _whole(text: str, tables: list[Any]) -> None:
    """Every header and cell of ``tables`` is in ``text`` as it is, nothing cut with '…'."""
    assert "…" not in text
    for table in tables:
        for name in table.columns:
            assert name in text, name
        for row in table.cells():
            for cell in row:
                assert cell in text, cell


def _precision_report(tmp_path: Path) -> StudyReport:
    def rep(train: float, acc: float) -> dict[str, Any]:
        return {
            "train_time_s": train,
            "samples": 4379,
            "samples_per_s": 4379 / train,
            "test_accuracy": acc,
            "epochs": [{"train_loss": 1.1234, "val_accuracy": acc}],
            "memory": _memory(3 * MIB),
        }

    planted = {"fp32/r1": rep(1.0, 0.95), "bf16/r1": rep(2.6, 0.949)}
    plan = precision.plan(BASE, CPU, repeats=1, warmup=False, precisions=["fp32", "bf16"])
    return report_of(plan, tmp_path, Planted(planted))


def test_study_tables_are_whole_when_piped(
    tmp_path: Path, piped: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`study precision ... > prec.log`: headers ("Final train loss", "Train time (s)")
    and cells ("1.12", the loss 1.1234 at three significant digits) whole, as the run's
    own summary tables already were."""
    report = _precision_report(tmp_path)
    capsys.readouterr()
    print_study_report(report)
    err = capsys.readouterr().err
    _whole(err, [t for t in report.tables.values() if t.rows])
    assert "Final train loss" in err and "1.12" in err and "1.1234" not in err
    for finding in report.findings:  # findings stay on one line each, never folded
        assert f"• {finding}" in err.splitlines()


def test_run_report_and_comparison_tables_are_whole_when_piped(
    tmp_path: Path, piped: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, "a-run-with-a-rather-long-directory-name-" + "x" * 40, COMPLETED)
    report = build_run_report(run)
    print_report(report)
    out = capsys.readouterr().out
    _whole(out, [t for t in report.tables.values() if t.rows])
    other = write_run(tmp_path, "another-run-with-a-long-directory-name-" + "y" * 40, COMPLETED)
    comparison = build_comparison([run, other], tmp_path / "cmp")
    print_comparison(comparison)
    _whole(capsys.readouterr().out, [comparison.table])


def test_counted_bytes_are_compared_at_any_n(tmp_path: Path) -> None:
    """Saved-activation bytes are counted, not sampled: one repeat each states the ratio
    (7.1 MiB vs 67.5 MiB); step times, measured, still follow the noise rule."""

    def rep(act_mib: float, step_s: float) -> dict[str, Any]:
        return {
            "memory": _memory(int(act_mib * MIB)),
            "steady_state": {
                "warmup_steps": 5,
                "steps": 25,
                "step_s": {"median": step_s, "low": step_s, "high": step_s, "kind": "IQR"},
            },
        }

    planted = {"none/r1": rep(67.5, 1.2), "full/r1": rep(7.1, 1.67)}
    plan = checkpointing.plan(BASE, CPU, repeats=1, warmup=False, policies=["none", "full"])
    report = report_of(plan, tmp_path, Planted(planted))
    (finding,) = [f for f in report.findings if f.startswith("full vs none")]
    assert "activations 0.11x (7.1 MiB vs 67.5 MiB, counted, exact)" in finding
    assert "step time: no measurable difference: n=1 has no spread" in finding
    # The counts vary between repeats only when something is wrong: then they say so.
    planted = {f"{p}/r{k}": rep(m + k, 1.0) for p, m in (("none", 60), ("full", 7)) for k in (1, 2)}
    plan = checkpointing.plan(BASE, CPU, repeats=2, warmup=False, policies=["none", "full"])
    report = report_of(plan, tmp_path / "varied", Planted(planted))
    (finding,) = [f for f in report.findings if f.startswith("full vs none")]
    assert "counts that varied between repeats" in finding


def _exponents(text: str) -> list[str]:
    # Figures, not words: skip the LaTeX preamble's and HTML's own tokens by looking at
    # numbers only.
    return [m.group(0) for m in EXPONENT.finditer(text)]


def test_reports_write_plain_digits_never_exponents(
    tmp_path: Path, piped: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step times of 432 ms (IQR 198–1010) and 1670 ms per iteration, a 0.00001 s spread:
    in report.md, tables.tex, compare.md/.tex and on the console, plain digits."""
    steady = {
        "warmup_steps": 5,
        "steps": 64,
        "step_s": {"median": 0.432, "low": 0.198, "high": 1.012, "kind": "IQR"},
        "samples_per_s": 148.0,
    }
    run = write_run(tmp_path, "slow", {**COMPLETED, "steady_state": steady})
    report = build_run_report(run)
    print_report(report)
    texts = [capsys.readouterr().out, report.markdown_path.read_text(encoding="utf-8")]
    texts.append((report.out_dir / "tables.tex").read_text(encoding="utf-8"))
    assert "432 (IQR 198–1012, n=64)" in texts[0]
    comparison = build_comparison([run, run], tmp_path / "cmp")
    print_comparison(comparison)
    texts += [capsys.readouterr().out]
    texts += [
        (tmp_path / "cmp" / f).read_text(encoding="utf-8") for f in ("compare.md", "compare.tex")
    ]

    planted = {
        f"{name}/r{k}": {"train_time_s": ms * 10 / 1e3, "steps": 10}
        for name, times in {"single": [1650.0, 1670.0, 1690.0], "dp": [3300.0, 3340, 3380]}.items()
        for k, ms in enumerate(times, 1)
    }
    plan = strategies.plan(BASE, CPU, repeats=3, strategies=["single", "dp"])
    study = report_of(plan, tmp_path, Planted(planted, fresh=True))
    print_study_report(study)
    texts += [capsys.readouterr().err, study.markdown_path.read_text(encoding="utf-8")]
    texts.append((study.out_dir / "tables.tex").read_text(encoding="utf-8"))
    assert any("1670" in t for t in texts[-3:])
    found = {e for t in texts for e in _exponents(t)}
    assert not found, found


def test_one_formatter_for_significant_digits() -> None:
    assert [fmt_sig(x) for x in (1012.0, 1670.0, 0.00123, 75.25, 0.0009996, 0.0)] == [
        "1012",
        "1670",
        "0.00123",
        "75.2",
        "0.00100",
        "0",
    ]
    assert fmt_sig(1.5e-7) == "0.000000150" and fmt_sig(2.5e17) == "250000000000000000"
    assert fmt_sig(1.0, trim=True) == "1" and fmt_sig(0.0205, trim=True) == "0.0205"
    assert fmt_sig(float("nan")) == fmt_sig(None) == "–"
    # A tiny standard deviation: one significant digit, still plain.
    assert fmt_mean_std(1.0, 0.00001234, fmt_sig, 3) == "1.00 ± 0.00001"
