"""Acceptance breakdowns from the rows' accept_lengths (eval.report.acceptance): the per-position rate as
vLLM defines it (the share of verification steps that accept at least i drafted tokens), the histogram and
the mean acceptance length, against a hand-computed example; the rates sum to the mean accepted drafted
tokens; the committed acceptance.md is what the committed main-table rows draw."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from eval.report.acceptance import acceptance_breakdown, acceptance_by_cell, acceptance_table
from eval.report.analysis import load

ROOT = Path(__file__).resolve().parents[1]


def test_per_position_rates_histogram_and_mean_length_by_hand():
    # two rows, five steps emitting 1, 3, 2 | 4, 1 tokens: 0, 2, 1, 3, 0 drafted tokens accepted
    got = acceptance_breakdown([[1, 3, 2], [4, 1]], depth=4)
    assert got["steps"] == 5
    assert got["per_position"] == pytest.approx([3 / 5, 2 / 5, 1 / 5, 0.0], abs=1e-15)  # >=1, >=2, >=3, >=4
    assert got["histogram"] == pytest.approx([2 / 5, 1 / 5, 1 / 5, 1 / 5, 0.0], abs=1e-15)  # exactly 0..4
    assert got["mean_accepted"] == pytest.approx(6 / 5, abs=1e-15)
    assert got["mean_accept_length"] == pytest.approx(11 / 5, abs=1e-15)  # emitted tokens per step
    assert sum(got["per_position"]) == pytest.approx(got["mean_accepted"], abs=1e-15)


def test_rates_sum_to_the_mean_accepted_drafted_tokens_and_the_histogram_to_one():
    rnd = random.Random(0)
    for _ in range(50):
        rows = [[rnd.randint(1, 6) for _ in range(rnd.randint(1, 30))] for _ in range(rnd.randint(1, 5))]
        got = acceptance_breakdown(rows, depth=rnd.choice([None, 3, 5, 8]))
        steps = [a for r in rows for a in r]
        assert got["steps"] == len(steps)
        assert math.isclose(sum(got["per_position"]), sum(steps) / len(steps) - 1, abs_tol=1e-12)
        assert math.isclose(got["mean_accept_length"], sum(steps) / len(steps), abs_tol=1e-12)
        assert math.isclose(sum(got["histogram"]), 1.0, abs_tol=1e-12)
        assert len(got["histogram"]) == len(got["per_position"]) + 1 >= max(steps)
        assert all(a >= b for a, b in zip(got["per_position"], got["per_position"][1:]))  # never rises


def test_a_step_that_emitted_nothing_is_refused_and_no_steps_give_nan():
    with pytest.raises(ValueError, match="emitted no token"):
        acceptance_breakdown([[2, 0]])
    empty = acceptance_breakdown([], depth=2)
    assert empty["steps"] == 0 and math.isnan(empty["mean_accept_length"]) and len(empty["per_position"]) == 2


def test_the_committed_acceptance_table_is_what_the_committed_main_table_rows_draw():
    df = load(ROOT / "results" / "runs.parquet")
    cells = acceptance_by_cell(df, ("temperature",))
    assert set(cells["variant"]) == {"topk", "rheo m=1"}  # the AR rows have no tree
    for one in cells.itertuples():
        assert math.isclose(sum(one.per_position), one.mean_accepted, abs_tol=1e-12)
        assert len(one.per_position) == 8  # the paper's depth
    drawn = acceptance_table(df)
    assert drawn == (ROOT / "results" / "tables" / "acceptance.md").read_text()
    assert "≥1" in drawn and "Accepted drafted tokens per step" in drawn and "| **pooled** | Top-K |" in drawn


def test_peak_memory_is_an_optional_row_column_read_on_a_cpu():
    import resource

    from eval.measure.rows import peak_memory_mb
    from eval.store import storage

    assert "peak_memory_mb" in storage.OPTIONAL_COLUMNS  # rows stored before it read back with None
    assert peak_memory_mb("cpu") == pytest.approx(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rel=0.05)


@pytest.mark.slow
def test_new_rows_carry_peak_memory_and_old_rows_still_read(tmp_path):
    """A harness row holds peak_memory_mb (a CPU: the process's peak RSS, at least the tiny pair's tensors);
    it is no part of the config hash; rows stored without the column read back with None."""
    import pyarrow.parquet as pq

    import eval.run as entry
    from eval.conf.compose import compose_config
    from eval.conf.schema import method_key
    from eval.store.keys import config_hash

    cfg = compose_config(["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "method=topk",
                          "method.k=3", "method.depth=2", "method.tree_size=4", "num_threads=1", "progress=false",
                          "warmup=false", "baseline=false", f"output_dir={tmp_path / 'runs'}"])
    entry.run(cfg)
    df = load(tmp_path / "runs")
    assert len(df) == 1 and df["peak_memory_mb"].iloc[0] > 1.0
    assert df["config_hash"].iloc[0] == config_hash(method_key(cfg)) and "peak_memory_mb" not in method_key(cfg)
    shard = next((tmp_path / "runs").rglob("*_t0.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.drop_columns(["peak_memory_mb"]), shard)  # a row stored before the column
    old = load(tmp_path / "runs")
    assert len(old) == 1 and old["peak_memory_mb"].isna().all()
