"""The README is a front door and the docs stay true: size, links, generated tables, examples."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_docs  # noqa: E402

DOCS = make_docs.doc_files(ROOT)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    broken = [t for t in LINK.findall(path.read_text())
              if "://" not in t and not (path.parent / t).exists()]
    assert not broken, broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_name_no_path_outside_the_checkout(path):
    text = path.read_text()
    assert "../shared" not in text and "/work/" not in text


def test_generated_tables_match_the_committed_results():
    assert make_docs.main(["--check"]) == 0  # stale: run `make docs`


def test_a_stale_table_is_detected(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.md").write_text("text\n\n| a |\n|---|\n| 1 |\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- table: results/t.md 1 -->\n| a |\n|---|\n| 2 |\n<!-- /table -->\n")
    with contextlib.redirect_stderr(io.StringIO()):
        assert make_docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert make_docs.main(["--root", str(tmp_path)]) == 0
    assert "| 1 |" in (tmp_path / "README.md").read_text()
    assert make_docs.main(["--check", "--root", str(tmp_path)]) == 0


def test_readme_toy_example_runs():
    toy = next(b for b in _python_blocks(ROOT / "README.md") if "PrefixLM" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(toy, "README.md", "exec"), {})
    tokens = eval(out.getvalue().split("] [")[0] + "]")
    assert len(tokens) == 20 and set(tokens) <= {0, 1, 2, 3}


@pytest.mark.slow
def test_readme_smollm2_example_prints_what_it_says():
    block = next(b for b in _python_blocks(ROOT / "README.md") if "load_model_pair" in b)
    claimed = re.search(r"# -> (.*)\n", block).group(1).strip()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    assert out.getvalue().strip() == claimed
