"""Paired tests (eval/report/stats.py) against hand-computed values."""

import math

import pytest

from eval.report.stats import permutation_test, sign_test


def test_sign_test_exact_values():
    assert sign_test([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)  # all positive, n=5
    assert sign_test([1, -1, 2, -2]) == pytest.approx(1.0)
    assert sign_test([0.5, 0, 0, 1.0]) == pytest.approx(0.5)  # ties dropped: n=2, both positive
    assert math.isnan(sign_test([0, 0]))


def test_permutation_exact_and_monte_carlo():
    # n=3 all positive: only the all-plus and all-minus flips reach |mean| = 2 -> 2/8
    assert permutation_test([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    assert permutation_test([1.0, -1.0]) == pytest.approx(1.0)
    strong = [0.3 + 0.01 * i for i in range(30)]  # n > exact_max: Monte-Carlo, p at its floor
    assert permutation_test(strong, draws=2000) == pytest.approx(1 / 2001)
    null = [(-1) ** i * (1 + 0.1 * i) for i in range(30)]
    assert permutation_test(null, draws=2000) > 0.3
