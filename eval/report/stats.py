"""Paired tests of a difference (Rheo - Top-K on the same (suite, item, turn, seed) keys).

* :func:`sign_test` - two-sided exact binomial test on the signs of the non-zero
  differences (ties dropped): no assumption on the distribution of the differences.
* :func:`permutation_test` - two-sided sign-flip permutation test of the mean
  difference: exact (all 2^n flips) for n <= ``exact_max``, else ``draws``
  random flips from a seeded generator (deterministic; its p-value has Monte-Carlo
  error about sqrt(p(1-p)/draws)).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch


def _clean(diffs: Sequence[float]) -> list[float]:
    return [float(d) for d in diffs if d is not None and not math.isnan(float(d))]


def sign_test(diffs: Sequence[float]) -> float:
    """p-value of H0: positive and negative differences equally likely (NaN if all ties)."""
    xs = [d for d in _clean(diffs) if d != 0]
    n, pos = len(xs), sum(d > 0 for d in xs)
    if n == 0:
        return math.nan
    k = min(pos, n - pos)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def permutation_test(diffs: Sequence[float], draws: int = 20_000, seed: int = 0, exact_max: int = 16) -> float:
    """p-value of H0: differences symmetric around 0 (|mean| at least as large under sign flips)."""
    xs = torch.tensor(_clean(diffs), dtype=torch.float64)  # [n]
    n = int(xs.numel())
    if n == 0:
        return math.nan
    observed = float(xs.mean().abs())
    if n <= exact_max:
        bits = torch.arange(2 ** n)[:, None].bitwise_right_shift(torch.arange(n)).bitwise_and(1)  # [2^n, n]
        signs = 1.0 - 2.0 * bits.to(torch.float64)
    else:
        g = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (draws, n), generator=g).to(torch.float64) * 2 - 1  # [draws, n]
    means = (signs * xs).mean(dim=1).abs()
    hits = int((means >= observed - 1e-12).sum())
    if n <= exact_max:
        return hits / signs.shape[0]
    return (hits + 1) / (draws + 1)
