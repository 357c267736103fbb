"""Table model, renderers and number formatting (pure functions, no files)."""

from __future__ import annotations

import pytest

from trainscope.records.run_dir import STAGE_LABELS
from trainscope.records.run_dir import STAGES as ALL_STAGES
from trainscope.render.table import (
    MISSING,
    Table,
    fmt_bytes,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    latex_escape,
)
from trainscope.reports.tables import epoch_table, overview_table, per_class_table, stage_table

# Stages of a one-process run: "comm" exists only with hand-written gradient sync.
# Stages of a run without them: no hand-written sync, checkpoints, compile or pipeline.
STAGES = tuple(s for s in ALL_STAGES if s not in ("comm", "checkpoint", "compile", "pipeline_wait"))

SUMMARY = {
    "status": "completed",
    "workload": "digits",
    "model": "LeNet5",
    "num_parameters": 44426,
    "device": "cpu",
    "device_name": "x86_64 CPU",
    "precision": "fp32",
    "wall_time_s": 4.2,
    "stages_s": {
        "setup": 0.3,
        "data_wait": 0.4,
        "h2d": 0.01,
        "forward": 0.9,
        "backward": 1.2,
        "optimizer": 0.4,
        "evaluation": 0.5,
        "other": 0.49,
    },
    "samples_per_s": 6100.0,
    "test_accuracy": 0.974,
    "peak_memory_bytes": 350_000_000,
    "peak_memory_kind": "process_peak_rss",
    "skipped_steps": 0,
    "per_class_accuracy": {"10": 0.5, "2": 0.9, "0": 1.0, "1": 0.96},
    "epochs": [
        {
            "epoch": 1,
            "train_loss": 1.2,
            "val_loss": 0.5,
            "val_accuracy": 0.85,
            "duration_s": 0.31,
            "samples_per_s": 6000.0,
        },
        {
            "epoch": 2,
            "train_loss": 0.4,
            "val_loss": None,
            "val_accuracy": None,
            "duration_s": 0.29,
            "samples_per_s": None,
        },
    ],
}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.23456, "1.235"),
        (0.0, "0.000"),
        (-0.0123, "-0.012"),
        (0.00004, "0.00004000"),
        (None, MISSING),
        (float("nan"), MISSING),
        (True, MISSING),
    ],
)
def test_fmt_seconds(value: object, text: str) -> None:
    assert fmt_seconds(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (350_000_000, "333.8 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (None, MISSING),
    ],
)
def test_fmt_bytes_is_binary(value: object, text: str) -> None:
    assert fmt_bytes(value) == text


def test_fmt_pct() -> None:
    assert fmt_pct(0.1234) == "12.3%"
    assert fmt_pct(0.974, 2) == "97.40%"
    assert fmt_pct(None) == MISSING


def test_latex_escape_every_special() -> None:
    raw = "a & b % c $ d # e _ f { g } h ~ i ^ j \\ k – l"
    assert latex_escape(raw) == (
        r"a \& b \% c \$ d \# e \_ f \{ g \} h \textasciitilde{} i "
        r"\textasciicircum{} j \textbackslash{} k -- l"
    )


def test_markdown_alignment_and_escaping() -> None:
    t = Table(["Name", "Value"], [["a|b", "1.5"], ["c", None]])
    md = t.to_markdown().splitlines()
    assert t.alignment() == "lr"  # inferred: numbers (and dashes) on the right
    assert md[1] == "| :--- | ----: |"
    assert r"a\|b" in md[2]
    assert md[3].rstrip(" |").endswith(MISSING)


def test_bad_align_is_rejected() -> None:
    with pytest.raises(ValueError):
        Table(["a", "b"], [], align="l").alignment()


def test_latex_table_structure() -> None:
    t = Table(["A_b", "C"], [["x & y", "50%"]], caption="cap_tion", label="tab:x y", align="lr")
    tex = t.to_latex()
    # Never scaled: a table that fits is set as it is, in the normal size.
    assert tex.startswith("\\begin{table}[ht]\n\\centering\n\\begin{tabular}{lr}\n\\toprule\n")
    assert "A\\_b & C \\\\\n\\midrule\nx \\& y & 50\\% \\\\\n\\bottomrule\n" in tex
    assert "\\end{tabular}\n\\caption" in tex
    # A document that keeps its tables where they stand places them [H].
    assert t.to_latex(placement="H").startswith("\\begin{table}[H]\n")
    assert "\\caption{cap\\_tion}" in tex and "\\label{tab:x-y}" in tex
    assert tex.rstrip().endswith("\\end{table}")


def test_stage_table_rows_shares_and_total() -> None:
    t = stage_table(SUMMARY)
    assert [r[0] for r in t.rows] == [STAGE_LABELS[s] for s in STAGES] + ["total (wall)"]
    shares = [float(str(r[2]).rstrip("%")) for r in t.rows[:-1]]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    assert t.rows[-1] == ["total (wall)", "4.200", "100.0%"]
    assert t.rows[3] == ["forward", "0.900", "21.4%"]
    assert "digits" in t.caption


def test_stage_table_keeps_negative_other_and_unknown_stages() -> None:
    s = {"wall_time_s": 1.0, "stages_s": {"forward": 0.7, "other": -0.01, "warp": 0.31}}
    rows = stage_table(s).rows
    assert [r[0] for r in rows] == ["forward", "other", "warp", "total (wall)"]
    assert rows[1][1:] == ["-0.010", "-1.0%"]


def test_stage_table_without_wall_or_stages() -> None:
    assert stage_table({"status": "failed"}).rows == []
    rows = stage_table({"stages_s": {"setup": 0.2}}).rows
    assert rows == [["setup (data, model)", "0.200", MISSING], ["total (wall)", MISSING, MISSING]]


def test_epoch_table_shows_missing_values_as_dash() -> None:
    t = epoch_table(SUMMARY)
    assert t.columns[0] == "Epoch" and len(t.columns) == 6
    assert t.rows[0] == ["1", "1.2000", "0.5000", "85.00%", "0.310", "6,000"]
    assert t.rows[1] == ["2", "0.4000", MISSING, MISSING, "0.290", MISSING]
    assert epoch_table({}).rows == []


def test_per_class_table_sorts_numerically() -> None:
    t = per_class_table(SUMMARY)
    assert [r[0] for r in t.rows] == ["0", "1", "2", "10"]
    assert t.rows[0] == ["0", "100.00%"]


def test_overview_table() -> None:
    facts = dict(overview_table(SUMMARY, {"torch": "2.6.0", "python": "3.11.2"}).rows)
    assert facts["Parameters"] == "44,426"
    assert facts["Device"] == "cpu (x86_64 CPU)"
    assert facts["Peak memory"] == "333.8 MiB (process_peak_rss)"
    assert facts["Test accuracy"] == "97.40%"
    assert facts["torch"] == "2.6.0" and facts["Python"] == "3.11.2"
    assert facts["Skipped steps"] == "0"
    assert "CUDA" not in facts  # optional provenance only when recorded


def test_overview_of_failed_run_is_mostly_dashes() -> None:
    facts = dict(overview_table({"status": "failed", "error": "boom", "test_accuracy": None}).rows)
    assert facts["Status"] == "failed"
    assert facts["Test accuracy"] == MISSING
    assert facts["Peak memory"] == MISSING
    assert facts["torch"] == MISSING


def test_html_table_alignment_escaping_and_caption() -> None:
    t = Table(
        ["Name", "Value"], [["a<b", "1.5"], ["c & d", None]], caption="Cap <1>", label="tab:x y"
    )
    html = t.to_html().splitlines()
    assert t.alignment() == "lr"
    assert html[:3] == ['<table id="tab-x-y">', "<caption>Cap &lt;1&gt;</caption>", "<thead>"]
    assert html[3] == (
        '<tr><th style="text-align: left">Name</th><th style="text-align: right">Value</th></tr>'
    )
    assert html[6] == (
        '<tr><td style="text-align: left">a&lt;b</td><td style="text-align: right">1.5</td></tr>'
    )
    assert f'<td style="text-align: right">{MISSING}</td>' in html[7]
    assert "c &amp; d" in html[7]
    assert html[-1] == "</table>"


def test_html_table_follows_explicit_alignment() -> None:
    t = epoch_table(SUMMARY)
    html = t.to_html()
    assert html.count('style="text-align: right"') == 6 * (1 + len(t.rows))
    assert "<caption>" in html and 'id="tab-epochs"' in html
    plain = Table(["a"], [["x"]])  # no caption or label: no empty caption or id
    assert plain.to_html().startswith("<table>\n<thead>")


def test_overview_shows_every_measured_thing_and_says_why_one_is_missing() -> None:
    """Strategy and world size, MFU (or why not), process vs run wall, steady state,
    trainable parameters, validation loss and perplexity: what the record has is shown."""
    plain = {r[0]: r[1] for r in overview_table(SUMMARY).rows}
    assert not plain.keys() & {"Peak memory, largest rank", "Tokens/s"}
    assert plain["Strategy"] == MISSING and plain["MFU"] == MISSING  # an old record: unknown
    extra = {
        **SUMMARY,
        "strategy": "ddp",
        "world_size": 2,
        "peak_memory_bytes_max_rank": 3 * 2**20,
        "tokens_per_s": 12345.6,
        "mfu": 0.4321,
        "process": {"startup_s": 2.5, "time_s": 7.5, "runs_before": 0},
        "steady_state": {
            "warmup_steps": 5,
            "warmup_time_s": 0.5,
            "steps": 95,
            "step_s": {"median": 0.01, "low": 0.009, "high": 0.012, "kind": "IQR"},
            "samples_per_s": 6400.0,
        },
        "workload_info": {"trainable_parameters": 1000, "total_parameters": 100000},
        "epochs": [{"epoch": 1, "val_loss": 1.25, "val_accuracy": 0.5, "perplexity": 3.49}],
    }
    rows = {r[0]: r[1] for r in overview_table(extra).rows}
    assert rows["Strategy"] == "ddp, 2 processes"
    assert rows["Peak memory, largest rank"] == "3.0 MiB"
    assert rows["MFU"] == "43.21%" and rows["Tokens/s"] == fmt_rate(12345.6)
    assert rows["Process time (s)"] == "7.500 (start-up 2.500)"
    assert rows["Warm-up steps (apart)"] == "5 (0.500 s)"
    assert rows["Step time, steady (ms)"] == "10.0 (IQR 9.00–12.0, n=95)"
    assert rows["Samples/s, steady"] == fmt_rate(6400.0)
    assert rows["Parameters"] == "1,000 trainable of 100,000 (1.00%)"
    assert rows["Val loss (last epoch)"] == "1.2500"
    assert rows["Val perplexity (last epoch)"] == "3.4900"
    shared = {**extra, "process": {"startup_s": 9.0, "time_s": 14.0, "runs_before": 2}}
    shared |= {"mfu": None, "mfu_note": "no known peak FLOP/s for cpu at fp32"}
    rows = {r[0]: r[1] for r in overview_table(shared).rows}
    assert rows["Process time (s)"] == "n/a (the process ran 2 run(s) before this one)"
    assert rows["MFU"] == "n/a (no known peak FLOP/s for cpu at fp32)"
    caption = overview_table(extra).caption
    assert "ddp, 2 processes" in caption and "after interpreter start-up and imports" in caption


def test_ratios_are_typeset_with_times_in_latex() -> None:
    t = Table(
        ["x", "ratio"], [["0x1f", "1.45x"], ["2x (n=3)", "x"]], "about 3.1x, at n=5", "tab:r", "ll"
    )
    tex = t.to_latex()
    assert r"0x1f & 1.45$\times$ \\" in tex  # a hex number stays as it is
    assert r"2$\times$ (n=3) & x \\" in tex
    assert r"\caption{about 3.1$\times$, at n=5}" in tex
    assert t.to_markdown().count("1.45x") == 1  # Markdown keeps the plain x
