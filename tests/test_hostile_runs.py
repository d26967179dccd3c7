"""Hostile input to runs: suite names that must keep their identity, same-state folders whose
prompts changed or whose shards were copied, archives with paths in their values, Ctrl-C."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.measure.same_states as same_state
import eval.run as entry
import eval.store.state_archive as same_state_archive
from eval.conf.compose import compose_config
from eval.measure.loop import RunInterrupted
from eval.prompts.sources import load_prompts
from eval.run import main as run_main
from eval.store import storage
from eval.store.state_restore import restore_rows
from eval.store.suite_names import suite_folder, suite_of_folder
from rheo.paths import resolve_path

ROOT = Path(__file__).resolve().parent.parent
TREE = "k:4,depth:3,tree_size:8,sparse_top:32"
TINY = ["model=tiny_random", "dataset=mt_bench", "limit=1", "max_new_tokens=6", "num_threads=1", "progress=false",
        "method=rheo", "method.k=4", "method.depth=3", "method.tree_size=8", "method.sparse_top=32",
        f"compare=[{{name:topk,{TREE}}},{{name:rheo,m:1,{TREE}}}]"]


def _prompts(tmp_path, values):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"question_id": i, "turns": [f"q{i}"], "lang": v}) + "\n"
                            for i, v in enumerate(values)))
    cfg = compose_config(["dataset=local", f"dataset.path={path}", "dataset.suite_field=lang", "dataset.suites=[]"])
    return load_prompts(cfg, resolve_path)


def test_suite_names_keep_their_identity(tmp_path):
    suites = _prompts(tmp_path, ["数学", "代码", "a_b", "a b"])
    assert list(suites) == ["数学", "代码", "a_b", "a b"]
    folders = [suite_folder(s) for s in suites]
    assert len(set(folders)) == 4 and folders[2] == "a_b" and all("/" not in f and f != ".." for f in folders)
    assert [suite_of_folder(f) for f in folders] == list(suites)
    assert suite_folder("gsm8k") == "gsm8k" and suite_folder("%") != "%"


def test_a_built_in_suite_name_is_reserved(tmp_path):
    with pytest.raises(ValueError, match=r"suite name 'gsm8k' is reserved.*dataset.suite_prefix"):
        _prompts(tmp_path, ["gsm8k", "other"])


def test_an_over_long_suite_name_is_refused_with_its_fix(tmp_path):
    with pytest.raises(ValueError, match=r"too long for a folder name .*shorten the values of dataset.suite_field"):
        _prompts(tmp_path, ["x" * 300])


def _data(tmp_path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data" / "benchmarks", data)
    return data


def _cfg(tmp_path, data, *extra):
    return compose_config(["measure=same_state"] + TINY + [f"output_dir={tmp_path / 'ss'}", f"data_dir={data}", *extra])


def test_same_state_recomputes_an_item_whose_text_changed(tmp_path):
    data = _data(tmp_path)
    assert entry.run(_cfg(tmp_path, data)).computed == 2
    path = data / "mt_bench.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["turns"][0] += " (edited)"
    path.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    again = entry.run(_cfg(tmp_path, data))
    assert again.computed == 2 and again.skipped == 0


def test_a_shard_copied_into_another_methods_folder_is_flagged_and_recomputed(tmp_path):
    data = _data(tmp_path)
    entry.run(_cfg(tmp_path, data))
    rows = same_state_archive.load_rows(tmp_path / "ss")
    counts = rows.groupby("variant").size().to_dict()
    topk, rheo = (rows[rows["variant"] == v]["config_hash"].iloc[0] for v in ("topk", "rheo m=1"))
    src = next((tmp_path / "ss").rglob(f"{topk}/*/*_t0.parquet"))
    dst = Path(str(src).replace(f"/{topk}/", f"/{rheo}/"))
    shutil.copyfile(src, dst)
    flagged = same_state_archive.load_rows(tmp_path / "ss")
    assert flagged.groupby("variant").size().to_dict()["topk"] == counts["topk"]  # not counted twice
    assert len(flagged) < len(rows)
    (dst.parent / "0_t9.parquet").write_bytes(pq.read_table(src).slice(0, 0).to_pandas().to_parquet())
    pq.write_table(pa.table({"x": [1]}), dst.parent / "1_t0.parquet")  # a foreign parquet file
    assert len(same_state_archive.load_rows(tmp_path / "ss")) == len(flagged)
    again = entry.run(_cfg(tmp_path, data))
    assert again.computed == 1 and again.skipped == 1  # turn 0 again, for the method that lost it
    assert same_state_archive.load_rows(tmp_path / "ss").groupby("variant").size().to_dict() == counts


def test_a_corrupt_same_state_shard_is_recomputed(tmp_path):
    data = _data(tmp_path)
    entry.run(_cfg(tmp_path, data))
    shard = next((tmp_path / "ss").rglob("driver/*/*_t1.parquet"))
    shard.write_bytes(b"garbage")
    again = entry.run(_cfg(tmp_path, data))
    assert again.computed == 1 and again.skipped == 1


def test_restoring_an_archive_never_writes_outside_the_folder(tmp_path):
    data = _data(tmp_path)
    entry.run(_cfg(tmp_path, data))
    archive = tmp_path / "a.parquet"
    same_state_archive.export_rows(tmp_path / "ss", archive)
    table = pq.read_table(archive)
    bad = table.set_column(table.schema.get_field_index("model"), "model",
                           pa.array(["../../x"] * table.num_rows))
    pq.write_table(bad, archive)
    with pytest.raises(storage.OutputDirError, match=r"a row's model '../../x' is not a plain folder name"):
        restore_rows(archive, tmp_path / "new" / "ss")
    assert not (tmp_path / "x").exists() and not list((tmp_path / "new" / "ss").iterdir())[1:]


def test_ctrl_c_in_a_same_state_run_prints_the_stored_rows(tmp_path, monkeypatch, caplog):
    data = _data(tmp_path)
    calls = []
    real = same_state._one_turn

    def stop(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(same_state, "_one_turn", stop)
    with pytest.raises(RunInterrupted) as info:
        entry.run(_cfg(tmp_path, data))
    assert info.value.summary.computed == 1
    with pytest.raises(SystemExit) as done:
        run_main.__wrapped__(_cfg(tmp_path, data))
    assert done.value.code == 130
    assert "interrupted: 0 (item, turn)(s) stored by this run (0 ok, 0 failed) and 1 found" in caplog.text


def test_a_same_state_turn_that_raises_is_a_failure_and_the_run_goes_on(tmp_path, monkeypatch):
    data = _data(tmp_path)
    real = same_state._one_turn

    def flaky(*args, **kwargs):
        if args[7] == 0:  # the first turn of the item: nothing of it is stored
            raise RuntimeError("the disk hiccuped\nsecond line")
        return real(*args, **kwargs)

    monkeypatch.setattr(same_state, "_one_turn", flaky)
    summary = entry.run(_cfg(tmp_path, data, "limit=2", "dataset=gsm8k"))
    assert summary.failed == 2 and summary.computed == 0
    assert summary.first_error == "RuntimeError: the disk hiccuped"
    assert not list((tmp_path / "ss").rglob("*.parquet"))
    monkeypatch.setattr(same_state, "_one_turn", real)
    again = entry.run(_cfg(tmp_path, data, "limit=2", "dataset=gsm8k"))
    assert again.computed == 2 and again.failed == 0 and again.skipped == 0
