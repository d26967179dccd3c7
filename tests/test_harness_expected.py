"""Rows with the exact expected acceptance (record_expected=true): same tokens, same hash, resumable."""

from __future__ import annotations

import pandas as pd
import pytest

import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.store.storage import load_results

TINY = ["model=tiny_random", "max_new_tokens=6", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "dataset=mt_bench", "limit=1"]


def _run(out, *extra):
    return entry.run(compose_config(TINY + [f"output_dir={out}", *extra]))


def _by_key(df):
    return {(r.method, r.dataset, r.item_id, r.turn): r for r in df.itertuples()}


def test_expected_rows_same_tokens_same_hash(tmp_path, monkeypatch):
    _run(tmp_path / "plain")
    _run(tmp_path / "exp", "record_expected=true")
    plain, exp = load_results(tmp_path / "plain"), load_results(tmp_path / "exp")
    assert set(plain["config_hash"]) == set(exp["config_hash"])  # not in the config hash
    assert plain["expected_tau"].isna().all()
    a, b = _by_key(plain), _by_key(exp)
    assert a.keys() == b.keys() and len(a) == 4  # (rheo, AR) x 2 turns
    for key, row in b.items():
        assert list(row.output_tokens) == list(a[key].output_tokens)  # it draws no random number
        if row.method == AR.name:
            assert pd.isna(row.expected_tau)  # no cycles, no expectation
            continue
        e = list(row.expected_accept_lengths)
        assert len(e) == row.target_calls
        assert all(1.0 - 1e-9 <= v <= 1 + 2 + 1e-9 for v in e)  # bonus + at most depth drafted tokens
        assert row.expected_tau == pytest.approx(sum(e) / len(e))
        assert row.last_cycle_verified >= row.accept_lengths[-1]  # the cut last cycle, counted uncut


def test_rows_without_expected_are_recomputed_once(tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = _run(out)
    assert first.computed == 4
    again = _run(out, "record_expected=true")
    assert again.computed == 2 and again.skipped == 2  # the rheo rows again; AR rows have no cycles
    df = load_results(out)
    assert len(df) == 4 and df[df["method"] == "rheo"]["expected_tau"].notna().all()

    def forbidden(*args, **kwargs):
        raise AssertionError("model loaded although every row was already stored")
    monkeypatch.setattr("eval.measure.loop.load_pair", forbidden)
    assert _run(out, "record_expected=true").computed == 0
    assert _run(out).computed == 0  # rows with expectations serve a run without them
