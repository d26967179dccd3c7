"""The power of a seeded chi-square test against a known distortion: an exact upper bound on a miss.

Setting: ``n`` independent runs of a decoder whose exact output distribution is ``actual``
(by enumeration, :func:`rheo.exact.decoder_distribution`) are tested against ``target`` with
Pearson's statistic over outcomes, outcomes with ``n * target < min_expected`` pooled
(``tests/toys.chi_square_pvalue``), and the test *detects* the distortion when its p-value is
below ``alpha``. A *miss* is a p-value >= ``alpha``, i.e. a statistic <= ``c``, the chi-square
quantile of ``alpha`` at the test's degrees of freedom.

The bound: merging cells never raises Pearson's statistic (Cauchy-Schwarz), so for one outcome
``a`` whose cell is not pooled, the statistic is at least ``n (f - p)^2 / (p (1 - p))`` with
``p = target[a]`` and ``f`` the observed frequency of ``a``. A miss therefore needs
``|n f - n p| <= sqrt(c n p (1 - p))``, while ``n f ~ Binomial(n, actual[a])``: that binomial
window is summed exactly (in log space, no normal approximation). The degrees of freedom are at
most (outcomes the target can emit) - 1, and more of them only raise ``c``, so that count is used.
The bound is the smallest over outcomes ``a``; power = 1 - miss.
"""

from __future__ import annotations

import math

import torch


def chi2_quantile(alpha: float, dof: int) -> float:
    """``c`` with P(chi-square_dof > c) = ``alpha``, by bisection on the survival function the test uses."""
    if not 0.0 < alpha < 1.0 or dof < 1:
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1) and dof={dof!r} be >= 1")
    a = torch.tensor(dof / 2, dtype=torch.float64)

    def survival(x: float) -> float:
        return float(torch.special.gammaincc(a, torch.tensor(x / 2, dtype=torch.float64)))

    lo, hi = 0.0, 1.0
    while survival(hi) > alpha:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if survival(mid) > alpha else (lo, mid)
    return hi


def binomial_window_log10(n: int, q: float, lo: float, hi: float) -> float:
    """log10 P(lo <= X <= hi) for X ~ Binomial(n, q), summed exactly over the integers in [lo, hi]."""
    ks = range(max(0, math.ceil(lo)), min(n, math.floor(hi)) + 1)
    if q <= 0.0 or q >= 1.0:  # a point mass at 0 or n
        return 0.0 if (n if q >= 1.0 else 0) in ks else -math.inf
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(q)
            + (n - k) * math.log1p(-q) for k in ks]
    if not logs:
        return -math.inf
    top = max(logs)
    return (top + math.log(sum(math.exp(v - top) for v in logs))) / math.log(10)


def miss_log10(target: dict, actual: dict, n: int, alpha: float, min_expected: float = 5.0) -> float:
    """log10 of an upper bound on P(the chi-square test of ``n`` runs from ``actual`` against ``target``
    has p-value >= ``alpha``). ``target``, ``actual``: {outcome: probability}."""
    support = [a for a, p in target.items() if p > 0]
    c = chi2_quantile(alpha, max(1, len(support) - 1))
    best = 0.0
    for a in support:
        p = target[a]
        if n * p < min_expected or p >= 1.0:  # pooled (or the only outcome): no cell of its own
            continue
        half = math.sqrt(c * n * p * (1 - p))
        best = min(best, binomial_window_log10(n, actual.get(a, 0.0), n * p - half, n * p + half))
    return best
