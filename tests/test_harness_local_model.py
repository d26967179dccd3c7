"""The harness on a pair of your own: `model=local model.name=NAME model.target_path=DIR
model.head_path=DIR` (a tiny Llama checkpoint and a matching EAGLE-3 head in temporary folders)
runs eval.run (realized and same-state) with rows labelled NAME, prints where they went and the tables
command; a pair that cannot load leaves nothing in the output folder; catalog keys are as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_pair import write_local_head, write_target

import eval.run as entry
from eval.conf import schema
from eval.conf.compose import compose_config
from eval.store import keys
from eval.store import state_archive as same_state_archive
from eval.store import storage
from eval.store.keys import config_hash
from rheo.models.pair_check import ModelMismatchError

ROOT = Path(__file__).resolve().parents[1]
RUN = ["dataset=gsm8k", "limit=1", "max_new_tokens=6", "method=rheo", "method.k=4", "method.depth=2",
       "method.tree_size=6", "method.sparse_top=null", "num_threads=1", "progress=false", "warmup=false"]


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    return write_target(folder / "target"), write_local_head(folder / "head")


def _from_root(path: Path) -> str:
    """``path`` as a hint printed by a run started in the checkout shows it."""
    path = path.absolute()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _model(target: Path, head: Path, name: str = "my-llama", *extra: str) -> list[str]:
    return ["model=local", f"model.name={name}", f"model.target_path={target}", f"model.head_path={head}",
            "model.chat_format=template", "model.eos_tokens=['</s>']", *extra]


@pytest.mark.slow
def test_eval_run_labels_rows_with_your_name_and_says_where_they_went(pair_dirs, tmp_path):
    target, head = pair_dirs
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "eval.run", *_model(target, head), *RUN, f"output_dir={out}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = storage.load_results(out)
    assert len(rows) == 2 and set(rows["model"]) == {"my-llama"} and set(rows["method"]) == {"rheo", "ar"}
    assert set(rows["head_path"].dropna()) == {str(head)} and (rows["new_tokens"] >= 1).all()
    folders = {p.name for p in (out / "my-llama").iterdir()}
    assert folders == set(rows["config_hash"])
    key = json.loads((out / "my-llama" / rows[rows["method"] == "rheo"]["config_hash"].iloc[0] / "config.json")
                     .read_text())
    assert key["model"] == "my-llama" and key["chat_format"] == "template" and key["eos_tokens"] == ["</s>"]
    assert key["head_sha"]  # a replaced head at the same path is never resumed
    printed = done.stdout.splitlines()
    assert any(line.startswith("rows: rheo ") and f"{out}/my-llama/" in line for line in printed), done.stdout
    rheo = _from_root(Path(sys.executable).parent / "rheo")  # installed next to the interpreter (.venv/bin/rheo)
    assert f"tables: {rheo} tables --results {out} --out {out}/tables --no-theory" in printed, done.stdout


@pytest.mark.slow
def test_eval_same_state_runs_the_same_pair(pair_dirs, tmp_path):
    target, head = pair_dirs
    out = tmp_path / "ss"
    tree = "k:4,depth:2,tree_size:6,sparse_top:null"
    done = subprocess.run([sys.executable, "-m", "eval.run", "measure=same_state", *_model(target, head), *RUN[:3],
                           "method=topk", "method.k=4", "method.depth=2", "method.tree_size=6",
                           "method.sparse_top=null", f"compare=[{{name:topk,{tree}}},{{name:rheo,m:1,{tree}}}]",
                           "calibration=false", "ot_bound=false", "progress=false", f"output_dir={out}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = same_state_archive.load_rows(out)
    assert len(rows) > 0 and set(rows["model"]) == {"my-llama"} and set(rows["method"]) == {"topk", "rheo"}
    assert f"rows: {out}/my-llama (a folder per driver hash, in it one per compared method)" in done.stdout
    assert f"tables: {_from_root(Path(sys.executable))} -m eval.states.tables {out}" in done.stdout


def _refusals(pair_dirs, tmp_path) -> list[tuple[list[str], type, str]]:
    target, head = pair_dirs
    wide = write_local_head(tmp_path / "wide", config_changes={"hidden_size": 128})
    return [
        (_model(target, wide), ModelMismatchError, f"head {wide} does not fit target {target}"),
        (_model(target, tmp_path / "nohead"), FileNotFoundError, f"head_path {tmp_path / 'nohead'} is not a folder"),
        (_model(target, head, "my/llama"), ValueError, "labels the rows and names their folder"),
        (["model=local", "model.name=my-llama"], ValueError, "run a pair of your own with model=local"),
        (_model(target, head, "my-llama", "model.chat_format=chatml"), ValueError, "unknown model.chat_format"),
    ]


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("harness", ["run", "same_state"])
def test_a_pair_that_cannot_load_leaves_nothing_behind(pair_dirs, tmp_path, monkeypatch, case, harness):
    overrides, error, needle = _refusals(pair_dirs, tmp_path)[case]
    monkeypatch.setattr("eval.measure.loop.load_pair", lambda *a, **k: pytest.fail("loaded a pair that cannot load"))
    out = tmp_path / "out"
    measure = ["measure=realized"] if harness == "run" else ["measure=same_state", "compare=[{name:topk}]"]
    cfg = compose_config(measure + overrides + RUN + [f"output_dir={out}"])
    with pytest.raises(error) as err:
        entry.run(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not out.exists()


def test_a_load_that_fails_late_removes_the_output_folder_it_made(pair_dirs, tmp_path):
    target, head = pair_dirs
    out = tmp_path / "out"
    cfg = compose_config(_model(target, head, "my-llama", "model.eos_tokens=['<nope>']") + RUN + [f"output_dir={out}"])
    with pytest.raises(ValueError, match="eos token '<nope>' is not in the vocabulary"):
        entry.run(cfg)
    assert not out.exists()
    kept = tmp_path / "kept"
    storage.prepare_output_dir(kept)  # an existing results folder keeps its manifest, and gets no config folder
    with pytest.raises(ValueError, match="eos token"):
        entry.run(compose_config(_model(target, head, "my-llama", "model.eos_tokens=['<nope>']") + RUN
                                  + [f"output_dir={kept}"]))
    assert [p.name for p in kept.iterdir()] == [storage.MANIFEST]


def test_catalog_keys_hold_no_model_format_fields():
    """The new model fields stay out of a catalog model's key unless set (committed rows keep their hashes)."""
    cfg = compose_config(["model=smollm2_135m", "method=rheo", "dtype=null"])  # null: the model's default
    before = keys.method_key(schema.spec_config(cfg), model="smollm2_135m", device="cpu", dtype=None, seed=0,
                             max_new_tokens=int(cfg.max_new_tokens))
    assert schema.method_key(cfg) == before and "chat_format" not in before and "eos_tokens" not in before
    changed = compose_config(["model=smollm2_135m", "method=rheo", "dtype=null", "model.eos_tokens=['<|im_end|>']"])
    assert config_hash(schema.method_key(changed)) != config_hash(before)
