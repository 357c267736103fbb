"""The report Document as LaTeX: escaped, complete, and compiled by pdflatex where present.

The compile tests are the proof: a document holding every block type and the nastiest
text we know (LaTeX specials, ``\\input{/etc/passwd}``, characters pdflatex has no glyph
for, a 300-character command line) compiles, and its log reports no overfull box and no
float too large for the page (``tests.reports.latex.fit_problems``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.reports.latex import fit_problems
from trainscope.errors import TrainscopeError
from trainscope.render import document_latex
from trainscope.render.document import Document, escape_inline, inline_code
from trainscope.render.document_latex import document_to_latex, write_latex_document
from trainscope.render.table import Table

pytestmark = pytest.mark.timeout(120)

NASTY = r"_&%$#{}~^\ \input{/etc/passwd} μs – × ≤ 😀 [x] <b> |a| --flag ,,q'' !`"
# A shell command of 300 characters; its paths and options hold no space for 100+ chars.
COMMAND = (
    "torchrun --nproc_per_node=8 --rdzv_endpoint=node-0.cluster.internal:29500 "
    "/very/long/path/to/the/experiments/directory/with/many/levels/train_language_model"
    "_with_a_really_long_script_name.py --config=configs/sweeps/lr_0.0003_wd_0.01_"
    "warmup_500_cosine_bs_256_seed_1234567.yaml --out=runs/" + "x" * 60
)
PATH = "/home/someone/trainscope-runs/2024-06-01/" + "lr_0.0003_wd_0.01_warmup_500" * 3
# No punctuation at all: only the costly any-character breaks can wrap it.
BLOB = "A" * 150


def png(path: Path) -> Path:
    """A small PNG drawn by matplotlib (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=50)
    ax.plot([0, 1, 2], [3, 1, 2])
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def nasty_document(tmp_path: Path) -> Document:
    doc = Document(f"Report {NASTY}")
    doc.heading(f"Section {NASTY}")
    doc.paragraph(f"Plain {escape_inline(NASTY)} and **bold {inline_code(NASTY)}** text.")
    doc.paragraph(f"Run {inline_code(COMMAND)} then open {inline_code(PATH)} or {PATH}.")
    doc.paragraph(f"A blob {inline_code(BLOB)} inline, and {BLOB} as a plain word.")
    doc.heading(f"Subsection {NASTY}", level=3)
    doc.note(f"Careful: {escape_inline(NASTY)} {inline_code('rm -rf /')}.")
    doc.bullets([f"item {escape_inline(NASTY)}", inline_code(COMMAND), "[not an option]"])
    doc.heading("Level 4", level=4)
    doc.heading(f"Level 5 {NASTY}", level=5)
    columns = ["Run", "Step (ms)", "Samples/s", "Memory", "MFU", "Note", "Status"]
    rows: list[list[object]] = [
        [f"run-{i}_{NASTY[:12]}", f"{12.5 * i:.1f}", "1,234", "333.8 MiB", "12.3%", NASTY, "ok"]
        for i in range(5)
    ]
    doc.table(Table(columns, rows, f"Caption {NASTY} {PATH}", "tab:nasty"))
    doc.figure(png(tmp_path / "figures" / "loss_curve.png"), f"alt {NASTY}", f"Loss {NASTY}")
    doc.code(f"$ {COMMAND}\n\tindented\t{NASTY}\n\n  \\end{{tscode}} \\input{{/etc/passwd}}\n")
    doc.code(BLOB * 3)
    return doc


def body(tex: str) -> str:
    return tex.split("\\begin{document}", 1)[1]


def test_text_is_escaped(tmp_path: Path) -> None:
    tex = document_to_latex(nasty_document(tmp_path), tmp_path)
    text = body(tex)
    # One document, its own structure only: no input can open, end or load anything.
    assert tex.count("\\begin{document}") == tex.count("\\end{document}") == 1
    assert tex.count("\\documentclass") == 1
    commands = re.findall(r"\\(input|include|write|def|catcode|usepackage)(?![A-Za-z])", text)
    assert commands == []
    assert text.count("\\begin{tscode}") == text.count("\\end{tscode}") == 2
    # Specials escaped in plain text; the backslash as \textbackslash, never a command.
    assert r"\_\&\%\$\#\{\}\textasciitilde{}\textasciicircum{}\textbackslash{}" in text
    assert r"\textbackslash{}input\{/etc/passwd\}" in text
    # Characters without a glyph: math, a code point marker; ligatures kept apart.
    assert r"\ensuremath{\mu}s" in text and r"\tsglyph{1F600}" in text
    assert "😀" not in tex and "μ" not in tex
    assert "-{}-flag" in text and ",{},q'{}'" in text
    # Figures are relative to base_dir; headings map to LaTeX's levels.
    assert "{figures/loss_curve.png}" in text
    for command in ("section*", "subsection*", "subsubsection*", "paragraph*"):
        assert f"\\{command}{{" in text
    # Every non-ASCII character here has an ASCII spelling (an "é" would stay as it is).
    assert re.findall(r"[^\x00-\x7f]", tex) == []


def test_code_breaks_between_characters() -> None:
    doc = Document("t")
    doc.paragraph(inline_code("a/b_c"))
    tex = body(document_to_latex(doc, Path(".")))
    assert r"\texttt{a\tsany /\tsbrk b\tsany \_\tsbrk c}" in tex


def test_unsafe_figure_path_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = Document("t")
    doc.figure(png(tmp_path / "run #1 {x}" / "loss 100%.png"), "alt", "caption")
    with pytest.raises(TrainscopeError, match="cannot take"):
        document_to_latex(doc, tmp_path)
    monkeypatch.setattr(document_latex.shutil, "which", lambda name: None)
    tex, pdf = write_latex_document(doc, tmp_path / "out")
    assert pdf is None and tex == tmp_path / "out" / "report.tex"
    assert "{latex-figures/figure-1.png}" in tex.read_text(encoding="utf-8")
    assert (tmp_path / "out" / "latex-figures" / "figure-1.png").is_file()


def test_bad_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_latex_document(Document("t"), tmp_path, name="-shell-escape")


def need_pdflatex() -> None:
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not on PATH")


@pytest.mark.slow
def test_compiles_and_fits_the_page(tmp_path: Path) -> None:
    need_pdflatex()
    out = tmp_path / "out"
    tex, pdf = write_latex_document(nasty_document(tmp_path), out)
    assert tex == out / "report.tex" and pdf == out / "report.pdf"
    assert pdf.stat().st_size > 1000
    log = (out / "report.log").read_text(encoding="utf-8", errors="replace")
    assert fit_problems(log) == [], "\n".join(fit_problems(log))
    assert not [p.name for p in out.iterdir() if p.suffix in (".aux", ".out", ".toc")]


def test_latex_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_pdflatex()
    broken = "\\documentclass{article}\n\\begin{document}\n\\nosuchcommand\n\\end{document}\n"
    monkeypatch.setattr(document_latex, "document_to_latex", lambda doc, base: broken)
    (tmp_path / "report.pdf").write_bytes(b"stale")
    with pytest.raises(TrainscopeError) as info:
        write_latex_document(Document("t"), tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "report.tex") in message
    assert "Undefined control sequence" in message and "(line 3)" in message
    assert not (tmp_path / "report.pdf").exists()
    assert (tmp_path / "report.log").is_file() and not (tmp_path / "report.aux").exists()


def test_without_pdflatex_only_the_tex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(document_latex.shutil, "which", lambda name: None)
    tex, pdf = write_latex_document(nasty_document(tmp_path), tmp_path / "out", name="doc")
    assert pdf is None and tex.name == "doc.tex" and tex.is_file()


# Every character class the renderer sorts: Latin-1 and Latin Extended-A (set by T1),
# the punctuation and symbols TS1 has, Greek and math (set as math), spaces, emoji, CJK,
# presentation selectors, combining accents and control characters (shown as escapes).
EVERY_CHAR = (
    "".join(chr(c) for c in range(0xA0, 0x180))
    + "‚„‹›‐‑‒–—―‖‘’“”†‡•…‰‱※‽⁄⁒℃℗℞™℧℮←↑→↓◦◯♪⟨⟩␣€₤₦₩₫₡₱"
    + "".join(chr(c) for c in range(0x391, 0x3CA) if c != 0x3A2)
    + "−≠≡∼∈√′″Ω∆ \u2009\u2003\u202f ⚠️ 👩‍💻 漢字 e\u0301 a\u0308 \x1b[2J \u202e \x00 \ufeff"
)


@pytest.mark.slow
def test_every_character_compiles(tmp_path: Path) -> None:
    need_pdflatex()
    doc = Document(EVERY_CHAR[:40])
    doc.heading(EVERY_CHAR, level=6)
    doc.paragraph(f"{escape_inline(EVERY_CHAR)} **{escape_inline(EVERY_CHAR)}**")
    doc.paragraph(inline_code(EVERY_CHAR))
    doc.note("")
    doc.paragraph("")
    doc.bullets([])
    doc.code("")
    doc.code(EVERY_CHAR)
    # More rows than a float holds: a longtable, which settles over two runs.
    rows: list[list[object]] = [[f"row {i}", EVERY_CHAR[i * 8 : i * 8 + 8], i] for i in range(60)]
    doc.table(Table(["Row", "Chars", "n"], rows, EVERY_CHAR[:60], "tab:chars"))
    tex, pdf = write_latex_document(doc, tmp_path)
    assert pdf is not None and pdf.stat().st_size > 1000
    source = tex.read_text(encoding="utf-8")
    assert r"\tsglyph{1F469}" in source and "\ufe0f" not in source and "é" in source
    assert r"\textbackslash{}x1b" in source
    log = (tmp_path / "report.log").read_text(encoding="utf-8", errors="replace")
    assert fit_problems(log) == [], "\n".join(fit_problems(log))


# Seven columns of long headers over short numbers: wider than the default article's line
# (345pt) in the normal size, narrower than the report's (455pt).
MEDIUM = Table(
    ["Configuration", "Delay per sample (ms)", "Step time (ms)", "Data wait (ms)",
     "Backward (ms)", "Samples per second", "Peak memory"],
    [["slow-rank-1", "1", "7.11", "4.55", "6.01", "1,234", "333.8 MiB"]],
    "A table of the report.",
    "tab:medium",
)  # fmt: skip


def test_tables_stand_between_paragraphs_at_a_readable_size() -> None:
    """A table stands where it is in the text ([H], the float package), so that no
    paragraph is broken around it; sized to the report's line, never scaled."""
    doc = Document("t")
    doc.paragraph("Before the table, a whole paragraph.")
    doc.table(MEDIUM)
    doc.paragraph("After the table, another.")
    tex = document_to_latex(doc, Path("."))
    assert "\\usepackage{float}" in tex and "\\begin{table}[H]" in tex
    assert "[ht]" not in tex and "\\resizebox" not in tex
    table = body(tex).split("\\begin{table}[H]", 1)[1].split("\\end{table}", 1)[0]
    # On the report's line: the normal size and column gap, its headers in two lines.
    assert not re.search(r"\\(small|footnotesize|scriptsize|tiny|setlength)\b", table)
    assert "\\parbox[b]{45.2pt}{\\raggedleft Step\\\\time (ms)}" in table
    # In a tables.tex (the default article's narrower line) it is set closer.
    assert "\\setlength{\\tabcolsep}{3pt}" in MEDIUM.to_latex()
    order = [body(tex).index(s) for s in ("Before the", "\\begin{table}[H]", "After the")]
    assert order == sorted(order)


def test_labels_are_unique_in_the_document() -> None:
    doc = Document("t")
    for _ in range(3):
        doc.table(Table(["a", "b"], [["x", "1"]], "Same study twice.", "tab:precision"))
    tex, html = document_to_latex(doc, Path(".")), doc.to_html()
    labels = re.findall(r"\\label\{([^}]*)\}", tex)
    assert labels == ["tab:precision", "tab:precision-2", "tab:precision-3"]
    assert re.findall(r'<table id="([^"]*)"', html) == [
        "tab-precision",
        "tab-precision-2",
        "tab-precision-3",
    ]


@pytest.mark.slow
def test_no_label_is_multiply_defined(tmp_path: Path) -> None:
    need_pdflatex()
    doc = Document("t")
    for _ in range(2):
        doc.paragraph("A chapter of the precision study.")
        doc.table(MEDIUM)
    write_latex_document(doc, tmp_path)
    log = (tmp_path / "report.log").read_text(encoding="utf-8", errors="replace")
    assert "multiply defined" not in log and fit_problems(log) == []
