"""Weights: docs/models.md is the catalog's table, and the missing-weights error leads with the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rheo.models.catalog import MODELS
from rheo.models.locate import ModelWeightsNotFoundError, resolve_paths
from eval.report.markdown import markdown_table
from rheo.models.sources import SOURCES, download_line, table_rows

ROOT = Path(__file__).resolve().parents[1]
HUB_ENTRIES = [e for e in MODELS.values() if e.target in SOURCES or e.head in SOURCES]


def test_docs_models_is_the_catalogs_table():
    page = (ROOT / "docs" / "models.md").read_text()
    assert markdown_table(*table_rows()) in page  # regenerate: print markdown_table(*table_rows()) into docs/models.md
    for entry in MODELS.values():
        assert page.count(f"| `{entry.name}` |") == 2  # target and head


def test_every_hub_id_of_the_catalog_has_a_source_and_none_is_left_over():
    hub = {getattr(e, p) for e in MODELS.values() for p in ("target", "head")
           if not getattr(e, p).startswith(("rheo/", "builtin:", "."))}
    assert hub == set(SOURCES)
    assert {s.gated for s in SOURCES.values()} == {True, False}


@pytest.mark.parametrize("entry", HUB_ENTRIES, ids=lambda e: e.name)
def test_each_download_line_is_the_hf_tool_into_the_folder_rheo_looks_in(entry):
    for part in ("target", "head"):
        line = download_line(entry, part)
        assert line == f"hf download {getattr(entry, part)} --local-dir ~/models/{entry.name}/{part}"


def _error(entry, tmp_path, monkeypatch) -> str:
    for var in ("RHEO_MODEL_DIR", entry.env_var("target"), entry.env_var("head")):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hub"))
    with pytest.raises(ModelWeightsNotFoundError) as err:
        resolve_paths(entry)
    return str(err.value)


def test_the_missing_weights_error_leads_with_the_fix(tmp_path, monkeypatch):
    entry = MODELS["llama31_8b_instruct"]
    first, *rest = _error(entry, tmp_path, monkeypatch).splitlines()
    for needle in (entry.name, f"$RHEO_MODEL_DIR/{entry.name}/target", f"$RHEO_MODEL_DIR/{entry.name}/head",
                   entry.env_var("target"), entry.env_var("head"), "docs/models.md"):
        assert needle in first, first
    fix = rest[:rest.index(next(r for r in rest if "not found; looked at" in r))]
    assert any(download_line(entry, "target") in r and "hf auth login" in r for r in fix)  # gated
    assert any(download_line(entry, "head") in r for r in fix)
    assert any("export RHEO_MODEL_DIR=~/models" in r for r in fix)
    looked = [r.strip() for r in rest if r.startswith("    - ")]
    assert len(looked) == 8 and any("local_files_only" in r for r in looked)  # four places per part, one a line
    assert "huggingface-cli" not in "\n".join(rest)


def test_a_repository_that_is_not_gated_says_nothing_of_a_licence_to_accept(tmp_path, monkeypatch):
    text = _error(MODELS["vicuna_13b_v13"], tmp_path, monkeypatch)
    assert "hf download lmsys/vicuna-13b-v1.3" in text and "hf auth login" not in text


@pytest.mark.slow  # a real `rheo generate` process: make test-slow
def test_rheo_generate_prints_the_fix_under_a_self_contained_first_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHEO_")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_CACHE=str(tmp_path / "hub"), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "rheo.commands", "generate", "hi", "--model", "vicuna_13b_v13"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("rheo generate: error: model 'vicuna_13b_v13': target and head weights not found")
    assert "    target: hf download lmsys/vicuna-13b-v1.3 --local-dir ~/models/vicuna_13b_v13/target" in lines
    assert "Traceback" not in done.stderr
