"""Harness limits and defaults: runaway static trees and thread counts refused before anything
loads, shapes wider than the draft vocabulary before the first generation, one thread by default
(outside the config hash), the threads of each row in the speed tables, unusable timings reported."""

from __future__ import annotations

import logging
import os

import numpy as np
import pandas as pd
import pytest

import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.conf.schema import method_key
from eval.report.analysis import with_speedup
from eval.store import storage
from eval.store.keys import config_hash
from rheo.config import SpecConfig
from rheo.methods.static import MAX_STATIC_NODES

TINY = ["model=tiny_random", "max_new_tokens=4", "progress=false", "warmup=false", "dataset=gsm8k", "limit=1"]
ARCHIVE = os.path.join(os.path.dirname(__file__), "..", "results", "runs.parquet")


def _cfg(tmp_path, *extra):
    return compose_config(TINY + [f"output_dir={tmp_path / 'out'}", *extra])


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr("eval.measure.loop.load_pair", lambda *a, **k: pytest.fail("a model was loaded"))


def test_a_huge_static_tree_is_refused_before_anything_loads(tmp_path, no_model):
    with pytest.raises(ValueError, match=r"branching=\[200, 200\] makes a 40200-node tree, more than the 4096"):
        entry.run(_cfg(tmp_path, "method=static", "method.branching=[200,200]", "method.sparse_top=null"))
    with pytest.raises(ValueError, match="a chain of more than 4096 nodes"):
        entry.run(_cfg(tmp_path, "method=chain", f"method.depth={MAX_STATIC_NODES + 1}"))
    assert not (tmp_path / "out").exists()


def test_more_threads_than_cores_are_refused_before_anything_loads(tmp_path, no_model):
    with pytest.raises(ValueError, match=rf"num_threads=1000 exceeds the {os.cpu_count()} cores"):
        entry.run(_cfg(tmp_path, "num_threads=1000"))
    assert not (tmp_path / "out").exists()


def test_a_shape_wider_than_the_draft_vocabulary_is_refused_before_the_first_generation(tmp_path):
    with pytest.raises(ValueError, match=r"max\(method.branching\)=300 exceeds the draft vocabulary .*256 tokens"):
        entry.run(_cfg(tmp_path, "method=static", "method.branching=[300]", "method.sparse_top=null"))
    assert not list(storage.iter_shards(tmp_path / "out"))


def test_numpy_integers_make_a_static_shape():
    cfg = SpecConfig(method="static", branching=(np.int64(4), np.int32(2)), sparse_top=None)
    assert cfg.branching == (4, 2) and all(type(b) is int for b in cfg.branching)


def test_one_thread_by_default_and_the_thread_count_stays_out_of_committed_hashes():
    assert compose_config([]).num_threads == 1
    hashes = set(pd.read_parquet(ARCHIVE, columns=["config_hash"])["config_hash"])
    main_topk = ["experiment=main_table", "method=topk", "dtype=bfloat16", "seed=0", "max_new_tokens=128", "limit=24"]
    got = {config_hash(method_key(compose_config(main_topk + [f"num_threads={n}"]))) for n in ("1", "null", "2")}
    assert len(got) == 1 and got <= hashes  # the committed main-table Top-K rows, whatever the threads


def test_rows_record_their_threads_and_the_speed_tables_say_so(tmp_path):
    from eval.report.speed import phase_table, speed_table

    entry.run(_cfg(tmp_path, "method.k=4", "method.depth=2", "method.tree_size=6", "paired_baseline=true",
                    "temperature=0"))
    df = storage.load_results(tmp_path / "out")
    assert (df["num_threads"] == 1).all()
    from eval.report.analysis import add_variant

    assert "threads: 1" in speed_table(add_variant(df)) and "threads: 1" in phase_table(add_variant(df))
    # rows written before the column existed read it back as None
    old = add_variant(pd.read_parquet(ARCHIVE.replace("runs", "speed")).assign(status="ok", num_threads=None))
    assert "threads: not recorded" in speed_table(old)


def test_rows_without_usable_timings_are_reported_not_silently_dropped(caplog):
    base = dict(model="m", device="cpu", dtype="float32", temperature=1.0, seed=0, max_new_tokens=4, dataset="gsm8k",
                turn=0, paired_with=None, target_path=None, head_path=None)
    rows = []
    for item in (0, 1):
        rows.append(dict(base, method=AR.name, config_hash="a", item_id=item, new_tokens=4, wall_s=1.0, tokens_per_s=4.0))
        rows.append(dict(base, method="rheo", config_hash="r", item_id=item, new_tokens=4,
                         wall_s=0.5 if item == 0 else 0.0, tokens_per_s=8.0 if item == 0 else None))
    with caplog.at_level(logging.WARNING):
        out = with_speedup(pd.DataFrame(rows))
    assert out.loc[out["item_id"] == 0, "speedup"].item() == pytest.approx(2.0)
    assert out.loc[out["item_id"] == 1, "speedup"].isna().all()
    assert "1 row(s) have no usable tokens/s" in caplog.text and "item 1" in caplog.text
