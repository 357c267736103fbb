"""report.html of a run: self-contained, same content as report.md, clean in a browser.

The checks in a real browser (headless Chromium, seconds each) are ``slow``; the page's
own text is checked in the quick tier."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from tests.reports.browser import browser_problems, require_browser
from tests.reports.runs import FAILED, PNG_MAGIC, write_run
from trainscope.reports import RunReport, build_run_report

IMG_SRC = re.compile(r'<img src="([^"]*)"')


def assert_self_contained(page: str) -> None:
    """No scripts, no external URLs; every image an embedded PNG data URI."""
    assert page.startswith("<!DOCTYPE html>\n") and '<meta charset="utf-8">' in page
    assert "<script" not in page.lower()
    assert 'src="http' not in page and 'href="http' not in page
    assert not re.search(r"https?://", page)  # no URL at all, not even in CSS
    for src in IMG_SRC.findall(page):
        assert src.startswith("data:image/png;base64,"), src[:80]


def test_report_html_is_self_contained(completed_report: RunReport) -> None:
    report = completed_report
    page = report.html_path.read_text(encoding="utf-8")
    assert_self_contained(page)
    sources = IMG_SRC.findall(page)
    assert len(sources) == 3  # stage pie, loss curve, memory bar
    # The embedded pictures are exactly the PNGs written under plots/.
    plots = report.out_dir / "plots"
    embedded = [base64.b64decode(s.split(",", 1)[1]) for s in sources]
    in_order = ("stages.png", "memory.png", "loss.png")  # the report's order
    assert embedded == [(plots / name).read_bytes() for name in in_order]
    assert all(data[:8] == PNG_MAGIC for data in embedded)


def test_report_html_says_what_report_md_says(completed_report: RunReport) -> None:
    report = completed_report
    md = report.markdown_path.read_text(encoding="utf-8")
    page = report.html_path.read_text(encoding="utf-8")
    assert "<title>Run report: digits / LeNet5</title>" in page
    headings = re.findall(r"^## (.*)$", md, flags=re.M)
    assert headings == re.findall(r"<h2>(.*?)</h2>", page)
    assert headings == [
        "Overview",
        "Where the time went",
        "Timeline",
        "What to fix (trainscope doctor)",  # the doctor's findings on the same record
        "Where the memory went",
        "Training loss",
        "Per-epoch results",
        "Per-class test accuracy",
    ]
    # Same tables, same cells: every Markdown table row appears as an HTML row.
    md_rows = [
        [c.strip() for c in ln.strip("|").split(" | ")]
        for ln in md.splitlines()
        if ln.startswith("|") and not ln.startswith("| :") and not ln.startswith("| -")
    ]
    html_rows = [
        re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>.*?</tr>", page)
    ]
    assert md_rows == html_rows
    assert "First losses: 2.3000, 2.2900, 2.2700, 2.2100, 2.1500" in page


def test_report_html_right_aligns_numbers(completed_report: RunReport) -> None:
    page = completed_report.html_path.read_text(encoding="utf-8")
    stages = page.split('id="tab-run-cpu-stages"', 1)[1].split("</table>", 1)[0]
    assert '<th style="text-align: left">Stage</th>' in stages
    assert '<td style="text-align: right">4.200</td>' in stages
    assert '<td style="text-align: right">100.0%</td>' in stages


def test_failed_report_html_shows_the_error(tmp_path: Path) -> None:
    report = build_run_report(write_run(tmp_path, "failed", FAILED, steps=0))
    page = report.html_path.read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "<img" not in page
    assert (
        '<blockquote class="note"><p><strong>Run failed: RuntimeError: loss became nan'
        " at step 7</strong></p></blockquote>"
    ) in page
    assert "<pre><code>RuntimeError: loss became nan at step 7\nTraceback" in page
    assert "No per-stage timings were recorded." in page


def test_markup_in_names_is_escaped_in_html(tmp_path: Path) -> None:
    summary = {**FAILED, "workload": "<b>w</b>", "error": "bad `x` ** 2 <script>alert(1)"}
    page = build_run_report(write_run(tmp_path, "r&d", summary, steps=0)).html_path.read_text()
    assert "<script" not in page and "<b>w</b>" not in page
    assert "<title>Run report: &lt;b&gt;w&lt;/b&gt; / LeNet5</title>" in page
    assert "Run failed: bad `x` ** 2 &lt;script&gt;alert(1)</strong>" in page
    assert "Run directory: <code>r&amp;d</code>" in page


# --- in a real browser (headless Chromium via Playwright; skipped without one) ---------


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_completed_report_loads_cleanly_in_a_browser(completed_report: RunReport) -> None:
    require_browser()
    assert browser_problems(completed_report.html_path) == []


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_failed_report_loads_cleanly_in_a_browser(tmp_path: Path) -> None:
    require_browser()
    report = build_run_report(write_run(tmp_path, "failed", FAILED, steps=0))
    assert browser_problems(report.html_path) == []


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_browser_check_catches_broken_pages(tmp_path: Path) -> None:
    # The checker must be able to fail, or "== []" above proves nothing.
    require_browser()
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>b</title></head><body>'
        '<img src="missing.png" alt="gone">'
        "<script>throw new Error('boom')</script>"
        "<script>console.error('logged problem')</script>"
        "</body></html>",
        encoding="utf-8",
    )
    problems = browser_problems(page)
    text = "\n".join(problems)
    assert "broken image: missing.png" in text
    assert "request failed: " in text and "missing.png" in text
    assert "page error: " in text and "boom" in text
    assert "console error: logged problem" in text


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_browser_check_catches_what_a_reader_cannot_see(tmp_path: Path) -> None:
    # What a test asks to see must be there and visible, or "== []" proves nothing.
    require_browser()
    page = tmp_path / "hidden.html"
    # A 1x1 PNG shown 40 px wide: a picture that decodes, hidden by its style.
    pixel = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
        "AAAABJRU5ErkJggg=="
    )
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>h</title></head><body>'
        f'<img alt="Timeline of the run" src="data:image/png;base64,{pixel}"'
        ' width="40" style="display: none">'
        '<table id="tab-shown"><tr><td>shown</td></tr></table>'
        '<table id="tab-hidden" style="visibility: hidden"><tr><td>x</td></tr></table>'
        "</body></html>",
        encoding="utf-8",
    )
    wanted = ["img[alt^='Timeline']", "table#tab-shown", "table#tab-hidden", "table#tab-gone"]
    assert browser_problems(page, visible=wanted) == [
        "not visible: img[alt^='Timeline']",
        "not visible: table#tab-hidden",
        "missing: table#tab-gone",
    ]


@pytest.mark.slow
def test_a_long_command_wraps_in_the_html_report(tmp_path: Path) -> None:
    """The Reproduce block of a study (a long `trainscope study ...` line, a path) wraps
    inside the page instead of running off it."""
    require_browser()
    from trainscope.render.document import Document, write_document

    doc = Document("Reproduce")
    doc.code("trainscope study loader " + " ".join(f"--set key{i}=value{i}" for i in range(40)))
    doc.code("/a/" + "very-long-folder-name" * 20 + "/study")
    (html,) = [p for p in write_document(doc, tmp_path) if p.suffix == ".html"]
    assert browser_problems(html) == []
