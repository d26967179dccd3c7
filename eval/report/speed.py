"""Speed tables from result rows: where a cycle's time goes, and speed next to AR and `generate`.

* :func:`phase_table` - per model x device/dtype x tree x T x method: mean ms per cycle
  of each phase of :mod:`rheo.timing` (draft = head, build = tree build/prune/mask,
  score = target, verify, commit, other), their sum, tau and tokens/s. Rows without
  phase columns (older runs, ``profile_phases=false``) are left out.
* :func:`paired_cost_table` - the same groups, each tree method against Top-K on the same tree
  and engine and prompts: per-phase ms per cycle minus Top-K's, and the ratios of cycle time, tau and
  tokens/s (geometric means of the per-prompt ratios), each with a 95% CI clustered by item (timings: only
  between rows of one job; rows of separate jobs are labelled so, with no interval). It separates the two
  factors of a speed gain (speed ratio = tau ratio / cycle-time ratio): a method that costs more
  per cycle gains less in speed than in tau.
* :func:`speed_table` - per model x device/dtype x max_new_tokens x T: tokens/s of every method and
  tree, its speedup over its AR rows (ratio of sums; paired or shared, as the header says), its
  per-prompt speed ratio to Top-K's on the same tree and engine, each marked *within noise* where its
  95% CI covers 1, and the ``transformers`` ``generate`` reference row. An interval is given only to a
  comparison of rows timed in one job (``run_id``); one of separate jobs says "separate jobs".
* :func:`noise_floor` - the sentence every speed table states: ``make speed-check``'s A/A ratio.
* :mod:`eval.report.agreement` - greedy outputs against AR's, by the groups of these tables.
Each returns Markdown, or None when the rows it needs are absent.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from baselines import AR
from eval.report.analysis import (CI_UNIT, DEFAULT_WEIGHTS, EAGER, SEPARATE, cluster_ci, display_name, fmt, fmt_interval,
                                  item_ci, item_clusters, same_job, speedup_interval, speedup_ratio_of_sums,
                                  with_engine_column, with_speedup)
from eval.report.markdown import markdown_table, section
from rheo.methods import method_names
from rheo.paths import output, own_or_committed
from rheo.timing import PHASES

PHASE_COLS = [f"phase_{p}_ms" for p in PHASES]
GROUP = ["model", "target_sha", "prompt_format", "device", "dtype", "max_new_tokens", "temperature"]
FIRST_TREE_METHOD = "topk"  # the speed tables list the references, then Top-K, then the rest by label
#: the A/A check's summary (scripts/speed_check.py, ``make speed-check``), under the output root
NOISE_FLOOR = ("tables", "speed_check", "speed_check.json")


def noise_floor() -> str:
    """The sentence every speed table states: the ratio of Top-K against an exact copy of itself, timed side
    by side (``make speed-check``; this machine's, else the committed one), or that it was not measured."""
    import json

    path = own_or_committed(output(*NOISE_FLOOR), "the speed tables' noise floor")
    if not path.is_file():
        return ("Noise floor: not measured (`make speed-check` times Top-K against an exact copy of itself, side "
                "by side; its ratio's interval is the smallest speed difference these tables can tell).")
    got = json.loads(path.read_text())
    return (f"Noise floor (`make speed-check`: Top-K against an exact copy of itself, side by side, same tokens; "
            f"{got['device_name']}, {got['num_threads']} thread(s), {got['date']}): tok/s ratio "
            f"{fmt_interval(got['ratio'], got['low'], got['high'], 3)} over {got['items']} items (95% CI, cluster "
            f"bootstrap over items); a speed ratio inside that band is not told from noise.")


def base_variant(engine: str) -> str:
    """The label of Top-K's rows on ``engine`` (analysis.variant_label): the rows an engine's methods are
    compared with."""
    return FIRST_TREE_METHOD if engine == EAGER else f"{FIRST_TREE_METHOD} engine={engine}"


def tree_label(row) -> str:
    if row["k"] is None or pd.isna(row["k"]):
        return "-"
    top = "" if pd.isna(row["sparse_top"]) else f" top-{int(row['sparse_top'])}"
    return f"K={int(row['k'])} d={int(row['depth'])} R={int(row['tree_size'])}{top}"


def _order(variant: str) -> tuple:
    refs = method_names("reference")
    if variant in refs:
        return (refs.index(variant), variant)
    return (len(refs) + (variant != FIRST_TREE_METHOD), variant)


def _title(key: dict) -> str:
    target = "" if key["target_sha"] == DEFAULT_WEIGHTS else f" (target {key['target_sha']})"
    fmt_ = "" if key.get("prompt_format", DEFAULT_WEIGHTS) == DEFAULT_WEIGHTS else f" ({key['prompt_format']})"
    return (f"{key['model']}{target}{fmt_}, {key['device']}/{key['dtype']}, max_new_tokens={key['max_new_tokens']}, "
            f"T={key['temperature']:g}")


def _devices(rows: pd.DataFrame) -> str:
    """'hardware: <CPU/GPU>; threads: <torch intra-op threads>' of the rows; 'threads: not recorded' where no
    row holds them (rows written before the column, or by a writer that left it empty)."""
    names = sorted(n for n in rows.get("device_name", pd.Series(dtype=str)).dropna().unique())
    threads = sorted({int(t) for t in rows.get("num_threads", pd.Series(dtype=float)).dropna()})
    told = f"threads: {', '.join(map(str, threads))}" if threads else "threads: not recorded"
    return (f"hardware: {'; '.join(names)}; " if names else "") + told + "\n\n"


def _targets(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``target_sha`` and ``prompt_format`` cells filled (rows written before the columns: the
    default weights and format)."""
    filled = {}
    for col in ("target_sha", "prompt_format"):
        cells = df[col] if col in df.columns else pd.Series(None, index=df.index, dtype=object)
        filled[col] = cells.fillna(DEFAULT_WEIGHTS).astype(str)
    return df.assign(**filled)


def _timed(df: pd.DataFrame) -> Optional[pd.DataFrame]:
    """The rows that carry phase timings, with their ``tree`` label; None when there are none."""
    if df.empty or "phase_score_ms" not in df:
        return None
    df = with_engine_column(_targets(df))
    timed = df[df["phase_score_ms"].notna()].copy()
    if timed.empty:
        return None
    timed["tree"] = [tree_label(r) for _, r in timed.iterrows()]
    return timed


def phase_table(df: pd.DataFrame) -> Optional[str]:
    """Mean ms per cycle per phase (rows that carry phase timings only)."""
    timed = _timed(df)
    if timed is None:
        return None
    blocks = []
    for key, rows in timed.groupby(GROUP, sort=True):
        body = []
        for (variant, tree), part in sorted(rows.groupby(["variant", "tree"]), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
            # weight each row by its cycles: the mean over all cycles of the group
            w = part["target_calls"].astype(float)
            means = {c: float((part[c].fillna(0.0) * w).sum() / w.sum()) for c in PHASE_COLS}
            cycle = sum(means.values())
            tau = part["new_tokens"].sum() / part["target_calls"].sum()
            tps = part["new_tokens"].sum() / part["wall_s"].sum()
            body.append([display_name(variant), tree, str(len(part))]
                        + ["in build" if c == "phase_draft_ms" and part[c].isna().all() else f"{means[c]:.2f}"
                           for c in PHASE_COLS]
                        + [f"{cycle:.2f}", f"{tau:.2f}", f"{tps:.1f}"]
                        + [f"{100 * means['phase_score_ms'] / cycle:.0f}%" if cycle > 0 else "-"])
        header = ["method", "tree", "rows"] + [f"{p} ms" for p in PHASES] + ["cycle ms", "τ", "tok/s", "target share"]
        blocks.append(f"### {_title(dict(zip(GROUP, key)))}\n\n{_devices(rows)}" + markdown_table(header, body))
    return ("## Where the time goes (mean ms per cycle)\n\ndraft = the head's tree layers; build = candidate "
            "selection, tree growth, pruning and mask; score = the target's forward over the tree (decoder + output rows of the first-ranked chain); verify (+ output rows of other visited nodes); "
            "commit = target KV compaction + the head's pass over the accepted tokens; other = the rest of "
            "the cycle. Means over all cycles of the rows (weighted by cycles); AR rows: one cycle per "
            "token. CUDA: CUDA events; CPU: perf_counter (rheo/timing.py).\n\n" + "\n\n".join(blocks) + "\n")


COST_KEY = ["dataset", "item_id", "turn", "seed"]  # with GROUP and the tree: one prompt


def _log_ratio_ci(ratios: pd.Series, interval: bool = True) -> str:
    """Geometric mean of per-prompt ratios (indexed by prompt: COST_KEY) with its 95% CI clustered by item
    (a cluster-robust t interval on the logs); ``interval`` False: the mean alone, said to be of separate
    jobs."""
    mean, half, _ = cluster_ci(np.log(ratios.to_numpy(dtype=float)), item_clusters(ratios.to_frame()))
    if not interval:
        return fmt(math.exp(mean), digits=3) + SEPARATE
    if math.isnan(half):
        return fmt(math.exp(mean), digits=3)
    return f"{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"


def paired_cost_table(df: pd.DataFrame) -> Optional[str]:
    """Each tree method minus Top-K on the same tree and prompts: ms per cycle by phase, ratios."""
    timed = _timed(df)
    if timed is None:
        return None
    timed["cycle_ms"] = timed[PHASE_COLS].fillna(0.0).sum(axis=1)
    blocks = []
    for key, rows in timed.groupby(GROUP, sort=True):
        body = []
        for (tree, engine), part in rows.groupby(["tree", "engine"], sort=True):
            base = part[part["variant"] == base_variant(engine)].set_index(COST_KEY)
            if base.empty or not base.index.is_unique:
                continue
            for variant, other in sorted(part.groupby("variant"), key=lambda kv: _order(kv[0])):
                other = other.set_index(COST_KEY)
                if variant in (base_variant(engine), *method_names("reference")) or not other.index.is_unique:
                    continue
                both = other.index.intersection(base.index)
                if len(both) < 2:
                    continue
                a, b = other.loc[both], base.loc[both]
                one = same_job(a["run_id"] if "run_id" in a else [], b["run_id"] if "run_id" in b else [])
                deltas = [_delta(a[c] - b[c], one) for c in PHASE_COLS + ["cycle_ms"]]
                body.append([display_name(variant), tree, str(len(both))] + deltas
                            + [_log_ratio_ci(a["cycle_ms"] / b["cycle_ms"], one), _log_ratio_ci(a["tau"] / b["tau"]),
                               _log_ratio_ci(a["tokens_per_s"] / b["tokens_per_s"], one)])
        if body:
            header = (["method", "tree", "prompts"] + [f"Δ {p} ms" for p in PHASES]
                      + ["Δ cycle ms", "cycle ratio", "τ ratio", "tok/s ratio"])
            blocks.append(f"### {_title(dict(zip(GROUP, key)))}\n\n{_devices(rows)}" + markdown_table(header, body))
    return section("Cost per cycle next to Top-K (paired over prompts)",
                   "Each tree method's rows against Top-K's rows of the same prompt (suite, item, turn, seed) on "
                   "the same tree and engine: Δ = the method's mean ms per cycle of a phase minus Top-K's, mean ± "
                   f"{CI_UNIT}; cycle ratio, τ ratio and tok/s ratio = geometric means of the per-prompt ratios "
                   "[95% CI clustered by item]. tok/s ratio = τ ratio / cycle ratio up to prefill, so a method that "
                   "costs more per cycle gains less in speed than in τ. Timings get an interval only where both "
                   "methods' rows were timed in one job, item by item (`alongside`; one `run_id`): rows of separate "
                   "jobs ran minutes or hours apart, and a drift of the machine's speed between them is in neither "
                   "interval, so their comparison says \"separate jobs\" and claims no interval (rows older than the "
                   "`run_id` column count as separate). The draft phase does the same work for both methods, so a "
                   "Δ draft away from 0 measures such a drift. " + noise_floor(), blocks)


def _delta(diffs: pd.Series, one_job: bool) -> str:
    """A mean timing difference over prompts (indexed by COST_KEY): ± its CI clustered by item for rows of one
    job; the mean alone, said to be of separate jobs, otherwise."""
    mean, half, _ = cluster_ci(diffs.to_numpy(dtype=float), item_clusters(diffs.to_frame()))
    return fmt(mean, half) if one_job else fmt(mean) + SEPARATE


def speed_table(df: pd.DataFrame) -> Optional[str]:
    """tokens/s and speedup over the AR rows timed next to each config, with the generate reference."""
    if df.empty or not (df["method"] == AR.name).any():
        return None
    spec = with_speedup(df)
    spec = spec[spec["ar_wall_s"].notna() & spec["wall_s"].notna()]  # no wall time: a compile was timed (analysis)
    if spec.empty:
        return None
    spec = _targets(spec)
    spec["tree"] = [tree_label(r) for _, r in spec.iterrows()]
    blocks = []
    for key, rows in spec.groupby(GROUP, sort=True):
        body = []
        for (variant, tree), part in sorted(rows.groupby(["variant", "tree"]), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
            sp, sp_ci, n = item_ci(part, "speedup")
            tau, tau_ci, _ = item_ci(part, "tau")
            ar_tps = part["ar_new_tokens"].sum() / part["ar_wall_s"].sum()
            engine = part["engine"].iloc[0]
            topk = rows[(rows["variant"] == base_variant(engine)) & (rows["tree"] == tree)]
            with_ar = bool(part["ar_same_job"].fillna(False).astype(bool).all())
            ratio = speedup_ratio_of_sums(part)
            body.append([display_name(variant), tree, str(n), fmt(tau, tau_ci),
                         f"{part['new_tokens'].sum() / part['wall_s'].sum():.1f}", f"{ar_tps:.1f}",
                         fmt_interval(ratio, *speedup_interval(part)) if with_ar else fmt(ratio) + SEPARATE,
                         fmt(sp, sp_ci) + _noise(sp - 1.0, sp_ci) if with_ar else fmt(sp) + SEPARATE,
                         "-" if variant == base_variant(engine) else _vs_topk(part, topk)])
        header = ["method", "tree", "n", "τ", "tok/s", f"AR tok/s ({ar_partners(rows)})", "speedup",
                  "speedup per item", "vs Top-K, same tree and engine"]
        blocks.append(f"### {_title(dict(zip(GROUP, key)))}\n\n{_devices(rows)}" + markdown_table(header, body))
    return section("Speed next to AR",
                   "Each method's rows over the AR rows of the same (item, turn, seed) timed next to them "
                   "(`paired_baseline`, `alongside`); speedup = ratio of sums (Σ tokens / Σ wall over the AR's) "
                   "[95% CI, cluster bootstrap over items], per item = mean ± 95% CI of the per-row ratios, clustered "
                   "by item (an item's turns and seeds are one unit). `transformers generate` is the library's own "
                   "loop on the same target (greedy at T=0, plain sampling at T>0): its ratio says whether our AR "
                   "baseline is as fast as the library's. vs Top-K = over the prompts both ran on the same tree and "
                   "engine, the geometric mean [95% CI clustered by item] of the method's tok/s over Top-K's, where "
                   "both were timed in one job, item by item (one `run_id`: `alongside`, as experiment=speed runs "
                   "them); rows of separate jobs (or older than the `run_id` column) give the geometric mean of the "
                   "per-item speedups' ratio, labelled \"separate jobs\", with no interval: a drift of the machine "
                   "between the jobs is in neither. A speedup over AR rows of another job is labelled likewise. "
                   "*within noise* (after a speedup per item or a ratio to Top-K): its 95% CI covers 1, so these "
                   "rows do not tell that speed from AR's (or from Top-K's)."
                   + ("" if set(spec["ar_partner"]) == {"paired"} else SHARED_NOTE) + " " + noise_floor(), blocks)


SHARED_NOTE = (" \"AR tok/s (shared)\": rows run with `paired_baseline=false`: one AR row per prompt, shared "
               "by every method of the run, timed next to none of them in particular.")  # else the table's note


def ar_partners(rows: pd.DataFrame) -> str:
    """How a block's AR rows pair (add_speedup's ar_partner): 'paired', 'shared' or 'paired and shared'."""
    kinds = set(rows["ar_partner"].dropna())
    return " and ".join(k for k in ("paired", "shared") if k in kinds) or "none"


def _noise(diff: float, half: float) -> str:
    """' (within noise)' when a difference's 95% CI covers 0, else ''."""
    return " (within noise)" if not math.isnan(half) and abs(diff) <= half else ""


def _vs_topk(part: pd.DataFrame, topk: pd.DataFrame) -> str:
    """``part``'s speed over Top-K's on the same prompts: rows of one job, the per-prompt tok/s ratio, geometric
    mean [95% CI clustered by item]; rows of separate jobs, the per-prompt speedups' ratio, without interval."""
    mine, base = part.set_index(COST_KEY), topk.set_index(COST_KEY)
    both = mine.index.intersection(base.index)
    if len(both) < 2 or not (mine.index.is_unique and base.index.is_unique):
        return "-"
    mine, base = mine.loc[both], base.loc[both]
    if not same_job(mine["run_id"], base["run_id"]):
        return _log_ratio_ci(mine["speedup"] / base["speedup"], interval=False)
    ratios = (mine["tokens_per_s"] / base["tokens_per_s"]).astype(float)
    mean, half, _ = cluster_ci(np.log(ratios.to_numpy()), item_clusters(ratios.to_frame()))
    return _log_ratio_ci(ratios) + _noise(mean, half)
