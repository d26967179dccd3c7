"""The methods study (``experiment=methods``): both horns of the dilemma at one node budget.

Dynamic trees (Top-K, Rheo) and static stochastic trees (RSD, SpecInfer) plus chain
speculative sampling, on the same head, prompts and about the same number of
drafted nodes. Here methods are compared whatever their tree shape, so:

* **entry** - a row's variant (rheo.methods label) plus, for dynamic trees, the tree
  parameters (K, depth, R); static shapes are already part of their label;
* **setting** - what must match apart from the method: model, weights, device,
  dtype, max_new_tokens, sparse_top.

A setting is studied only when it holds rows of a static-tree method, so results
without them (the main table, the m ablation) produce no methods table.
"""

from __future__ import annotations

import hashlib
import textwrap
from typing import Optional

import pandas as pd

from eval.report.analysis import DEFAULT_WEIGHTS, display_name, fmt, restrict_to_common, variant_summary, with_speedup
from eval.report.markdown import frame_markdown
from rheo.methods import method_names
from rheo.methods.plugins import UNKNOWN_KIND, kind_of
from rheo.methods.registry import KINDS, registration_rank

BASE = ["model", "target_path", "head_path", "device", "dtype", "max_new_tokens", "sparse_top"]


def add_entry(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows (with ``variant``) plus ``entry``: the variant, with its tree for dynamic trees."""
    rows = rows.copy()
    rows["entry"] = [_entry(r) for r in rows.itertuples()] if len(rows) else pd.Series(dtype=str)
    return rows


def _entry(row) -> str:
    if kind_of(row.method) != "dynamic":
        return row.variant
    return f"{row.variant} K={row.k} depth={row.depth} R={row.tree_size}"


def _order(rows: pd.DataFrame) -> list[str]:
    """Entries: dynamic trees first, then static ones; methods in registration order; then by label."""
    method = rows.drop_duplicates("entry").set_index("entry")["method"]
    return sorted(method.index, key=lambda e: ((*KINDS, UNKNOWN_KIND).index(kind_of(method[e])),
                                               registration_rank(method[e]), e))


def studies(df: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """(setting, method rows with entry and speedup) of every setting that has a static-tree method."""
    spec = with_speedup(df)
    spec = spec[~spec["method"].isin(method_names("reference"))]  # e.g. the `generate` speed reference
    if spec.empty:
        return []
    out = []
    for key, rows in spec.groupby(BASE, dropna=False, sort=True):
        if any(kind_of(m) == "static" for m in rows["method"].unique()):
            out.append((dict(zip(BASE, key)), add_entry(rows)))
    return out


def cells(rows: pd.DataFrame) -> tuple[list[str], list[float], list[list[Optional[dict]]]]:
    """(entries, temperatures, cells[t][e]): at each T, summaries on the (item, turn, seed) keys
    every entry run at that T has; None where an entry has no rows at that T."""
    entries, temps, out = _order(rows), sorted(rows["temperature"].unique()), []
    for t in temps:
        at_t = rows[rows["temperature"] == t].drop(columns="variant").rename(columns={"entry": "variant"})
        present = [e for e in entries if (at_t["variant"] == e).any()]
        common = restrict_to_common(at_t, present)
        row = []
        for e in entries:
            part = common[common["variant"] == e]
            row.append(None if e not in present else
                       {**variant_summary(part), "nodes": part["kept_nodes_mean"].mean()})
        out.append(row)
    return entries, temps, out


def title(setting: dict) -> str:
    parts = [str(setting["model"]), f"{setting['device']}/{setting['dtype']}", f"top-{setting['sparse_top']}",
             f"max_new_tokens={setting['max_new_tokens']}"]
    for weights in ("target_path", "head_path"):
        if setting.get(weights, DEFAULT_WEIGHTS) != DEFAULT_WEIGHTS:
            parts.append(f"{weights}={setting[weights]}")
    return ", ".join(parts)


def methods_table(df: pd.DataFrame) -> Optional[str]:
    """Per setting and temperature: tau, speedup and drafted nodes scored per cycle of every method."""
    blocks = []
    for setting, rows in studies(df):
        entries, temps, table = cells(rows)
        body = []
        for t, row in zip(temps, table):
            for e, c in zip(entries, row):
                if c is not None:
                    body.append([f"{t:g}", _display_entry(e), str(c["n"]), fmt(c["tau"], c["tau_ci"]),
                                 fmt(c["speedup"]), fmt(c["nodes"], digits=1)])
        frame = pd.DataFrame(body, columns=["T", "method", "n", "τ", "speedup", "nodes scored / cycle"])
        blocks.append(f"### {title(setting)}\n\nseeds: {rows['seed'].nunique()}\n\n" + frame_markdown(frame))
    if not blocks:
        return None
    return ("## Methods: dynamic trees vs static stochastic trees vs chain\n\nτ = new tokens / target calls "
            "(bonus included), mean ± 95% CI over items × turns × seeds, at each T on the (item, turn, seed) "
            "keys every method has; speedup = tokens/s over AR of the same target, T and seed (ratio of sums); "
            "nodes scored / cycle = drafted nodes the target scores per call (root excluded). RSD: static "
            "tree, siblings without replacement; SpecInfer: with replacement; Chain: speculative sampling "
            "of one drafted sequence.\n\n" + "\n\n".join(blocks) + "\n")


def methods_figures(df: pd.DataFrame) -> list:
    """tau (95% CI) vs T, one line per method entry, one figure per setting."""
    from eval.report.plots import COLORS, plt, tau_yerr

    out = []
    for setting, rows in studies(df):
        entries, temps, table = cells(rows)
        fig, ax = plt.subplots(figsize=(5.5, 4.2))
        dodge = 0.012 * (max(temps) - min(temps) or 1.0)  # side by side, so the CI bars stay apart
        for i, e in enumerate(entries):
            pts = [(t + (i - (len(entries) - 1) / 2) * dodge, row[i]) for t, row in zip(temps, table)
                   if row[i] is not None]
            ax.errorbar([t for t, _ in pts], [c["tau"] for _, c in pts], yerr=tau_yerr([c for _, c in pts]),
                        marker="o", capsize=3, color=COLORS.get(e.split(" K=")[0]), label=_display_entry(e))
        ax.set(xlabel="temperature T", ylabel="τ (tokens / target call)", xticks=temps)
        ax.set_title("\n".join(textwrap.wrap(title(setting), 70)), fontsize=7)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
        fig.tight_layout()
        out.append((_name(setting), fig))
    return out


def _display_entry(entry: str) -> str:
    variant, sep, tree = entry.partition(" K=")
    return display_name(variant) + (f" (K={tree})" if sep else "")


def _name(setting: dict) -> str:
    name = f"methods_{setting['model']}_top{setting['sparse_top']}_n{setting['max_new_tokens']}_{setting['device']}"
    weights = [setting.get(w) for w in ("target_path", "head_path")]
    if any(w not in (None, DEFAULT_WEIGHTS) for w in weights):
        name += "_w" + hashlib.sha256(repr(weights).encode()).hexdigest()[:6]
    return name
