"""Every interval over rows is clustered by item: an item's turns and seeds are one unit. On a constructed
data set whose second turn (and second seed) repeats the first exactly, the clustered interval is the
per-item interval, not narrower, and the paired tests count items."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eval.report.analysis import cluster_bootstrap, cluster_ci, item_ci, load, mean_ci, speedup_interval
from eval.report.tables import main_table

ROOT = Path(__file__).resolve().parents[1]


def _items(n: int = 12, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"dataset": "mt_bench", "item_id": range(n), "tau": rng.normal(2.5, 0.4, n)})


def test_perfectly_correlated_turns_give_the_per_item_interval():
    items = _items()
    twice = pd.concat([items.assign(turn=0), items.assign(turn=1)], ignore_index=True)  # two identical turns
    mean, half, n = item_ci(twice, "tau")
    per_item = mean_ci(items["tau"])
    assert n == 24 and mean == pytest.approx(per_item[0]) and half == pytest.approx(per_item[1], rel=1e-12)
    naive = mean_ci(twice["tau"])[1]
    assert naive < 0.75 * half  # what counting rows as independent would claim
    # and three seeds on top: still the per-item interval
    seeds = pd.concat([twice.assign(seed=s) for s in range(3)], ignore_index=True)
    assert item_ci(seeds, "tau")[1] == pytest.approx(per_item[1], rel=1e-12)


def test_independent_rows_keep_the_student_t_interval_and_small_clusters_get_none():
    values = [1.0, 2.0, 4.0, 3.5, 2.2]
    assert cluster_ci(values, range(5))[1] == pytest.approx(mean_ci(values)[1])
    assert math.isnan(cluster_ci([1.0, 2.0, 3.0, 4.0], ["a", "a", "b", "b"])[1])  # two items: no interval
    assert math.isnan(cluster_ci([1.0, 2.0], ["a", "a"])[1])


def test_the_bootstrap_resamples_items_not_rows():
    rng = np.random.default_rng(1)
    rows = pd.DataFrame({"dataset": "gsm8k", "item_id": np.arange(20), "new_tokens": 64.0,
                         "wall_s": rng.uniform(1.0, 3.0, 20), "ar_new_tokens": 64.0, "ar_wall_s": rng.uniform(2.0, 4.0, 20)})
    doubled = pd.concat([rows, rows], ignore_index=True)  # each item twice (two turns, identical)
    assert speedup_interval(doubled) == pytest.approx(speedup_interval(rows), rel=1e-9)
    low, high = cluster_bootstrap(np.ones((10, 1)), lambda t: t[:, 0])
    assert low == high == 10.0


def _committed_seeds(seeds: int) -> pd.DataFrame:
    """The committed main-table rows (turn 0), repeated as further seeds with identical values."""
    rows = load(ROOT / "results" / "runs.parquet")
    rows = rows[rows["turn"] == 0].drop(columns=["output_tokens", "accept_lengths", "expected_accept_lengths"])
    return pd.concat([rows.assign(seed=s) for s in range(seeds)], ignore_index=True)


def _pooled(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return next(dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines if "pooled" in ln)


@pytest.mark.slow  # the whole main table of the committed rows, twice
def test_the_main_table_does_not_narrow_when_every_row_is_repeated():
    one, two = main_table(_committed_seeds(1)), main_table(_committed_seeds(2))
    assert "clustered by item" in two and "seeds: 2" in two
    a, b = _pooled(one), _pooled(two)
    assert int(b["n"]) == 2 * int(a["n"]) > 0
    for col in ("τ Top-K", "τ Rheo m=1", "Δτ (paired)", "p sign", "p perm"):
        assert a[col] == b[col], col  # the same interval and p-values: the repeats are no new information
