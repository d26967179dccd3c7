"""Speed tables from result rows: where a cycle's time goes, and speed next to AR and `generate`.

* :func:`phase_table` - per model x device/dtype x tree x T x method: mean ms per cycle
  of each phase of :mod:`rheo.timing` (draft = head, build = tree build/prune/mask,
  score = target, verify, commit, other), their sum, tau and tokens/s. Rows without
  phase columns (older runs, ``profile_phases=false``) are left out.
* :func:`paired_cost_table` - the same groups, each tree method against Top-K on the same tree
  and prompts: per-phase ms per cycle minus Top-K's, and the ratios of cycle time, tau and tokens/s
  (geometric means of the per-prompt ratios), each with a 95% CI over prompts. It separates the two
  factors of a speed gain (speed ratio = tau ratio / cycle-time ratio): a method that costs more
  per cycle gains less in speed than in tau.
* :func:`speed_table` - per model x device/dtype x max_new_tokens x T: tokens/s of every method and
  tree, its speedup over its AR rows (ratio of sums; paired or shared, as the header says), its
  per-prompt speedup over Top-K's on the same tree, each marked *within noise* where its 95% CI
  covers 1, and the ``transformers`` ``generate`` reference row.
* :mod:`eval.report.agreement` - greedy outputs against AR's, by the groups of these tables.
Each returns Markdown, or None when the rows it needs are absent.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from baselines import AR
from eval.report.analysis import DEFAULT_WEIGHTS, display_name, fmt, mean_ci, speedup_ratio_of_sums, with_speedup
from eval.report.markdown import markdown_table
from rheo.methods import method_names
from rheo.timing import PHASES

PHASE_COLS = [f"phase_{p}_ms" for p in PHASES]
GROUP = ["model", "target_sha", "prompt_format", "device", "dtype", "max_new_tokens", "temperature"]
FIRST_TREE_METHOD = "topk"  # the speed tables list the references, then Top-K, then the rest by label


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
    df = _targets(df)
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


def _log_ratio_ci(ratios: pd.Series) -> str:
    """Geometric mean of per-prompt ratios with its 95% CI (a t interval on the logs)."""
    mean, half, _ = mean_ci(np.log(ratios.astype(float)))
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
        for tree, part in rows.groupby("tree", sort=True):
            base = part[part["variant"] == FIRST_TREE_METHOD].set_index(COST_KEY)
            if base.empty or not base.index.is_unique:
                continue
            for variant, other in sorted(part.groupby("variant"), key=lambda kv: _order(kv[0])):
                other = other.set_index(COST_KEY)
                if variant in (FIRST_TREE_METHOD, *method_names("reference")) or not other.index.is_unique:
                    continue
                both = other.index.intersection(base.index)
                if len(both) < 2:
                    continue
                a, b = other.loc[both], base.loc[both]
                deltas = [fmt(*mean_ci(a[c] - b[c])[:2]) for c in PHASE_COLS + ["cycle_ms"]]
                body.append([display_name(variant), tree, str(len(both))] + deltas
                            + [_log_ratio_ci(a["cycle_ms"] / b["cycle_ms"]), _log_ratio_ci(a["tau"] / b["tau"]),
                               _log_ratio_ci(a["tokens_per_s"] / b["tokens_per_s"])])
        if body:
            header = (["method", "tree", "prompts"] + [f"Δ {p} ms" for p in PHASES]
                      + ["Δ cycle ms", "cycle ratio", "τ ratio", "tok/s ratio"])
            blocks.append(f"### {_title(dict(zip(GROUP, key)))}\n\n{_devices(rows)}" + markdown_table(header, body))
    if not blocks:
        return None
    return ("## Cost per cycle next to Top-K (paired over prompts)\n\nEach tree method's rows against Top-K's "
            "rows of the same prompt (suite, item, turn, seed) on the same tree: Δ = the method's mean ms per "
            "cycle of a phase minus Top-K's, mean ± 95% CI over prompts; cycle ratio, τ ratio and tok/s "
            "ratio = geometric means of the per-prompt ratios [95% CI]. tok/s ratio = τ ratio / cycle ratio "
            "up to prefill, so a method that costs more per cycle gains less in speed than in τ. Rows timed "
            "next to another job are noisier. The CIs treat prompts as independent: a drift of the "
            "machine's speed between the times the two methods' rows ran is shared by those rows and is not "
            "in them. Rows timed item by item (`alongside`, as `make speed-cost` runs them) ran seconds apart, "
            "which leaves such a drift little time; rows of separate runs ran minutes or hours apart. The "
            "draft phase does the same work for both methods, so a Δ draft away from 0 measures that drift.\n\n"
            + "\n\n".join(blocks) + "\n")


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
            sp, sp_ci, n = mean_ci(part["speedup"])
            tau, tau_ci, _ = mean_ci(part["tau"])
            ar_tps = part["ar_new_tokens"].sum() / part["ar_wall_s"].sum()
            topk = rows[(rows["variant"] == FIRST_TREE_METHOD) & (rows["tree"] == tree)]
            body.append([display_name(variant), tree, str(n), fmt(tau, tau_ci),
                         f"{part['new_tokens'].sum() / part['wall_s'].sum():.1f}", f"{ar_tps:.1f}",
                         fmt(speedup_ratio_of_sums(part)), fmt(sp, sp_ci) + _noise(sp - 1.0, sp_ci),
                         "-" if variant == FIRST_TREE_METHOD else _vs_topk(part, topk)])
        header = ["method", "tree", "n", "τ", "tok/s", f"AR tok/s ({ar_partners(rows)})", "speedup",
                  "speedup per item", "vs Top-K, same tree"]
        blocks.append(f"### {_title(dict(zip(GROUP, key)))}\n\n{_devices(rows)}" + markdown_table(header, body))
    return ("## Speed next to AR\n\nEach method's rows over the AR rows of the same (item, turn, seed) timed "
            "next to them (`paired_baseline`); speedup = ratio of sums (Σ tokens / Σ wall over the AR's), "
            "per item = mean ± 95% CI of the per-row ratios. `transformers generate` is the library's own "
            "loop on the same target (greedy at T=0, plain sampling at T>0): its ratio says whether our AR "
            "baseline is as fast as the library's. vs Top-K = the geometric mean [95% CI] over the prompts "
            "both ran of the method's per-item speedup over Top-K's on the same tree. *within noise* (after a "
            "speedup per item or a ratio to Top-K): its 95% CI covers 1, so these rows do not tell that speed "
            "from AR's (or from Top-K's)." + ("" if set(spec["ar_partner"]) == {"paired"} else SHARED_NOTE)
            + "\n\n" + "\n\n".join(blocks) + "\n")


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
    """The per-prompt speedup of ``part`` over Top-K's on the same prompts: geometric mean [95% CI]."""
    mine, base = part.set_index(COST_KEY)["speedup"], topk.set_index(COST_KEY)["speedup"]
    both = mine.index.intersection(base.index)
    if len(both) < 2 or not (mine.index.is_unique and base.index.is_unique):
        return "-"
    logs = np.log((mine.loc[both] / base.loc[both]).astype(float))
    mean, half, _ = mean_ci(logs)
    return _log_ratio_ci(np.exp(logs)) + _noise(mean, half)
