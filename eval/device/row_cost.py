"""Launches next to measured speed: the ops, host syncs and predicted GPU speedup of the configurations
of a speed study's rows, beside the CPU speedup those rows measured.

For every configuration of the rows (its ``config_hash``: method, tree, options, temperature), one
generation on a fixed random prompt of the pair at hand is counted as in :mod:`eval.device.cycle_cost`
(ops and syncs per target call, prefill excluded, after a short uncounted run of the same
configuration; AR counted at each temperature). The predicted GPU
speedup of a configuration is ``tau x AR ops per call / its ops per call`` with the rows' measured tau:
the speedup on a device where every dispatched op costs the same launch time (eager PyTorch on a GPU
at batch 1, :data:`~eval.device.cycle_cost.US_PER_OP`). The CPU speedup per item is the speed table's
(each row over the AR row timed next to it).
"""

from __future__ import annotations

from typing import Optional

import pandas as pd
import torch

from baselines import AR
from eval.device.cycle_cost import count_run
from eval.device.cycle_shapes import CostPair
from eval.report.analysis import display_name, fmt, item_ci, with_speedup
from eval.report.markdown import markdown_table
from eval.report.speed import _order, tree_label
from eval.measure.expected_replay import row_spec


def configs_of(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per tree configuration (``config_hash``) of the rows."""
    spec = rows[rows["k"].notna()].drop_duplicates("config_hash")
    return spec.sort_values(["temperature", "method", "config_hash"]).reset_index(drop=True)


def count_configs(pair: CostPair, configs: pd.DataFrame, new_tokens: int = 24, prompt_len: int = 64,
                  progress=None) -> pd.DataFrame:
    """configs: :func:`configs_of` -> config_hash, method, temperature, ops, syncs (per target call),
    target_calls; plus one ``AR`` row per temperature (config_hash ``AR@T``)."""
    prompt = torch.randint(10, max(11, pair.vocab_size // 4), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    jobs = [(f"AR@{t:g}", AR.name, float(t), None) for t in sorted(configs["temperature"].unique())]
    jobs += [(r["config_hash"], r["method"], float(r["temperature"]), row_spec(r)) for _, r in configs.iterrows()]
    out = []
    for key, method, temperature, spec in jobs:
        count_run(pair, spec, temperature, prompt, 2)  # warm: tables made once per process are not counted
        ops, syncs, calls, _ = count_run(pair, spec, temperature, prompt, new_tokens)
        out.append({"config_hash": key, "method": method, "temperature": temperature, "target_calls": calls,
                    "ops": sum(ops.values()) / calls, "syncs": sum(syncs.values()) / calls})
        if progress is not None:
            progress(out[-1])
    return pd.DataFrame(out)


def launch_frame(rows: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """One row per measured tree configuration: tau and CPU speedup per item (mean, half-width, n)
    from ``rows`` (with ``variant``), ops and syncs per call from ``counts``, the predicted GPU speedup."""
    spec = with_speedup(rows)
    spec = spec[spec["k"].notna()]
    by_hash = counts.set_index("config_hash")
    out = []
    for (variant, config, t), part in spec.groupby(["variant", "config_hash", "temperature"]):
        if config not in by_hash.index or f"AR@{t:g}" not in by_hash.index:
            continue
        tau, tau_hw, n = item_ci(part, "tau")
        sp, sp_hw, _ = item_ci(part, "speedup")
        ar = by_hash.loc[f"AR@{t:g}"]
        cost = by_hash.loc[config]
        out.append({"variant": variant, "tree": tree_label(part.iloc[0]), "temperature": float(t), "n": n,
                    "tau": tau, "tau_hw": tau_hw, "cpu_speedup": sp, "cpu_speedup_hw": sp_hw,
                    "ops": cost["ops"], "syncs": cost["syncs"], "ar_ops": ar["ops"], "ar_syncs": ar["syncs"],
                    "gpu_speedup": tau * ar["ops"] / cost["ops"]})
    return pd.DataFrame(out)


def launch_markdown(frame: pd.DataFrame, pair_name: str) -> str:
    head = ("## Launches next to measured speed\n\n"
            f"Ops and host syncs per target call, counted on one generation of each configuration (pair "
            f"`{pair_name}`, a fixed random prompt; python scripts/cycle_cost.py --rows); τ and the CPU speedup "
            "per item (mean ± 95% CI over the rows) are the speed rows' own. Predicted GPU speedup = τ × AR ops "
            "per call / ops per call: the speedup where every dispatched op costs the same launch time (eager "
            "PyTorch at batch 1 on a GPU), not a measurement.\n")
    if frame.empty:
        return head + "\nNo configuration holds both rows and counts.\n"
    blocks = []
    for t, part in frame.groupby("temperature"):
        ar = part.iloc[0]
        body = [[display_name(AR.name), "-", "-", "1.00", "1.00", f"{ar['ar_ops']:,.0f}", f"{ar['ar_syncs']:.1f}", "1.00"]]
        for _, r in sorted(part.iterrows(), key=lambda kv: (_order(kv[1]["variant"]), kv[1]["tree"])):
            body.append([display_name(r["variant"]), r["tree"], str(r["n"]), fmt(r["tau"], r["tau_hw"]),
                         fmt(r["cpu_speedup"], r["cpu_speedup_hw"]), f"{r['ops']:,.0f}", f"{r['syncs']:.1f}",
                         f"{r['gpu_speedup']:.2f}"])
        header = ["method", "tree", "n", "τ", "CPU speedup per item", "ops / call", "syncs / call",
                  "predicted GPU speedup"]
        blocks.append(f"### T = {t:g}\n\n" + markdown_table(header, body))
    return head + "\n" + "\n\n".join(blocks) + "\n"


def row_costs(pair: CostPair, rows: pd.DataFrame, new_tokens: int = 24, prompt_len: int = 64,
              progress=None) -> tuple[pd.DataFrame, pd.DataFrame, Optional[str]]:
    """(counts, launch frame, Markdown) of the speed rows ``rows`` (with ``variant``) on ``pair``."""
    counts = count_configs(pair, configs_of(rows), new_tokens, prompt_len, progress)
    frame = launch_frame(rows, counts)
    return counts, frame, launch_markdown(frame, pair.name)
