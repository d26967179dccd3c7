"""The expected-vs-realized table's per-row differences (eval.report.tables)."""

import pytest

from eval.report.analysis import load
from eval.report.tables import expected_check_table, realized_minus_expected, uncut_difference

ROW = {"accept_lengths": [3, 2, 1], "expected_accept_lengths": [2.5, 2.0, 2.25], "last_cycle_verified": 3,
       "max_new_tokens": 6, "new_tokens": 6, "depth": 2}


def test_uncut_difference_counts_the_last_cycle_uncut():
    assert uncut_difference(ROW) == (pytest.approx((3 + 2 + 3) - 6.75), 3)
    assert uncut_difference({**ROW, "last_cycle_verified": None}) is None  # rows from before the column
    assert uncut_difference({**ROW, "expected_accept_lengths": None}) is None


def test_the_other_estimators():
    assert realized_minus_expected(ROW) == pytest.approx(2.5 - 2.25)  # all but the last cycle
    # rows reaching the budget, cycles starting >= depth + 1 tokens before it: starts 0, 3, 5 -> only the first
    assert realized_minus_expected(ROW, budget_only=True) == pytest.approx(0.5)


def test_committed_rows_render_every_estimator():
    df = load("results/runs.parquet")
    text = expected_check_table(df)
    assert text is not None and "every cycle, last uncut" in text and "cycles before the budget" in text
