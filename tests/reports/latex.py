"""Checks on generated LaTeX tables (test helper).

:func:`latex_problems` is a structural lint that runs everywhere; :func:`compile_latex`
is the real proof and runs where pdflatex or latexmk is installed (skips otherwise): the
tables compile in a default ``\\documentclass{article}`` and fit its page, no overfull box
and no float too large in the log (:func:`fit_problems`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# "\{" and "\}" are literal braces; "\\{" is a line break followed by a real brace.
_UNESCAPED = r"(?<!\\)(?:\\\\)*"
# Environment boundaries and booktabs rules, scanned in order of appearance.
_TOKEN = re.compile(r"\\(begin|end)\{([^}]*)\}|\\(toprule|midrule|bottomrule)\b")
_BRACE = re.compile(_UNESCAPED + r"([{}])")
_PERCENT = re.compile(_UNESCAPED + r"%")
_AMP = re.compile(_UNESCAPED + r"&")
_RULES = ("toprule", "midrule", "bottomrule")
# Environments whose rows are checked; a tabular sits in a table float, a longtable
# never does (it breaks across pages itself).
_TABULARS = ("tabular", "longtable")
# A longtable's rules: its header on the first page (and again, as \endhead, on the
# next ones), then the bottom rule of its foot.
_LONG_RULES = [
    ["toprule", "midrule", "bottomrule"],
    ["toprule", "midrule", "toprule", "midrule", "bottomrule"],
]


def _strip_comment_lines(tex: str) -> list[tuple[int, str]]:
    # Our files only have whole-line comments; a "%" inside a line is itself a problem.
    return [(n, ln) for n, ln in enumerate(tex.splitlines(), 1) if not ln.lstrip().startswith("%")]


def _column_count(spec: str) -> int:
    # Column letters of a tabular spec such as "lrr" or "l|p{3cm}r"; p/m/b carry a width.
    spec = re.sub(r"[pmb]\{[^}]*\}", "p", spec)
    return sum(spec.count(c) for c in "lcrp")


def latex_problems(tex: str) -> list[str]:
    """Structural problems in LaTeX table code; [] when none were found.

    Checks: \\begin/\\end pairs nest and match, braces balance (escaped ones excluded),
    every tabular sits inside a table environment and has booktabs \\toprule, \\midrule
    and \\bottomrule in that order (no \\hline), every longtable sits outside one, with
    its header's rules (twice where a first-page header differs) and a bottom rule, no
    bare ``%`` comments out the rest of a line, and every row has as many cells as its
    tabular has columns.
    """
    problems: list[str] = []
    stack: list[tuple[str, int]] = []
    depth = 0
    rules: list[str] = []
    columns = 0
    for n, line in _strip_comment_lines(tex):
        if _PERCENT.search(line):
            problems.append(f"line {n}: unescaped % comments out the rest of the line")
        if "\\hline" in line:
            problems.append(f"line {n}: \\hline instead of booktabs rules")
        for brace in _BRACE.findall(line):
            depth += 1 if brace == "{" else -1
            if depth < 0:
                problems.append(f"line {n}: '}}' closes a group that was never opened")
                depth = 0
        for m in _TOKEN.finditer(line):
            kind, name, rule = m.groups()
            if rule:
                rules.append(rule)
            elif kind == "begin":
                if name in _TABULARS:
                    inside = any(env == "table" for env, _ in stack)
                    if name == "tabular" and not inside:
                        problems.append(f"line {n}: tabular outside a table environment")
                    if name == "longtable" and inside:
                        problems.append(f"line {n}: longtable inside a table float")
                    spec = re.match(r"\{((?:[^{}]|\{[^}]*\})*)\}", line[m.end() :])
                    columns = _column_count(spec.group(1)) if spec else 0
                    rules = []
                stack.append((name, n))
            elif not stack:
                problems.append(f"line {n}: \\end{{{name}}} without a \\begin")
            else:
                open_name, open_line = stack.pop()
                if open_name != name:
                    problems.append(
                        f"line {n}: \\end{{{name}}} closes \\begin{{{open_name}}} "
                        f"of line {open_line}"
                    )
                expected = _LONG_RULES if open_name == "longtable" else [list(_RULES)]
                if open_name in _TABULARS and rules not in expected:
                    problems.append(
                        f"{open_name} of line {open_line}: booktabs rules {rules}, "
                        f"expected {' or '.join(str(e) for e in expected)}"
                    )
        in_tabular = bool(stack) and stack[-1][0] in _TABULARS
        # A longtable's caption is a row of its own, one cell across the table.
        row = in_tabular and not line.lstrip().startswith("\\caption")
        if row and line.rstrip().endswith("\\\\") and columns:
            cells = len(_AMP.findall(line)) + 1
            if cells != columns:
                problems.append(f"line {n}: {cells} cells in a {columns}-column tabular")
    if depth:
        problems.append(f"{depth} unclosed '{{' at the end")
    problems += [f"line {n}: \\begin{{{name}}} never ended" for name, n in stack]
    return problems


def find_latex() -> str | None:
    """latexmk, else pdflatex, from PATH (None without either)."""
    return shutil.which("latexmk") or shutil.which("pdflatex")


# What a tables.tex needs where it does not say (compare.tex has no header comment).
DEFAULT_PACKAGES = ("booktabs", "longtable")
# Problems a log reports that do not stop LaTeX: a box wider (or taller) than its line
# (page) or a float taller than the page. Errors stop it (-halt-on-error).
_FIT = re.compile(r"^(Overfull \\[hv]box.*|.*Float too large for page.*)$", re.MULTILINE)
_USEPACKAGE = re.compile(r"\\usepackage\{([^}]*)\}")


def needed_packages(tex: str) -> list[str]:
    """The packages the file's leading comment lines name (``\\usepackage{...}``), in
    order; :data:`DEFAULT_PACKAGES` where it names none."""
    head = []
    for line in tex.splitlines():
        if line.strip() and not line.lstrip().startswith("%"):
            break
        head.append(line)
    names = [n.strip() for m in _USEPACKAGE.findall("\n".join(head)) for n in m.split(",")]
    return list(dict.fromkeys(names)) or list(DEFAULT_PACKAGES)


def fit_problems(log: str) -> list[str]:
    """Overfull boxes and floats too large for the page, as the LaTeX log reports them."""
    return [m.group(0).strip() for m in _FIT.finditer(log)]


def compile_latex(tex: str, tmp_path: Path, *, fit: bool = True, preamble: str = "") -> str:
    """Compile ``tex`` (tables, as in tables.tex) inside a minimal document and return
    its log: ``\\documentclass{article}`` at its default size and text width, with the
    packages the file's header asks for (:func:`needed_packages`) and nothing else but
    ``preamble`` (a geometry that sets another text width).

    Skips the calling test when neither latexmk nor pdflatex is on PATH; fails it with
    the end of the LaTeX log when compilation fails, and (``fit``) when the log reports
    an overfull box or a float too large for its page (:func:`fit_problems`).
    """
    latex = find_latex()
    if latex is None:
        pytest.skip("neither pdflatex nor latexmk is on PATH")
    work = Path(tmp_path) / "latex"
    work.mkdir(parents=True, exist_ok=True)
    (work / "tables.tex").write_text(tex, encoding="utf-8")
    packages = "".join(f"\\usepackage{{{p}}}\n" for p in needed_packages(tex))
    (work / "doc.tex").write_text(
        f"\\documentclass{{article}}\n\\usepackage[T1]{{fontenc}}\n{packages}{preamble}"
        "\\begin{document}\n\\input{tables.tex}\n\\end{document}\n",
        encoding="utf-8",
    )
    flags = ["-interaction=nonstopmode", "-halt-on-error"]
    cmd = [latex, "-pdf", *flags, "doc.tex"] if "latexmk" in latex else [latex, *flags, "doc.tex"]
    # longtable settles its column widths over two runs (latexmk reruns by itself).
    runs = 2 if "latexmk" not in latex and "longtable" in tex else 1
    for _ in range(runs):
        proc = subprocess.run(
            cmd, cwd=work, capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, proc.stdout[-3000:]
    assert (work / "doc.pdf").stat().st_size > 1000
    log = (work / "doc.log").read_text(encoding="utf-8", errors="replace")
    if fit:
        assert fit_problems(log) == [], "\n".join(fit_problems(log))
    return log
