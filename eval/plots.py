"""Figures of the paper's artifacts (matplotlib); used by scripts/make_figures.py and the notebook.

Every function takes result rows (``eval.analysis.load``) and returns a list of
(name, Figure), one per setting that has the rows it needs (empty when none).
"""

from __future__ import annotations

import hashlib
import textwrap

import matplotlib

matplotlib.use("Agg")  # headless by default; notebooks switch backends themselves
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eval.analysis import (DEFAULT_WEIGHTS, display_name, restrict_to_common, setting_title,  # noqa: E402
                           settings, suites_in, temperature_cells, variant_summary)
from eval.tables import ABLATION_MS, MAIN_T, TEMPERATURE_MS  # noqa: E402

COLORS = {"topk": "#7f7f7f", "rheo m=0": "#9ecae1", "rheo m=1": "#d62728", "rheo m=2": "#3182bd",
          "rheo m=3": "#08519c"}



def _title(setting: dict, width: int = 70) -> str:
    """The setting's title, wrapped so a narrow figure never clips it."""
    return "\n".join(textwrap.wrap(setting_title(setting), width))

def _name(prefix: str, setting: dict) -> str:
    name = (f"{prefix}_{setting['model']}_k{setting['k']}d{setting['depth']}r{setting['tree_size']}"
            f"_n{setting['max_new_tokens']}_{setting['device']}")
    weights = [setting.get(w) for w in ("target_path", "head_path")]
    if any(w not in (None, DEFAULT_WEIGHTS) for w in weights):  # non-default weights: keep files apart
        name += "_w" + hashlib.sha256(repr(weights).encode()).hexdigest()[:6]
    return name


def m_ablation_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """tau (pooled, 95% CI) vs m at T=1, with Top-K as a horizontal band."""
    out = []
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        ms = [m for m in ABLATION_MS if (rows["variant"] == f"rheo m={m}").any()]
        if "topk" not in set(rows["variant"]) or len(ms) < 2:
            continue
        rows = restrict_to_common(rows, ["topk"] + [f"rheo m={m}" for m in ms])
        cells = [variant_summary(rows[rows["variant"] == f"rheo m={m}"]) for m in ms]
        top = variant_summary(rows[rows["variant"] == "topk"])
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.axhspan(top["tau"] - _z(top["tau_ci"]), top["tau"] + _z(top["tau_ci"]), color=COLORS["topk"], alpha=0.2)
        ax.axhline(top["tau"], color=COLORS["topk"], ls="--", label="Top-K")
        ax.errorbar(ms, [c["tau"] for c in cells], yerr=[_z(c["tau_ci"]) for c in cells], marker="o",
                    color=COLORS["rheo m=1"], capsize=3, label="Rheo")
        ax.set(xlabel="m (lead slots)", ylabel="τ (tokens / target call)", xticks=ms)
        ax.set_title(_title({**setting, "temperature": MAIN_T}), fontsize=7)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out.append((_name("m_ablation", setting), fig))
    return out


def temperature_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """tau (pooled, 95% CI) vs T for Top-K and Rheo m=0, 1, 2 (T=0 included when run)."""
    out = []
    for setting, rows in settings(df):
        study = temperature_cells(rows, ["topk"] + [f"rheo m={m}" for m in TEMPERATURE_MS])
        if study is None:
            continue
        variants, temps, cells = study
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for i, v in enumerate(variants):
            ax.errorbar(temps, [row[i]["tau"] for row in cells], yerr=[_z(row[i]["tau_ci"]) for row in cells],
                        marker="o", capsize=3, color=COLORS.get(v), label=display_name(v))
        ax.set(xlabel="temperature T", ylabel="τ (tokens / target call)")
        ax.set_title(_title(setting), fontsize=7)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out.append((_name("temperature", setting), fig))
    return out


def suite_bar_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """Per-suite bars of tau and speedup, Top-K vs Rheo m=1, at T=1."""
    out = []
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        rows = restrict_to_common(rows, ["topk", "rheo m=1"])
        if rows.empty:
            continue
        suites = suites_in(rows)
        x = np.arange(len(suites))
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        for i, v in enumerate(["topk", "rheo m=1"]):
            cells = [variant_summary(rows[(rows["dataset"] == s) & (rows["variant"] == v)]) for s in suites]
            label = "Top-K" if v == "topk" else "Rheo m=1"
            axes[0].bar(x + (i - 0.5) * 0.4, [c["tau"] for c in cells], 0.4, yerr=[_z(c["tau_ci"]) for c in cells],
                        color=COLORS[v], capsize=2, label=label)
            axes[1].bar(x + (i - 0.5) * 0.4, [c["speedup"] for c in cells], 0.4, color=COLORS[v], label=label)
        for ax, ylabel in zip(axes, ["τ (tokens / target call)", "speedup over AR (ratio of sums)"]):
            ax.set_xticks(x, suites, rotation=30, fontsize=8)
            ax.set_ylabel(ylabel)
        axes[0].legend(fontsize=8, loc="lower right")
        fig.suptitle(_title({**setting, "temperature": MAIN_T}, width=110), fontsize=8)
        fig.tight_layout()
        out.append((_name("suites", setting), fig))
    return out


def all_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    return m_ablation_figures(df) + temperature_figures(df) + suite_bar_figures(df)


def _z(ci: float) -> float:
    return 0.0 if ci is None or np.isnan(ci) else ci
