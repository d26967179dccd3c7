"""Aggregations of the result rows: tau, speedup, confidence intervals, paired differences.

Everything here is a function of the rows that eval/store/storage.py loads; nothing
is stored twice. Terms:

* **variant** - the label a row's method registers (rheo.methods): 'ar', "topk",
  "rheo m=<m>" (lossy ablations say so; a preset's settings are its name: "rheo_auto"),
  "static rsd (4,2,1)", "chain d=8".
* **setting** - what must match for two variants to be compared: model,
  device, dtype, tree shape, max_new_tokens (and temperature, where a table
  does not vary it).
* **speedup** - a method row's tokens/s over the tokens/s of the AR row of the
  same (model, device, dtype, suite, item, turn, temperature, seed,
  max_new_tokens). Per item (``speedup``), and as a ratio of sums per group:
  (sum new tokens / sum wall) / (sum AR new tokens / sum AR wall).
* **CI** - mean +- half-width of the 95% interval of a group's mean, clustered by item
  (:func:`item_ci`): the rows of a group (items x turns x seeds) are not independent, an item's
  turns and seeds share its prompt, so the independent unit is the item. The half-width is the
  cluster-robust Student-t one over items (:func:`cluster_ci`); a ratio of sums (the speedup) gets
  a cluster bootstrap over items (:func:`speedup_interval`). :data:`CI_UNIT` names it in captions.

:func:`load` is the one entry point of tables, figures and the notebook: a tidy frame, one
row per stored ok row, with ``variant``, ``speedup`` (and its AR partner's numbers) as
columns, integer columns as pandas nullable integers (``Int64``). Every column, its unit
and how it is computed: docs/results-columns.md.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from baselines import AR
from eval.report.intervals import (  # noqa: F401 (the analysis API: tables, figures and the notebook import them here)
    BOOTSTRAP_DRAWS, CI_UNIT, ITEM, MIN_CI_N, SEPARATE, TOO_FEW, Z95, NoInterval, _none_for_na, cluster_bootstrap,
    cluster_ci, fmt, fmt_interval, fmt_speedup, item_ci, item_clusters, item_means, mean_ci, normal_half_width, same_job,
    speedup_interval, t95)
from eval.report.timed_rows import TIMING_COLUMNS, without_compile_times  # noqa: F401 (the analysis API)
from eval.store.storage import ROW_SCHEMA, load_results
from rheo.config import SpecConfig
from rheo.methods import find_method, get_method, method_of_variant
from rheo.methods.topk import DYNAMIC_FIELDS

log = logging.getLogger(__name__)

PAIR_KEY = ["model", "target_path", "target_sha", "prompt_format", "device", "dtype", "dataset", "item_id", "turn", "temperature", "seed",
            "max_new_tokens", "engine", "protocol"]  # engine, protocol: rows of two engines or prompt protocols never pair
#: the engine of rows without one (rheo.engine: the reference; rows older than the column)
EAGER = "eager"
TREE = list(DYNAMIC_FIELDS)  # the tree shape every dynamic method reads (rheo.methods)
SETTING = ["model", "target_path", "target_sha", "prompt_format", "head_path", "device", "dtype", "max_new_tokens"] + TREE
DEFAULT_WEIGHTS = "default"
SUITE_ORDER = ["mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq"]

#: columns stored as integers (None where unused: AR rows have no m, k, depth, ...): read as Int64
INT_COLUMNS = tuple(f.name for f in ROW_SCHEMA if pa.types.is_integer(f.type))
#: columns load() adds to the stored ones (docs/results-columns.md)
DERIVED_COLUMNS = ("variant", "ar_partner", "ar_new_tokens", "ar_wall_s", "speedup", "ar_same_job")


def load(root) -> pd.DataFrame:
    """The tidy frame of the status-ok rows under ``root`` (a results directory or archive):
    stored columns, integers as Int64, plus ``variant`` and the speedup columns of
    :func:`add_speedup` (empty frame if no rows)."""
    df = load_results(root)
    corrupt = df.attrs.get("corrupt_shards", [])
    df = add_speedup(add_variant(without_compile_times(df)))
    df.attrs["corrupt_shards"] = corrupt
    return df


def add_variant(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in INT_COLUMNS:
        if col in df.columns:
            df[col] = df[col].astype("Int64")
    for col in ["target_path", "head_path", "target_sha", "prompt_format"]:  # None = the model's own; a string keys
        df[col] = (df[col] if col in df.columns else pd.Series(None, index=df.index, dtype=object)
                   ).fillna(DEFAULT_WEIGHTS).astype(str)
    df = with_engine_column(df)
    df["variant"] = [variant_label(r) for r in df.itertuples()] if len(df) else pd.Series(dtype=str)
    return df


def with_engine_column(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``engine`` (None: "eager") and ``protocol`` (None: "template") filled: rows of two never pair."""
    df["engine"] = (df["engine"] if "engine" in df.columns else pd.Series(None, index=df.index, dtype=object)
                    ).fillna(EAGER).astype(str)
    df["protocol"] = df.get("protocol", pd.Series(None, index=df.index, dtype=object)).fillna("template").astype(str)
    return df


def variant_label(row) -> str:
    """The row's method's label (rheo.methods): 'ar', 'hf_generate' (the references), 'topk',
    'rheo m=1', 'static rsd (4,2,1)', ...; a row of another engine than "eager" says which
    ('rheo m=1 engine=graphs'), so that it is never grouped with the eager rows."""
    engine, protocol = getattr(row, "engine", None), getattr(row, "protocol", None)  # and a protocol not template
    method = find_method(row.method)  # a method this process does not know (a plug-in): its raw name
    label = method.variant(row) if method is not None else str(row.method)
    label += "" if engine in (None, EAGER) or engine != engine else f" engine={engine}"
    return label + ("" if protocol in (None, "template") or protocol != protocol else f" protocol={protocol}")


def variant_of(method: str, **fields) -> str:
    """The label of ``method`` with ``fields`` as its rows get it: ``variant_of("rheo", m=1)`` is
    'rheo m=1' (tables and figures name variants through the registry, never by hand)."""
    return get_method(method).variant(SpecConfig.for_method(method=method, **fields))


def add_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """Every row, plus its AR partner's numbers (``ar_new_tokens``, ``ar_wall_s``), ``ar_partner``
    and ``speedup`` = tokens_per_s / (ar_new_tokens / ar_wall_s), and ``ar_same_job``: whether that AR row
    was timed in the row's own job (one ``run_id``; a paired AR row of rows older than the column: assumed,
    ``paired_baseline`` times it next to its config).

    The partner of a non-AR row is the AR row timed next to its config (``paired_with`` == its
    config_hash; ar_partner "paired") when there is one, else the paired AR row of its own job (an
    ``alongside`` method's: the AR row timed next to the run's method, in the same ``run_id``; "paired"),
    else the shared AR row of the same key ("shared"). Rows without a partner (tau experiments run with baseline=false) and AR rows
    themselves keep NaN (tau is still usable).
    """
    df = with_engine_column(df.drop(columns=[c for c in DERIVED_COLUMNS[1:] if c in df.columns]))
    for col in ("target_path", "target_sha", "prompt_format"):  # rows written before the column: the defaults
        df[col] = (df[col] if col in df.columns else pd.Series(None, index=df.index, dtype=object)
                   ).fillna(DEFAULT_WEIGHTS).astype(str)
    if "run_id" not in df.columns:  # an archive written before the column
        df["run_id"] = None
    cols = PAIR_KEY + ["new_tokens", "wall_s", "run_id"]
    ar = df[df["method"] == AR.name].rename(columns={"new_tokens": "ar_new_tokens", "wall_s": "ar_wall_s",
                                                     "run_id": "ar_run_id"})
    ar_cols = [c if c not in ("new_tokens", "wall_s", "run_id") else f"ar_{c}" for c in cols]
    shared = ar[ar["paired_with"].isna()][ar_cols]
    paired = ar[ar["paired_with"].notna()][ar_cols + ["paired_with"]].rename(columns={"paired_with": "config_hash"})
    is_spec = (df["method"] != AR.name).to_numpy()
    spec = df[is_spec]
    # (left merges keep the order and number of spec's rows)
    own = spec.merge(paired, on=PAIR_KEY + ["config_hash"], how="left", validate="many_to_one")
    # else the AR row of the row's own job (one run_id), paired with the run's method: an alongside method's
    in_job = paired[paired["ar_run_id"].notna()].drop(columns="config_hash").assign(run_id=lambda f: f["ar_run_id"])
    in_job = in_job.drop_duplicates(PAIR_KEY + ["run_id"], keep=False)  # a job of several AR configs: none is its
    in_job = spec.merge(in_job, on=PAIR_KEY + ["run_id"], how="left", validate="many_to_one")
    fallback = spec.merge(shared, on=PAIR_KEY, how="left", validate="many_to_one")
    partner = pd.Series(None, index=own.index, dtype=object)
    partner[fallback["ar_wall_s"].notna()] = "shared"
    partner[(own["ar_wall_s"].notna() | in_job["ar_wall_s"].notna()).to_numpy()] = "paired"
    df["ar_partner"] = pd.Series(None, index=df.index, dtype=object)
    df.loc[is_spec, "ar_partner"] = partner.to_numpy()
    chosen = own[["ar_new_tokens", "ar_wall_s", "ar_run_id"]]
    for other in (in_job, fallback):
        chosen = chosen.where(chosen["ar_wall_s"].notna(), other[["ar_new_tokens", "ar_wall_s", "ar_run_id"]])
    for col in ("ar_new_tokens", "ar_wall_s"):
        df[col] = math.nan
        df.loc[is_spec, col] = chosen[col].astype(float).to_numpy()
    same = [(r is not None and r == a) or (r is None and p == "paired")
            for r, a, p in zip(_none_for_na(spec["run_id"]), _none_for_na(chosen["ar_run_id"]), partner.to_numpy())]
    df["ar_same_job"] = pd.Series(None, index=df.index, dtype=object)
    df.loc[is_spec, "ar_same_job"] = np.asarray(same, dtype=object)
    df["speedup"] = df["tokens_per_s"].astype(float) / (df["ar_new_tokens"] / df["ar_wall_s"])
    _drop_unusable_speedups(df)
    return df


def with_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """The non-AR rows of :func:`add_speedup` (of ``df`` as it is when it has a speedup column)."""
    full = df if "speedup" in df.columns else add_speedup(df)
    return full[full["method"] != AR.name].reset_index(drop=True)


def _drop_unusable_speedups(out: pd.DataFrame) -> None:
    """A row with an AR partner but no finite, positive speedup (a wall time of 0 or none, its own
    or its AR row's) gets NaN, and is reported: it is left out of every speedup, not read as 0 or inf."""
    sp = pd.to_numeric(out["speedup"], errors="coerce")
    bad = out["ar_wall_s"].notna() & ~(sp.apply(math.isfinite) & (sp > 0) & (out["ar_wall_s"] > 0))
    if bad.any():
        out.loc[bad, "speedup"] = math.nan
        first = out[bad].iloc[0]
        log.warning("%d row(s) have no usable tokens/s (wall time 0 or missing, theirs or their AR row's) and are "
                    "left out of the speedups (tau still counts), e.g. config %s %s item %s turn %s; rerun them "
                    "after deleting their shards", int(bad.sum()), first["config_hash"], first["dataset"],
                    first["item_id"], first["turn"])


def speedup_ratio_of_sums(rows: pd.DataFrame) -> float:
    rows = rows.dropna(subset=["ar_wall_s", "wall_s"])
    if rows.empty:
        return math.nan
    return (rows["new_tokens"].sum() / rows["wall_s"].sum()) / (rows["ar_new_tokens"].sum() / rows["ar_wall_s"].sum())


def paired(df: pd.DataFrame, a: str, b: str, value: str = "tau") -> pd.DataFrame:
    """Rows of variants a and b matched on PAIR_KEY: columns value_a, value_b, diff (b - a)."""
    left = df[df["variant"] == a][PAIR_KEY + [value]]
    right = df[df["variant"] == b][PAIR_KEY + [value]]
    for name, side in ((a, left), (b, right)):
        _one_row_per_prompt(df.loc[side.index], name)
    both = left.merge(right, on=PAIR_KEY, suffixes=("_a", "_b"), validate="one_to_one")
    both["diff"] = both[f"{value}_b"] - both[f"{value}_a"]
    return both


def _one_row_per_prompt(rows: pd.DataFrame, variant: str) -> None:
    """Refuse, in one line, rows of one variant that share a prompt (PAIR_KEY) but come from several
    configurations the tables cannot tell apart: e.g. rows stored before the ``prompt_format`` column of one
    model name run with two chat formats or eos tokens (keyed apart; newer rows are tabled apart by it)."""
    twice = rows[rows.duplicated(PAIR_KEY, keep=False)]
    if twice.empty:
        return
    hashes = sorted(set(twice["config_hash"].astype(str))) if "config_hash" in twice.columns else []
    first = twice.iloc[0]
    raise ValueError(f"{variant}: {len(twice)} rows share their prompt and setting (e.g. model {first['model']!r} "
                     f"{first['dataset']} item {first['item_id']} turn {first['turn']}) but come from configs "
                     f"{hashes}: one model name run with two chat formats or eos token sets (rows older than the "
                     f"prompt_format column)? Give each its own model.name, or table their folders apart")


def settings(df: pd.DataFrame, extra: Sequence[str] = ()) -> list[tuple[dict, pd.DataFrame]]:
    """Split non-AR rows by setting (+ extra columns); AR rows are matched by with_speedup."""
    keys = SETTING + list(extra)
    spec = with_speedup(df)
    if spec.empty:
        return []
    groups = spec.groupby(keys, dropna=False, sort=True)
    return [(dict(zip(keys, k)), g) for k, g in groups]


def setting_title(setting: dict) -> str:
    tree = f"K={setting['k']} depth={setting['depth']} R={setting['tree_size']} top-{setting['sparse_top']}"
    parts = [str(setting["model"]), f"{setting['device']}/{setting['dtype']}", tree,
             f"max_new_tokens={setting['max_new_tokens']}"]
    for weights in ("target_path", "target_sha", "head_path"):  # only when not the model's default weights
        if setting.get(weights, DEFAULT_WEIGHTS) != DEFAULT_WEIGHTS:
            parts.append(f"{weights}={setting[weights]}")
    if setting.get("prompt_format", DEFAULT_WEIGHTS) != DEFAULT_WEIGHTS:  # 'chat_format=vicuna_v1.1': as it is
        parts.append(str(setting["prompt_format"]))
    if "temperature" in setting:
        parts.append(f"T={setting['temperature']:g}")
    return ", ".join(parts)


def suites_in(df: pd.DataFrame) -> list[str]:
    present = set(df["dataset"])
    return [s for s in SUITE_ORDER if s in present] + sorted(present - set(SUITE_ORDER))


def variant_summary(rows: pd.DataFrame) -> dict:
    """tau mean/CI, per-item speedup mean/CI and ratio-of-sums speedup (with its cluster-bootstrap interval
    ``speedup_low``, ``speedup_high`` where every row's AR partner ran in its own job: ``ar_same_job``) of one
    variant's rows; every interval clustered by item."""
    tau, tau_ci, n = item_ci(rows, "tau")
    sp, sp_ci, _ = item_ci(rows, "speedup")
    one_job = "ar_same_job" in rows and bool(rows.dropna(subset=["ar_wall_s"])["ar_same_job"].fillna(False).astype(bool).all())
    low, high = speedup_interval(rows) if one_job else (math.nan, math.nan)
    return {"n": n, "tau": tau, "tau_ci": tau_ci, "speedup_item": sp, "speedup_item_ci": sp_ci,
            "speedup": speedup_ratio_of_sums(rows), "speedup_low": low, "speedup_high": high, "ar_same_job": one_job,
            "seeds": rows["seed"].nunique(), "items": len(set(item_clusters(rows)))}


def restrict_to_common(df: pd.DataFrame, variants: Sequence[str]) -> pd.DataFrame:
    """Rows of ``variants`` whose PAIR_KEY is present for every one of them (a fair comparison)."""
    sub = df[df["variant"].isin(variants)]
    counts = sub.groupby(PAIR_KEY, dropna=False)["variant"].nunique()
    common = counts[counts == len(variants)].reset_index()[PAIR_KEY]
    return sub.merge(common, on=PAIR_KEY)


def display_name(variant: str) -> str:
    """'topk' -> 'Top-K', 'rheo m=1' -> 'Rheo m=1' (tables and figures; the method's registered display)."""
    method = method_of_variant(variant)
    return method.display_variant(variant) if method is not None else variant


def one_job(rows: pd.DataFrame, a: str, b: str) -> bool:
    """Whether the rows of variants ``a`` and ``b`` of every prompt (PAIR_KEY) both ran were timed in one job."""
    if "run_id" not in rows:
        return False
    side = [rows[rows["variant"] == v][PAIR_KEY + ["run_id"]] for v in (a, b)]
    both = side[0].merge(side[1], on=PAIR_KEY, suffixes=("_a", "_b"))
    return same_job(both["run_id_a"], both["run_id_b"])
