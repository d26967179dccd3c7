"""eval.measure.same_states: rows of the tiny random Llama, the driver's tokens equal to its eval.run row,
resuming per compared method, bad compare entries named, and the over-keys paired table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import eval.run as entry
import eval.states.tables as same_state_tables
import eval.store.state_archive as same_state_archive
import eval.store.state_restore as same_state_restore
from eval.conf.compose import compose_config
from eval.store import storage

ROOT = Path(__file__).resolve().parent.parent
TREE = "k:4,depth:3,tree_size:8,sparse_top:32"
TINY = ["model=tiny_random", "dataset=mt_bench", "limit=1", "max_new_tokens=10", "num_threads=1", "progress=false",
        "method=rheo", "method.k=4", "method.depth=3", "method.tree_size=8", "method.sparse_top=32"]
COMPARE = f"compare=[{{name:topk,{TREE}}},{{name:rheo,m:1,{TREE}}},{{name:static,branching:[3,1]}}]"


def _cfg(tmp_path, *extra):
    return compose_config(["measure=same_state"] + TINY + [f"output_dir={tmp_path / 'ss'}", *extra])


@pytest.mark.slow
def test_rows_driver_tokens_and_resume(tmp_path, monkeypatch):
    summary = entry.run(_cfg(tmp_path, COMPARE))
    assert summary.computed == 2 and summary.skipped == 0  # one MT-bench item, two turns
    rows, drivers = same_state_archive.load_rows(tmp_path / "ss"), same_state_archive.load_rows(tmp_path / "ss", driver=True)
    assert len(drivers) == 2 and set(rows["variant"]) == {"topk", "rheo m=1", "static rsd (3,1)"}
    for d in drivers.itertuples():
        states = rows[(rows["turn"] == d.turn)]
        assert len(states) == 3 * len(d.accept_lengths) and set(states["state"]) == set(range(len(d.accept_lengths)))
        mine = states[states["variant"] == "rheo m=1"].sort_values("state")
        assert mine["driver_emitted"].tolist() == list(d.accept_lengths)
    assert (rows["expected_emitted"] >= 1).all() and rows["depth_accept"].map(len).isin([2, 3]).all()
    assert rows["driver"].unique().tolist() == ["rheo m=1"] and rows["head_sha"].isna().all()  # tiny: no head
    # the driver's tokens are those of its eval.run row (same generation seed)
    run_cfg = compose_config(TINY + [f"output_dir={tmp_path / 'runs'}", "baseline=false", "warmup=false"])
    entry.run(run_cfg)
    plain = storage.load_results(tmp_path / "runs").sort_values("turn")
    assert [list(t) for t in plain["output_tokens"]] == [list(t) for t in drivers.sort_values("turn")["output_tokens"]]
    # resume: nothing left; a new compared method computes only its own rows
    before = {p: p.read_bytes() for p in (tmp_path / "ss").rglob("*.parquet")}
    assert entry.run(_cfg(tmp_path, COMPARE)).computed == 0
    more = COMPARE[:-1] + ",{name:rheo,m:0," + TREE + "}]"
    assert entry.run(_cfg(tmp_path, more)).rows == len(rows) // 3
    after = same_state_archive.load_rows(tmp_path / "ss")
    assert set(after["variant"]) == {"topk", "rheo m=0", "rheo m=1", "static rsd (3,1)"}
    assert all(p.read_bytes() == b for p, b in before.items() if "driver" not in p.parts)


def test_archive_holds_every_row_and_reads_like_the_directory(tmp_path):
    entry.run(_cfg(tmp_path, COMPARE))
    archive = tmp_path / "same_state.parquet"
    assert same_state_tables.main([str(tmp_path / "ss"), "--archive", str(archive), "--out", str(tmp_path / "a.md")]) == 0
    for driver in (False, True):
        a, d = same_state_archive.load_rows(archive, driver=driver), same_state_archive.load_rows(tmp_path / "ss", driver=driver)
        key = ["turn", "variant", "state"] if not driver else ["turn"]
        pd.testing.assert_frame_equal(a.sort_values(key).reset_index(drop=True), d.sort_values(key).reset_index(drop=True))
    assert same_state_tables.main([str(archive), "--out", str(tmp_path / "b.md"), "--figure", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()
    assert same_state_tables.main([str(tmp_path / "ss"), "--archive", str(tmp_path / "ss")]) == 2


def test_an_archive_without_the_bulky_mechanism_columns_gives_its_own_tables_again(tmp_path):
    entry.run(_cfg(tmp_path, COMPARE))
    lean, out = tmp_path / "lean.parquet", tmp_path / "lean.md"
    args = [str(tmp_path / "ss"), "--archive", str(lean), "--out", str(out)]
    assert same_state_tables.main(args + ["--archive-without", "calibration", "--archive-without", "depth"]) == 0
    rows, full = same_state_archive.load_rows(lean), same_state_archive.load_rows(tmp_path / "ss")
    assert rows[["calib_n", "calib_q", "calib_p", "depth_accept"]].isna().all().all()
    assert full["depth_accept"].notna().all() and len(rows) == len(full)
    pd.testing.assert_series_equal(rows.sort_values(["turn", "variant", "state"])["expected_emitted"].reset_index(drop=True),
                                   full.sort_values(["turn", "variant", "state"])["expected_emitted"].reset_index(drop=True))
    assert "Not recorded" in out.read_text()
    assert same_state_tables.main([str(lean), "--out", str(tmp_path / "again.md")]) == 0
    assert (tmp_path / "again.md").read_text() == out.read_text()
    assert same_state_tables.main([str(tmp_path / "ss"), "--archive-without", "depth"]) == 2  # needs --archive


@pytest.mark.slow
def test_a_folder_restored_from_its_archive_resumes_where_it_stopped(tmp_path):
    """restore_from: the archive's shards come back into an empty folder with the same rows, and
    a run over them computes nothing; a larger run computes only the new items."""
    entry.run(_cfg(tmp_path, COMPARE))
    archive = tmp_path / "same_state.parquet"
    same_state_archive.export_rows(tmp_path / "ss", archive)
    fresh = tmp_path / "fresh"
    cfg = compose_config(["measure=same_state"] + TINY + [f"output_dir={fresh}", f"restore_from={archive}", COMPARE])
    assert entry.run(cfg).computed == 0
    for driver in (False, True):
        key = ["turn", "variant", "state"] if not driver else ["turn"]
        a, b = (same_state_archive.load_rows(d, driver=driver).sort_values(key).reset_index(drop=True)
                for d in (tmp_path / "ss", fresh))
        pd.testing.assert_frame_equal(a, b)
    assert same_state_restore.restore_rows(archive, fresh) == 0  # shards already there are kept
    wider = compose_config(["measure=same_state"] + [a for a in TINY if a != "limit=1"]
                           + ["limit=2", f"output_dir={fresh}", COMPARE])
    summary = entry.run(wider)
    assert summary.skipped == 2 and summary.computed == 2  # item 1's two turns only


def test_rows_name_their_precision_and_older_shards_take_it_from_their_config(tmp_path):
    entry.run(_cfg(tmp_path, COMPARE, "dtype=null"))  # dtype=null: the pair's own (auto resolves by the CPU)
    rows = same_state_archive.load_rows(tmp_path / "ss")
    assert set(rows["dtype"]) == {"None"} and set(rows["device"]) == {"cpu"}  # the configured dtype: default
    assert set(same_state_archive.load_rows(tmp_path / "ss", driver=True)["dtype"]) == {"None"}
    import pyarrow.parquet as pq
    for path in (tmp_path / "ss").rglob("*.parquet"):  # shards written before the columns existed
        pq.write_table(pq.read_table(path).drop_columns(["device", "dtype"]), path)
    old = same_state_archive.load_rows(tmp_path / "ss")
    pd.testing.assert_frame_equal(old, rows)


@pytest.mark.parametrize("extra,needle", [
    ("compare=[]", "compare is empty"),
    ("compare=[{name:ar}]", r"compare\[0\].name must be a registered method"),
    ("compare=[{name:topk},{name:rheo,m:12}]", r"compare\[1\]: m must be in"),
    ("compare=[{name:static}]", r"compare\[0\]: branching is required"),
])
def test_bad_compare_entries_are_named(tmp_path, monkeypatch, extra, needle):
    monkeypatch.setattr("eval.measure.loop.load_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError, match=needle):
        entry.run(_cfg(tmp_path, extra))


@pytest.mark.slow  # a real `python -m eval.run` process (test_entry_points.py keeps one per kind of refusal): make test-slow
def test_cli_bad_input_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "eval.run", "measure=same_state", *TINY, f"output_dir={tmp_path}",
                           "compare=[{name:rheo,m:12}]"], cwd=ROOT, capture_output=True, text=True)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "compare[0]: m must be in" in said and "Traceback" not in said
    proc = subprocess.run([sys.executable, "-m", "eval.states.tables", str(tmp_path / "none")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "not a same-state results directory" in proc.stderr
