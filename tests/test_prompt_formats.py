"""One model name run with two prompt formats (``model.chat_format``, ``model.eos_tokens``): the config
keys already tell the rows apart; the rows say so too (``prompt_format``), and the tables pair, pool
and title them apart (was pandas' "Merge keys are not unique" in make_tables)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from eval.report.analysis import load, settings, setting_title
from eval.store import storage
from eval.store.keys import config_hash
from synthetic_results import write_synthetic_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_tables  # noqa: E402


def test_a_rows_prompt_format_is_its_keys():
    key = {"model": "mine", "chat_format": "vicuna_v1.1", "eos_tokens": ["</s>", "<|im_end|>"]}
    assert storage.key_row(key)["prompt_format"] == "chat_format=vicuna_v1.1 eos_tokens=</s>,<|im_end|>"
    assert storage.key_row({"model": "mine"})["prompt_format"] is None  # the committed rows' keys: no column value


def _with_another_format(runs: Path, chat_format: str) -> Path:
    """A copy of every config of ``runs`` keyed with ``chat_format`` (its rows' tau 10% higher): what a
    second run of the same model name with another prompt format stores beside the first."""
    for cdir in sorted(p for p in (runs / "synthetic").iterdir() if p.is_dir()):
        key = {**json.loads((cdir / "config.json").read_text()), "chat_format": chat_format}
        chash = config_hash(key)
        new = storage.prepare_config_dir(runs, "synthetic", chash, key)
        for shard in sorted(cdir.rglob("*.parquet")):
            row = storage.read_row(shard)
            row.update(prompt_format=storage.key_row(key)["prompt_format"], config_hash=chash, tau=row["tau"] * 1.1)
            storage.write_row(new / shard.parent.name / shard.name, row)
    return runs


def test_rows_of_two_prompt_formats_under_one_name_are_tabled_apart(tmp_path):
    one = write_synthetic_results(tmp_path / "one", temperatures=(1.0,), seeds=(0,), ms=(1,))
    runs = _with_another_format(write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,)),
                                "vicuna_v1.1")
    rows = load(runs)
    assert rows["speedup"].notna().sum() == 2 * load(one)["speedup"].notna().sum()  # each paired within its format
    groups = settings(rows)
    assert len(groups) == 2 * len(settings(load(one)))
    titles = [setting_title(s) for s, _ in groups]
    assert sum("chat_format=vicuna_v1.1" in t for t in titles) == len(groups) // 2
    assert make_tables.main(["--results", str(runs), "--out", str(tmp_path / "t"), "--no-theory"]) == 0
    text = "".join(p.read_text() for p in sorted((tmp_path / "t").glob("*.md")))
    assert "chat_format=vicuna_v1.1" in text
    from eval.report.plots import _name
    assert len({_name("suites", s) for s, _ in groups}) == len(groups)  # one figure file per setting


def test_a_pair_run_with_two_chat_formats_into_one_folder_is_tabled_apart(tmp_path):
    """The whole path: eval.run twice (one model name, two chat formats, one folder), then make_tables."""
    import eval.run as entry
    from eval.conf.compose import compose_config
    from local_pair import write_local_head, write_target

    target, head = write_target(tmp_path / "target"), write_local_head(tmp_path / "head")
    out = tmp_path / "runs"
    for chat_format in ("template", "vicuna_v1.1"):
        entry.run(compose_config(["model=local", "model.name=mine", f"model.target_path={target}",
                                  f"model.head_path={head}", f"model.chat_format={chat_format}", "dataset=gsm8k",
                                  "limit=2", "max_new_tokens=4", "method=rheo", "method.k=4", "method.depth=2",
                                  "method.tree_size=6", "method.sparse_top=null", "num_threads=1", "progress=false",
                                  "warmup=false", f"output_dir={out}"]))
    rows = storage.load_results(out)
    assert sorted(set(rows["prompt_format"])) == ["chat_format=template", "chat_format=vicuna_v1.1"]
    assert load(out)["speedup"].notna().sum() == 4  # each Rheo row paired with the AR row of its own format
    assert make_tables.main(["--results", str(out), "--out", str(tmp_path / "t"), "--no-theory"]) == 0
    text = "".join(p.read_text() for p in sorted((tmp_path / "t").glob("*.md")))
    assert "chat_format=template" in text and "chat_format=vicuna_v1.1" in text
