"""Markdown tables, 95% intervals and the project's folders each have one source.

Every table goes through :func:`eval.report.markdown.markdown_table` and every 95% interval through
:mod:`eval.report.intervals` (re-exported by eval.report.analysis: ``mean_ci``, Student-t over independent units; ``normal_half_width`` where a
normal interval is right). The scan reads each tracked ``.py`` under ``rheo/``, ``eval/``,
``baselines/`` and ``scripts/`` with ``ast``: string literals in code (docstrings left out) that
hold a ``|---`` separator, and the number 1.96, are refused outside those two modules; a
literal naming one of the project's folders (``configs/paths/default.yaml``: ``results/runs``,
``.cache/...``; a word without spaces that is such a folder or lies below one; a one-part name such
as ``results`` alone is a word, not a path) is refused outside
``rheo/paths.py``, which reads that file (``rheo.paths.folder``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_import_graph import ROOT, tracked_sources

from rheo.paths import folders

TABLE_WRITER = Path("eval/report/markdown.py")
CI_MODULE = Path("eval/report/intervals.py")
SEPARATOR = re.compile(r"\|[ ]*:?-{3,}|-{3,}:?[ ]*\||^[ ]*:?-{3,}:?[ ]*$")
NORMAL_95 = (1.96, 1.959964, 1.95996)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or other bare string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def offences(source: str) -> list[tuple[int, str]]:
    """(line, what) of every separator literal and 1.96 in ``source``'s code."""
    tree = ast.parse(source)
    skip, found = _docstrings(tree), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        if isinstance(node.value, str) and SEPARATOR.search(node.value):
            found.append((node.lineno, f"a Markdown separator {node.value!r}"))
        elif isinstance(node.value, float) and node.value in NORMAL_95:
            found.append((node.lineno, f"a normal 95% quantile {node.value!r}"))
    return found


def test_tables_and_intervals_have_one_writer():
    bad = []
    for path in tracked_sources():
        rel = path.relative_to(ROOT)
        for line, what in offences(path.read_text()):
            allowed = TABLE_WRITER if "separator" in what else CI_MODULE
            if rel != allowed:
                bad.append(f"{rel}:{line}: {what} (use {allowed})")
    assert not bad, "\n".join(bad)


def test_the_scan_sees_code_not_docstrings():
    code = ('"""| a |\n|---|"""\n'
            'def f(se):\n    """1.96 * se, |---|"""\n    return 1.96 * se\n'
            'def g(h):\n    return ["|" + "---|" * len(h), "|".join("---" for _ in h), f"| x |{h}|", "\\n---"]\n')
    assert [line for line, _ in offences(code)] == [5, 7, 7]


def folder_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every string in ``source``'s code that names a project folder."""
    roots = set(folders().values())
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and id(node) not in skip and isinstance(node.value, str)
            and not any(c.isspace() for c in node.value)
            and any((node.value == r and "/" in r) or node.value.startswith(r + "/") for r in roots)]


def test_the_project_folders_have_one_source():
    bad = [f"{path.relative_to(ROOT)}:{line}: {text!r} (use rheo.paths.folder)"
           for path in tracked_sources() if path.relative_to(ROOT) != Path("rheo/paths.py")
           for line, text in folder_literals(path.read_text())]
    assert not bad, "\n".join(bad)


def test_the_folder_scan_sees_code_not_prose():
    code = 'def f(ap):\n    """results/runs"""\n    ap.add("--o", default="results/tables/x", help="see results/runs")\n'
    assert [line for line, _ in folder_literals(code)] == [3]
