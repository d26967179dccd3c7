"""Every committed figure is what the code draws from the committed rows: each study's report
commands (the ``report`` lists of configs/experiment/, scripts/report.py) are run in this process
on the committed archives, their figures written to a temporary folder and compared with
results/figures byte for byte (the same comparison the committed-output guard makes before
``make tables figures`` writes, eval.store.committed). PNG bytes depend on the drawing libraries, so
the comparison runs with the versions that drew the committed figures and is skipped with others.
Every study takes minutes, so the whole check is a slow test (``make test-slow``); the fast suite
redraws the realized rows' figures (``make tables figures``).

Not drawn from rows, so not redrawn here: the theory figure (a Monte-Carlo, ``make_figures.py``
without ``--no-theory``) and the head's learning curve (``make head-broad``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import matplotlib
import PIL
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import report  # noqa: E402

FIGURES = ROOT / "results" / "figures"
#: the versions that drew the committed figures (PNG bytes are compared only under them)
DRAWN_WITH = {"matplotlib": "3.11.2", "PIL": "13.0.0"}
NOT_FROM_ROWS = {"theory_node_acceptance.png", "learning_curve_broad.png"}
#: figures of a documented command outside the report lists (docs/results.md): (script, arguments)
EXTRA = {"methods_smoke": ("make_figures", ["--results", "results/methods_smoke.parquet", "--no-theory"])}
pytestmark = pytest.mark.skipif(
    (matplotlib.__version__, PIL.__version__) != (DRAWN_WITH["matplotlib"], DRAWN_WITH["PIL"]),
    reason=f"PNG bytes are compared with the drawing libraries that made them: {DRAWN_WITH}")


def _committed_results(tmp: Path) -> Path:
    """A results folder holding the committed archives only (links), so that no local run's folder is read."""
    folder = tmp / "results"
    folder.mkdir()
    for path in (ROOT / "results").iterdir():
        if path.suffix == ".parquet" or path.name == "draft_head":
            os.symlink(path, folder / path.name)
    return folder


def _run(words: list[str]) -> int:
    """A report command (``-m module ARGS`` or ``scripts/x.py ARGS``) in this process."""
    if words[0] == "-m":
        module, args = importlib.import_module(words[1]), words[2:]
    else:
        module, args = importlib.import_module(Path(words[0]).stem), words[1:]
    return module.main(args)


def _figure_commands(results: Path, tables: Path, figures: Path) -> dict[str, list[list[str]]]:
    """study -> its report commands that draw figures, on the committed rows, into ``figures``."""
    overrides = [f"paths.results={results}", f"paths.runs={results}/runs", f"paths.tables={tables}",
                 f"paths.figures={figures}"]
    out = {name: [[f"scripts/{script}.py", *args, "--out", str(figures)]] for name, (script, args) in EXTRA.items()}
    for study in report.studies():  # after EXTRA: make_figures removes the suites figures it does not draw
        drawing = [c for c in report.commands(study, overrides) if str(figures) in " ".join(c)]
        if drawing:
            out[study] = [c + ["--no-theory"] if "make_figures.py" in c[0] else c for c in drawing]
    return out


def _stale(figures: Path, only=None) -> list[str]:
    """The committed figures that differ from those drawn into ``figures`` (``only``: these names)."""
    drawn = {p.relative_to(figures) for p in figures.rglob("*.png")}
    return sorted(str(n) for n in drawn if only is None or str(n) in only
                  if (FIGURES / n).read_bytes() != (figures / n).read_bytes())


def test_the_main_tables_figures_are_what_the_committed_rows_draw(tmp_path, monkeypatch):
    """The fast part: the figures of make reproduce's realized rows (`make tables figures`)."""
    monkeypatch.chdir(ROOT)
    results, figures = _committed_results(tmp_path), tmp_path / "figures"
    commands = _figure_commands(results, tmp_path / "tables", figures)["reproduce_tau"]
    words = next(c for c in commands if "make_figures.py" in c[0])
    assert _run(words) == 0
    drawn = [p.name for p in figures.glob("*.png")]
    assert drawn and all((FIGURES / name).is_file() for name in drawn), drawn
    assert _stale(figures) == []


@pytest.mark.slow
def test_every_committed_figure_is_what_the_committed_rows_draw(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    results, tables, figures = _committed_results(tmp_path), tmp_path / "tables", tmp_path / "figures"
    for study, commands in _figure_commands(results, tables, figures).items():
        for words in commands:
            assert _run(words) == 0, (study, words)
    drawn = {p.relative_to(figures): p.read_bytes() for p in figures.rglob("*.png")}
    committed = {p.relative_to(FIGURES) for p in FIGURES.rglob("*.png")} - {Path(n) for n in NOT_FROM_ROWS}
    assert committed - set(drawn) == set(), "committed figures no command draws"
    assert _stale(figures, {str(n) for n in committed}) == [], "committed figures the committed rows no longer draw"
