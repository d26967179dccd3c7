"""Statistics of same-state rows (eval.measure.same_states) over *keys*, the unit of every interval here.

A **key** is one prompt of one study: (model, head_sha, temperature, suite, item, turn, seed).
The driver's states within a key are not independent (one generation), so a key's value is
the mean over its states; nor are the keys of one item (its turns and seeds share its prompt), so
every interval is clustered by item (``eval.report.analysis.item_ci``: the cluster-robust Student-t
half-width over items, df = items - 1; with one key per item, the Student-t interval over keys):

* **mean** of a method: mean of its key values +- that 95% half-width.
* **paired difference** vs a baseline (Top-K; Rheo m=1 in the m ablation): per key, method
  minus baseline over the keys both have; mean +- that 95% half-width.
* **power** - ``keys_for_003``: the keys a half-width of 0.03 would take at the observed spread
  (of the clustered half-width: more items with the same keys each), ``keys * (half_width / 0.03) ** 2`` rounded up (at least 2; the t quantile's own shrinking
  with more keys is ignored, so this is slightly conservative).

Groups (a table each): (model, dtype, driver, head_sha, draft-quality dial, temperature); suites, plus
"pooled" over all.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eval.report.analysis import item_ci
from eval.states.labels import baseline_label, ordered_labels, rheo_m1_label, rheostat_rows, with_labels

GROUP = ["model", "dtype", "driver", "head_sha", "dial", "temperature"]
PROMPT = ["dataset", "item_id", "turn", "seed"]  # with GROUP: the key
POOLED = "pooled"
RESOLUTION = 0.03
BELOW_TOL = 1e-6  # (the LP solver's tolerance is ~1e-7) a bound below the acceptance by more: root_below


def labelled(rows: pd.DataFrame) -> pd.DataFrame:
    return rows if "label" in rows.columns else with_labels(rows)


def key_means(rows: pd.DataFrame, value: str = "expected_emitted") -> pd.DataFrame:
    """One value per (group, label, key): the mean of ``value`` over the key's states (NaN skipped)."""
    rows = labelled(rows)
    return rows.groupby(GROUP + ["label"] + PROMPT, as_index=False)[value].mean()


def keys_for(half_width: float, keys: int, target: float = RESOLUTION) -> float:
    """Keys for a 95% half-width of ``target``: keys * (half_width / target)^2, rounded up, at least 2."""
    if keys < 2 or half_width is None or math.isnan(half_width):
        return math.nan
    return max(2, math.ceil(keys * (half_width / target) ** 2 - 1e-9))


def _suites(wide: pd.DataFrame):
    """(suite, its part of the key-wide frame) for every suite, then (pooled, all)."""
    for suite in sorted(wide.index.get_level_values("dataset").unique()):
        yield suite, wide.xs(suite, level="dataset", drop_level=False)
    yield POOLED, wide


def paired_differences(rows: pd.DataFrame, baseline: str | None = None, labels=None) -> pd.DataFrame:
    """Per group, suite (and pooled) and label: keys, mean (+- half-width), and vs ``baseline`` (default
    Top-K): diff, half_width, keys_for_003 (module docstring). ``labels``: restrict to these."""
    rows = labelled(rows)
    baseline = baseline if baseline is not None else baseline_label(rows)
    per_key = key_means(rows if labels is None else rows[rows["label"].isin(set(labels) | {baseline})])
    order = {lab: i for i, lab in enumerate(ordered_labels(rows))}
    out = []
    for group, frame in per_key.groupby(GROUP):
        wide = frame.pivot_table(index=PROMPT, columns="label", values="expected_emitted")
        columns = sorted(wide.columns, key=order.get)
        for suite, part in _suites(wide):
            for label in columns:
                mean, mean_hw, n = item_ci(part[label])
                row = dict(zip(GROUP, group), suite=suite, label=label, keys=n, mean=mean, mean_hw=mean_hw,
                           diff=math.nan, half_width=math.nan, diff_keys=0, keys_for_003=math.nan)
                if baseline in wide.columns and label != baseline:
                    diff, half, pairs = item_ci((part[label] - part[baseline]).dropna())
                    row.update(diff=diff, half_width=half, diff_keys=pairs, keys_for_003=keys_for(half, pairs))
                out.append(row)
    return pd.DataFrame(out, columns=GROUP + ["suite", "label", "keys", "mean", "mean_hw", "diff", "half_width",
                                              "diff_keys", "keys_for_003"])


def m_ablation(rows: pd.DataFrame) -> pd.DataFrame:
    """Rheo m vs Rheo m=1 (paired_differences of the Rheo rows); empty without an m ablation."""
    rows = labelled(rows)
    m1 = rheo_m1_label(rows)
    if m1 is None:
        return pd.DataFrame()
    return paired_differences(rheostat_rows(rows), baseline=m1)


def _stacked(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A list column as [rows, d] floats (lists of unequal length padded with NaN; a null list is
    empty: a column an archive left out)."""
    lists = [np.asarray([] if x is None else x, dtype=float) for x in frame[column]]
    width = max((len(x) for x in lists), default=0)
    out = np.full((len(lists), width), np.nan)
    for i, x in enumerate(lists):
        out[i, :len(x)] = x
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> list[float]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.nansum(num, 0) / np.nansum(den, 0)).tolist()


def mechanism_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Pooled mechanism columns per (group, label), over every state: depth_accept (mean),
    sampled_share (mean), probe_survival (kept / drawn by depth, summed over states), calibration
    (summed draft and target probability / children per bucket); root columns: their key-level
    means +- t half-width, the gap bound - acceptance per key, and root_below: the states whose bound
    is below the acceptance (an upper bound cannot be: the two were computed on different candidates)."""
    rows = labelled(rows)
    out = []
    for keys, frame in rows.groupby(GROUP + ["label"]):
        n = np.nansum(_stacked(frame, "calib_n"), 0)
        roots = frame.assign(root_gap=frame["root_ot_bound"] - frame["root_acceptance"])
        row = {**dict(zip(GROUP + ["label"], keys)), "variant": frame["variant"].iloc[0],
               "family": frame["family"].iloc[0], "order": frame["order"].iloc[0], "states": len(frame),
               "keys": frame.groupby(PROMPT).ngroups, "expected_emitted": float(frame["expected_emitted"].mean()),
               "depth_accept": np.nanmean(_stacked(frame, "depth_accept"), 0).tolist(),
               "sampled_share": float(frame["sampled_share"].mean()),
               "probe_drawn": np.nansum(_stacked(frame, "probe_drawn"), 0).astype(int).tolist(),
               "probe_survival": _ratio(_stacked(frame, "probe_kept"), _stacked(frame, "probe_drawn")),
               "calib_draft": _ratio(_stacked(frame, "calib_q"), _stacked(frame, "calib_n")),
               "calib_target": _ratio(_stacked(frame, "calib_p"), _stacked(frame, "calib_n")),
               "calib_children": n.astype(int).tolist(), "root_states": int(frame["root_acceptance"].notna().sum()),
               "root_below": int((roots["root_gap"] < -BELOW_TOL).sum())}
        for col in ("root_acceptance", "root_ot_bound", "root_gap"):
            per_key = roots.groupby(PROMPT)[col].mean()
            row[col], row[f"{col}_hw"], row[f"{col}_keys"] = item_ci(per_key)
        out.append(row)
    table = pd.DataFrame(out)
    return table.sort_values(GROUP + ["order"]).reset_index(drop=True) if len(table) else table


def probe_share(probe_drawn: list, probe_survival: list) -> float:
    """Share of sampled children kept, pooled over depths (weighted by draws); NaN when none was drawn."""
    drawn = np.asarray(probe_drawn, dtype=float)
    kept = np.nan_to_num(np.asarray(probe_survival, dtype=float)) * drawn
    return float(kept.sum() / drawn.sum()) if drawn.sum() > 0 else math.nan
