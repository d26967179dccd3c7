"""The analysis notebook: committed with its outputs, and it reruns headless from the committed
archives to the same outputs (text, tables and Markdown; figures are counted, not compared byte
for byte): stale outputs fail here until `make notebook` re-executes it (then `make publish`)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "analysis.ipynb"


def _outputs(nb) -> tuple[str, int]:
    """(the text and Markdown of every code cell's outputs, the number of PNG outputs)."""
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", "")) for o in outs)
    return text, sum("image/png" in o.get("data", {}) for o in outs)


def _check_ran(nb) -> None:
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") and c.get("outputs") for c in code), "a code cell did not run"
    assert not [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
    text, images = _outputs(nb)
    # it names the archives it reads, says why the tau archive has no speedup, shows tables and figures
    assert "from results/runs.parquet" in text and "from results/speed.parquet" in text
    assert "no AR rows" in text and "Main table" in text and "Speed next to AR" in text
    assert "max_new_tokens=128" in text and "E[τ] Top-K" in text and "Expected vs realized" in text
    assert "state rows from results/same_state.parquet" in text and "paired vs Top-K" in text
    assert images >= 2  # the tau archive's per-suite figure and the theory figure


def _shown(nb) -> list[list[str]]:
    """Per code cell, what it shows as text: printed text, Markdown, HTML/plain reprs of values (not of images).

    The kernel splits one print into stream chunks wherever its flush happens to fall, so consecutive
    chunks of one stream are joined before they are compared."""
    cells = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        shown, stream = [], None
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("output_type") == "stream" and stream == out.get("name"):  # None before any stream
                shown[-1] += str(out.get("text", ""))
            elif "image/png" in data:
                shown.append("<figure>")
            else:
                shown.append(str(out.get("text", "")) + str(data.get("text/markdown", data.get("text/plain", ""))))
            stream = out.get("name") if out.get("output_type") == "stream" else None
        cells.append([_where(text) for text in shown])
    return cells


def _where(text: str) -> str:
    """A cell's text without the places of this checkout and of the reader's output root, which it names."""
    text = text.replace(str(Path(__file__).resolve().parents[1]), "<checkout>")
    return re.sub(r"no \S+/tables/speed_check/speed_check\.json of yours", "no <out>/tables/speed_check/speed_check.json of yours", text)


def test_shown_joins_a_print_split_into_stream_chunks_and_keeps_streams_apart():
    def cell(*outs):
        return nbformat.v4.new_code_cell(outputs=list(outs))
    out, err = (lambda t: nbformat.v4.new_output("stream", name="stdout", text=t),
                lambda t: nbformat.v4.new_output("stream", name="stderr", text=t))
    md = nbformat.v4.new_output("display_data", data={"text/markdown": "## table"})
    split = nbformat.v4.new_notebook(cells=[cell(out("rows from x"), out("\n"), md, out("a"))])
    whole = nbformat.v4.new_notebook(cells=[cell(out("rows from x\n"), md, out("a"))])
    assert _shown(split) == _shown(whole) == [["rows from x\n", "## table", "a"]]
    assert _shown(nbformat.v4.new_notebook(cells=[cell(out("a"), err("b"))])) == [["a", "b"]]


def test_committed_notebook_shows_its_outputs():
    _check_ran(nbformat.read(NOTEBOOK, as_version=4))


@pytest.mark.slow
def test_notebook_executes_headless_from_the_committed_archives(monkeypatch):
    monkeypatch.delenv("RHEO_RESULTS", raising=False)
    monkeypatch.delenv("RHEO_SPEED_RESULTS", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:  # what this run produces, not what was committed
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    _check_ran(nb)
    committed = _shown(nbformat.read(NOTEBOOK, as_version=4))
    for i, (now, then) in enumerate(zip(_shown(nb), committed)):
        assert now == then, (f"{NOTEBOOK.name}: code cell {i + 1} now shows other outputs than the committed ones "
                             f"(stale): re-execute it with `make notebook`, then `make publish ARGS=--yes`")
    assert len(_shown(nb)) == len(committed)
