"""Checks on generated LaTeX tables (test helper).

:func:`latex_problems` is a structural lint that runs everywhere; :func:`compile_latex`
is the real proof and runs where pdflatex or latexmk is installed (skips otherwise).
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
    and \\bottomrule in that order (no \\hline), no bare ``%`` comments out the rest of a line, and
    every row has as many cells as its tabular has columns.
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
                if name == "tabular":
                    if not any(env == "table" for env, _ in stack):
                        problems.append(f"line {n}: tabular outside a table environment")
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
                if open_name == "tabular" and rules != list(_RULES):
                    problems.append(
                        f"tabular of line {open_line}: booktabs rules {rules}, "
                        f"expected {list(_RULES)}"
                    )
        in_tabular = bool(stack) and stack[-1][0] == "tabular"
        if in_tabular and line.rstrip().endswith("\\\\") and columns:
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


def compile_latex(tex: str, tmp_path: Path) -> None:
    """Compile ``tex`` (tables, as in tables.tex) inside a minimal booktabs document.

    Skips the calling test when neither latexmk nor pdflatex is on PATH; fails it with
    the end of the LaTeX log when compilation fails.
    """
    latex = find_latex()
    if latex is None:
        pytest.skip("neither pdflatex nor latexmk is on PATH")
    work = Path(tmp_path) / "latex"
    work.mkdir(parents=True, exist_ok=True)
    (work / "tables.tex").write_text(tex, encoding="utf-8")
    (work / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"
        "\\begin{document}\n\\input{tables.tex}\n\\end{document}\n",
        encoding="utf-8",
    )
    flags = ["-interaction=nonstopmode", "-halt-on-error"]
    cmd = [latex, "-pdf", *flags, "doc.tex"] if "latexmk" in latex else [latex, *flags, "doc.tex"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (work / "doc.pdf").stat().st_size > 1000
