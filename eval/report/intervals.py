"""Intervals of the result tables and figures, over the independent unit: the item (an item's turns and seeds
are one cluster: they share its prompt).

* :func:`cluster_ci` / :func:`item_ci` - a mean with its cluster-robust Student-t 95% half-width over items
  (equal to the Student-t interval of the item means when every item has the same number of rows);
* :func:`cluster_bootstrap` / :func:`speedup_interval` - a percentile interval of a ratio of sums, resampling
  items with replacement (seeded);
* :func:`mean_ci` - the Student-t interval of independent values (items, keys of one item each);
* :func:`same_job` - whether two rows were timed in one job (``run_id``): the condition of an interval on a
  speed comparison;
* :func:`fmt`, :func:`fmt_interval` - their cells.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import numpy as np
import pandas as pd

#: the two-sided 95% quantile of the normal distribution
Z95 = 1.96
# two-sided 95% Student-t quantiles for df = 1..30 (df > 30: the normal's, Z95)
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


#: the fewest values a 95% interval is given for: at n = 2 the Student-t half-width is 12.7 sd / sqrt(2),
#: an interval that says nothing (a tau of 3.74 +- 10.56 reaches below the 1 no decoder goes below)
MIN_CI_N = 3


class NoInterval(float):
    """mean_ci's half-width below MIN_CI_N values: NaN (no bar drawn) that fmt prints as "n too small"."""

    def __new__(cls) -> "NoInterval":
        return super().__new__(cls, math.nan)


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, 95% half-width, n); half-width NaN for n = 1 (no spread to speak of), :class:`NoInterval`
    (NaN, printed "n too small") for 1 < n < MIN_CI_N."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(xs) / n
    if n < MIN_CI_N:
        return mean, NoInterval() if n > 1 else math.nan, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n), n


#: the columns that name an item, the independent unit of every interval over rows (its turns and seeds are
#: one cluster: they share the item's prompt)
ITEM = ["dataset", "item_id"]
#: how the tables and figures name their intervals
CI_UNIT = "95% CI clustered by item (an item's turns and seeds are one unit)"
#: resamples of :func:`cluster_bootstrap` (its percentile ends move by about 0.01 of the half-width between seeds)
BOOTSTRAP_DRAWS = 2000


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile with ``df`` degrees of freedom (df > 30: the normal's)."""
    return _T95[df - 1] if df <= len(_T95) else Z95


def _cluster_codes(clusters) -> np.ndarray:
    """One integer per value: the index of its cluster label (labels: any hashables, tuples included)."""
    seen: dict = {}
    return np.asarray([seen.setdefault(c, len(seen)) for c in clusters], dtype=np.int64)


def cluster_ci(values: Iterable[float], clusters: Iterable) -> tuple[float, float, int]:
    """(mean, 95% half-width, n) of ``values`` whose ``clusters`` (one label per value) are the independent
    units: the mean of every value, with the cluster-robust standard error (the sums over each cluster of
    the deviations from the mean, G / (G - 1) small-sample factor) and a Student-t quantile on G - 1 degrees
    of freedom, G = clusters. Values that repeat within a cluster add no information and narrow nothing:
    with equal cluster sizes it is exactly the Student-t interval of the cluster means. n counts values;
    the half-width is NaN for one cluster and :class:`NoInterval` below MIN_CI_N clusters. NaN values are
    dropped."""
    xs = np.asarray([math.nan if v is None else float(v) for v in values], dtype=float)
    codes = _cluster_codes(clusters)
    if len(codes) != len(xs):
        raise ValueError(f"cluster_ci: {len(xs)} values but {len(codes)} cluster labels")
    keep = ~np.isnan(xs)
    xs, codes = xs[keep], np.unique(codes[keep], return_inverse=True)[1]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(xs.mean())
    groups = int(codes.max()) + 1
    if groups < MIN_CI_N:
        return mean, NoInterval() if groups > 1 else math.nan, n
    sums = np.bincount(codes, weights=xs - mean, minlength=groups)
    var = groups / (groups - 1) * float((sums ** 2).sum()) / n ** 2
    return mean, t95(groups - 1) * math.sqrt(var), n


def item_clusters(rows: pd.DataFrame) -> list:
    """The item (:data:`ITEM`) of every row of ``rows`` (a frame with the columns, or indexed by them)."""
    if all(c in rows.columns for c in ITEM):
        return list(zip(*(rows[c] for c in ITEM)))
    names = list(rows.index.names)
    return list(zip(*(rows.index.get_level_values(names.index(c)) for c in ITEM)))


def item_ci(rows, column: Optional[str] = None) -> tuple[float, float, int]:
    """:func:`cluster_ci` of ``rows[column]`` clustered by item; ``rows`` may be a Series indexed by the
    :data:`ITEM` levels (a per-key frame of the same-state tables) with ``column`` None."""
    if column is None:
        series = rows
        return cluster_ci(series.to_numpy(dtype=float), item_clusters(series.to_frame()))
    return cluster_ci(rows[column].to_numpy(dtype=float, na_value=math.nan), item_clusters(rows))


def cluster_bootstrap(sums: np.ndarray, statistic, draws: int = BOOTSTRAP_DRAWS,
                      seed: int = 0) -> tuple[float, float]:
    """(low, high): the 2.5% and 97.5% percentiles of ``statistic`` over ``draws`` resamples of the clusters
    (rows of ``sums``, [G, k]: each cluster's sums of k quantities), drawn with replacement from a seeded
    generator; ``statistic`` maps [draws, k] column sums to [draws] values. NaN ends below MIN_CI_N clusters."""
    groups = len(sums)
    if groups < MIN_CI_N:
        return math.nan, math.nan
    pick = np.random.default_rng(seed).integers(0, groups, size=(draws, groups))
    totals = np.stack([sums[:, j][pick].sum(axis=1) for j in range(sums.shape[1])], axis=1)
    values = statistic(totals)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return math.nan, math.nan
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def speedup_interval(rows: pd.DataFrame) -> tuple[float, float]:
    """The 95% interval of :func:`speedup_ratio_of_sums`, a cluster bootstrap over items (NaN ends below
    MIN_CI_N items, or without AR partners)."""
    rows = rows.dropna(subset=["ar_wall_s"])
    if rows.empty:
        return math.nan, math.nan
    cols = ["new_tokens", "wall_s", "ar_new_tokens", "ar_wall_s"]
    sums = rows.assign(_item=item_clusters(rows)).groupby("_item")[cols].sum().to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return cluster_bootstrap(sums, lambda t: (t[:, 0] / t[:, 1]) / (t[:, 2] / t[:, 3]))


def item_means(values: pd.Series, rows: pd.DataFrame) -> pd.Series:
    """``values`` (aligned with ``rows``) averaged within each item: one value per independent unit (the
    paired tests' input)."""
    frame = pd.DataFrame({"v": values.to_numpy(dtype=float), "_item": item_clusters(rows)})
    return frame.groupby("_item", sort=True)["v"].mean()


def fmt_interval(value: float, low: float, high: float, digits: int = 2) -> str:
    """'2.84 [2.70, 2.99]'; the value alone where the interval is missing; '-' without a value."""
    if value is None or math.isnan(value):
        return "-"
    if any(v is None or math.isnan(v) for v in (low, high)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def normal_half_width(se: float) -> float:
    """95% half-width ``Z95 * se`` of an estimate whose sampling distribution is close to normal with a
    standard error ``se`` known from many draws: a Monte-Carlo mean over thousands of independent
    verifications (se from their own variance) or a proportion over thousands of trials (binomial se,
    sqrt(p(1-p)/n)). A mean over independent units (prompts, keys, seeds) whose sd is estimated from
    those units is :func:`mean_ci` (Student-t) instead."""
    return Z95 * se


def _none_for_na(values) -> list:
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v for v in values]


def same_job(a, b) -> bool:
    """Whether two rows' ``run_id`` values (Series aligned by prompt, or scalars) name one job: every pair
    recorded and equal (rows older than the column: not known to be, so not)."""
    left, right = _none_for_na(np.atleast_1d(np.asarray(a, dtype=object))), _none_for_na(
        np.atleast_1d(np.asarray(b, dtype=object)))
    return len(left) > 0 and all(x is not None and x == y for x, y in zip(left, right))


#: what a comparison of rows timed in different jobs says in place of an interval
SEPARATE = " (separate jobs)"


def fmt_speedup(summary: dict) -> str:
    """A ratio-of-sums speedup (``variant_summary``) with its cluster-bootstrap interval over items, or labelled
    "separate jobs" where its AR rows ran in another job."""
    if math.isnan(summary["speedup"]) or summary["ar_same_job"]:
        return fmt_interval(summary["speedup"], summary["speedup_low"], summary["speedup_high"])
    return fmt(summary["speedup"]) + SEPARATE


#: what a table cell says in place of an interval over too few values (NoInterval)
TOO_FEW = "n too small"


def fmt(mean: float, ci: Optional[float] = None, digits: int = 2) -> str:
    """'3.74 ± 0.21'; '3.74 (n too small)' where mean_ci gave no interval; '3.74' without one; '-' without a mean."""
    if mean is None or math.isnan(mean):
        return "-"
    if isinstance(ci, NoInterval):
        return f"{mean:.{digits}f} ({TOO_FEW})"
    if ci is None or math.isnan(ci):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}"
