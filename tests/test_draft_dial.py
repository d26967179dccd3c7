"""The draft-quality dial in the same-state harness: ``draft_mix`` keys its own driver folder
(rows of the head alone keep their hashes), every row carries it, a = 0 reproduces the head
alone, and with the target itself as drafter a sample drawn from it is always accepted."""

from __future__ import annotations

import pytest

import eval.run as entry
import eval.store.state_archive as same_state_archive
from eval.conf.compose import compose_config

TREE = "k:4,depth:3,tree_size:8,sparse_top:null"
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=10", "num_threads=1", "progress=false",
        "method=topk", "method.k=4", "method.depth=3", "method.tree_size=8", "method.sparse_top=null",
        "temperature=1.0", "calibration=false", "ot_bound=false",
        f"compare=[{{name:topk,{TREE}}},{{name:rheo,m:0,{TREE}}}]"]


def _run(tmp_path, *extra):
    return entry.run(compose_config(["measure=same_state"] + TINY + [f"output_dir={tmp_path / 'ss'}", *extra]))


@pytest.mark.slow
def test_dial_rows_are_keyed_and_labelled_by_draft_mix(tmp_path):
    _run(tmp_path)
    _run(tmp_path, "draft_mix=1.0")
    _run(tmp_path, "draft_mix=0.0")
    rows = same_state_archive.load_rows(tmp_path / "ss")
    drivers = same_state_archive.load_rows(tmp_path / "ss", driver=True)
    assert rows["driver_hash"].nunique() == 3 and len(drivers) == 3
    assert rows["draft_mix"].isna().sum() == len(rows) / 3  # the head alone: no dial in the key
    # with the target itself as drafter Rheo m=0's root sample is drawn from p: always accepted
    m0 = rows[rows["variant"] == "rheo m=0"]
    assert (m0[m0["draft_mix"] == 1.0]["expected_emitted"] >= 2 - 1e-6).all()
    assert m0[m0["draft_mix"] == 1.0]["expected_emitted"].mean() > m0[m0["draft_mix"] == 0.0]["expected_emitted"].mean()
    # a = 0 is the head alone on the target's vocabulary: the same trees, so the same expectations
    head = rows[rows["draft_mix"].isna()].sort_values(["variant", "state"])["expected_emitted"].to_numpy()
    zero = rows[rows["draft_mix"] == 0.0].sort_values(["variant", "state"])["expected_emitted"].to_numpy()
    assert head == pytest.approx(zero, abs=1e-5)


@pytest.mark.parametrize("bad", ["1.5", "-0.2"])
def test_a_dial_outside_0_1_is_refused_before_loading(tmp_path, bad):
    with pytest.raises(ValueError, match="draft_mix"):
        _run(tmp_path, f"draft_mix={bad}")


def test_shards_written_before_the_dial_existed_are_read_with_it_null(tmp_path):
    """A shard without the draft_mix column (or the options keyed only when set) is an older
    shard, not a foreign one: it is read, the missing columns null, and a rerun keeps it."""
    import pyarrow.parquet as pq

    _run(tmp_path)
    for path in (tmp_path / "ss").rglob("*.parquet"):
        table = pq.read_table(path)
        keep = [c for c in table.column_names if c not in ("draft_mix", "rank", "probe_min")]
        pq.write_table(table.select(keep), path)
    rows = same_state_archive.load_rows(tmp_path / "ss")
    assert len(rows) > 0 and rows["draft_mix"].isna().all()
    assert _run(tmp_path).computed == 0
