"""Figures of the paper's artifacts (matplotlib); used by scripts/make_figures.py and the notebook.

Every function takes result rows (``eval.report.analysis.load``) and returns a list of
(name, Figure), one per setting that has the rows it needs (empty when none).
"""

from __future__ import annotations

import hashlib
import io
import textwrap

import matplotlib

matplotlib.use("Agg")  # headless by default; notebooks switch backends themselves
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eval.report.analysis import (DEFAULT_WEIGHTS, MIN_CI_N, display_name, restrict_to_common,  # noqa: E402
                                  setting_title, settings, suites_in, variant_summary)
from eval.report.tables import ABLATION_MS, MAIN_T, PAPER_RHEO, TOPK, rheo_variant, temperature_studies  # noqa: E402
from rheo.methods import get_method  # noqa: E402


def palette_png(fig, dpi: int) -> bytes:
    """The figure as a 256-colour palette PNG (a third of the RGBA file's bytes; results are committed)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    image.save(out, format="png", optimize=True)
    return out.getvalue()

COLORS = {TOPK: "#7f7f7f", **{rheo_variant(m): c for m, c in enumerate(("#9ecae1", "#d62728", "#3182bd", "#08519c"))}}



def _title(setting: dict, width: int = 70) -> str:
    """The setting's title, wrapped so a narrow figure never clips it."""
    return "\n".join(textwrap.wrap(setting_title(setting), width))

def _name(prefix: str, setting: dict) -> str:
    name = (f"{prefix}_{setting['model']}_k{setting['k']}d{setting['depth']}r{setting['tree_size']}"
            f"_n{setting['max_new_tokens']}_{setting['device']}")
    weights = [setting.get(w) for w in ("target_path", "head_path")]
    if any(w not in (None, DEFAULT_WEIGHTS) for w in weights):  # non-default weights: keep files apart
        name += "_w" + hashlib.sha256(repr(weights).encode()).hexdigest()[:6]
    for col, mark in (("target_sha", "t"), ("prompt_format", "f")):  # another target or prompt format: likewise
        if setting.get(col) not in (None, DEFAULT_WEIGHTS):
            name += f"_{mark}" + hashlib.sha256(str(setting[col]).encode()).hexdigest()[:6]
    return name


#: how the figures name their intervals (eval.report.analysis.CI_UNIT)
CI_SHORT = "95% CI, clustered by item"
#: axis labels (with units) shared by the figures
TAU_LABEL = "τ (new tokens / target call)"
SPEEDUP_LABEL = "speedup over AR (×, ratio of sums)"
#: on a CPU a tree as large as the paper's costs several one-token steps: below 1 is what to expect
CPU_SPEED_NOTE = "below 1 is expected on a CPU for large trees (the paper's: ~3 AR steps a cycle);\nmake tune finds smaller trees that pay"


def legend_outside(ax, **kwargs) -> None:
    """The legend right of the axes, never over the data."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, **kwargs)


def m_ablation_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """tau (pooled, 95% CI) vs m at T=1, with Top-K as a horizontal band."""
    out = []
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        ms = [m for m in ABLATION_MS if (rows["variant"] == rheo_variant(m)).any()]
        if TOPK not in set(rows["variant"]) or len(ms) < 2:
            continue
        rows = restrict_to_common(rows, [TOPK] + [rheo_variant(m) for m in ms])
        cells = [variant_summary(rows[rows["variant"] == rheo_variant(m)]) for m in ms]
        top = variant_summary(rows[rows["variant"] == TOPK])
        fig, ax = plt.subplots(figsize=(6.0, 3.2))
        (low, high), = tau_bounds([top])
        if np.isfinite(low):
            ax.axhspan(low, high, color=COLORS[TOPK], alpha=0.2, label=f"{display_name(TOPK)} {CI_SHORT}")
        ax.axhline(top["tau"], color=COLORS[TOPK], ls="--", label=display_name(TOPK))
        ax.errorbar(ms, [c["tau"] for c in cells], yerr=tau_yerr(cells), marker="o",
                    color=COLORS[PAPER_RHEO], capsize=3, label=f"{get_method('rheo').display} ({CI_SHORT})")
        ax.set(xlabel=f"m (lead slots per expanded node); n = {top['n']} paired prompts", ylabel=TAU_LABEL,
               xticks=ms)
        ax.set_title(_title({**setting, "temperature": MAIN_T}, width=60), fontsize=7)
        legend_outside(ax)
        fig.tight_layout()
        out.append((_name("m_ablation", setting), fig))
    return out


def temperature_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """tau (pooled, 95% CI) vs T of Top-K, every Rheo m and other dynamic trees, each at every temperature it was run at
    (a variant run at one temperature only is a lone marker); side by side so the CI bars stay apart."""
    out = []
    for setting, variants, temps, cells in temperature_studies(df):
        fig, ax = plt.subplots(figsize=(6.0, 3.4))
        dodge = 0.012 * (max(temps) - min(temps) or 1.0)
        for i, v in enumerate(variants):
            pts = [(t + (i - (len(variants) - 1) / 2) * dodge, row[i]) for t, row in zip(temps, cells)
                   if row[i]["n"] > 0]
            ax.errorbar([t for t, _ in pts], [c["tau"] for _, c in pts], yerr=tau_yerr([c for _, c in pts]),
                        marker="o", capsize=3, color=COLORS.get(v), label=display_name(v) + _only(temps, cells, i))
        ax.set(xlabel="temperature T", ylabel=TAU_LABEL, xticks=temps)
        ax.set_title(_title(setting, width=60), fontsize=7)
        legend_outside(ax, title=f"bars: {CI_SHORT}", title_fontsize=7)
        fig.tight_layout()
        out.append((_name("temperature", setting), fig))
    return out


def _only(temps: list[float], cells: list[list[dict]], i: int) -> str:
    """' (T=1 only)' for a variant run at one of several temperatures, else ''."""
    run = [t for t, row in zip(temps, cells) if row[i]["n"] > 0]
    return f" (T={run[0]:g} only)" if len(run) == 1 < len(temps) else ""


def suite_bar_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    """Per-suite bars of tau, Top-K vs Rheo m=1, at T=1; and of speedup when AR rows are paired
    (a tau experiment has none: its figure has the tau panel only)."""
    out = []
    variants = [TOPK, PAPER_RHEO]
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        rows = restrict_to_common(rows, variants)
        if rows.empty:
            continue
        suites = suites_in(rows)
        x = np.arange(len(suites))
        cells = {v: [variant_summary(rows[(rows["dataset"] == s) & (rows["variant"] == v)]) for s in suites]
                 for v in variants}
        counts = [max(cells[v][i]["n"] for v in variants) for i in range(len(suites))]
        items = [max(cells[v][i]["items"] for v in variants) for i in range(len(suites))]
        speed = any(np.isfinite(c["speedup"]) for v in variants for c in cells[v])
        fig, axes = plt.subplots(1, 2 if speed else 1, figsize=(10.5 if speed else 6.5, 3.4), squeeze=False)
        panels = [("tau", TAU_LABEL)] + ([("speedup", SPEEDUP_LABEL)] if speed else [])
        for ax, (key, ylabel) in zip(axes[0], panels):
            for i, v in enumerate(variants):
                err = tau_yerr(cells[v]) if key == "tau" else speedup_yerr(cells[v])
                ax.bar(x + (i - 0.5) * 0.4, [c[key] for c in cells[v]], 0.4, yerr=err, color=COLORS[v], capsize=2,
                       label=display_name(v))
            ax.set_xticks(x, [f"{s}\nn={n}" for s, n in zip(suites, counts)], rotation=30, fontsize=8)
            ax.set(xlabel="suite (n = paired prompts)", ylabel=ylabel)
        if speed:
            axes[0][1].axhline(1.0, color="black", lw=0.8, ls=":")
            if str(setting.get("device", "")).startswith("cpu"):
                axes[0][1].set_title(CPU_SPEED_NOTE, fontsize=7)
        ci_note = (f"bars: {CI_SHORT}" + (f" (none under {MIN_CI_N} items)" if min(items) < MIN_CI_N else "")
                   + ("; speedup: cluster bootstrap" if speed else ""))
        if speed and not all(c["ar_same_job"] for v in variants for c in cells[v] if np.isfinite(c["speedup"])):
            ci_note += "\nspeedups over AR rows of separate jobs:\nno bar"
        legend_outside(axes[0][-1], title=ci_note, title_fontsize=7)
        fig.suptitle(_title({**setting, "temperature": MAIN_T}, width=110), fontsize=8)
        fig.tight_layout()
        out.append((_name("suites", setting), fig))
    return out


def all_figures(df: pd.DataFrame) -> list[tuple[str, plt.Figure]]:
    return m_ablation_figures(df) + temperature_figures(df) + suite_bar_figures(df)


def _z(ci: float) -> float:
    """The half-width of a 95% CI bar; NaN (no bar, no cap) where there is none (n < MIN_CI_N)."""
    return np.nan if ci is None or np.isnan(ci) else ci


def tau_bounds(cells: list[dict]) -> np.ndarray:
    """[len(cells), 2] (low, high) of each cell's 95% interval of tau, the low end never below 1 (a
    decoder emits at least one token per target call); NaN where the cell has no interval (n < MIN_CI_N)."""
    half = np.array([_z(c["tau_ci"]) for c in cells], dtype=float).reshape(-1)
    tau = np.array([c["tau"] for c in cells], dtype=float).reshape(-1)
    return np.stack([np.maximum(tau - half, 1.0), tau + half], axis=1) if len(cells) else np.zeros((0, 2))


def speedup_yerr(cells: list[dict]) -> np.ndarray:
    """[2, len(cells)] yerr (below, above) of the speedup bars: each cell's cluster-bootstrap interval over items
    (variant_summary; NaN, no bar, where it has none: too few items, or AR rows of another job)."""
    sp = np.array([c["speedup"] for c in cells], dtype=float).reshape(-1)
    low = np.array([c["speedup_low"] for c in cells], dtype=float).reshape(-1)
    high = np.array([c["speedup_high"] for c in cells], dtype=float).reshape(-1)
    return np.stack([np.maximum(sp - low, 0.0), np.maximum(high - sp, 0.0)]) if len(cells) else np.zeros((2, 0))


def tau_yerr(cells: list[dict]) -> np.ndarray:
    """[2, len(cells)] yerr (below, above) of tau error bars: :func:`tau_bounds` about each mean."""
    bounds = tau_bounds(cells)
    tau = np.array([c["tau"] for c in cells], dtype=float).reshape(-1)
    return np.stack([np.maximum(tau - bounds[:, 0], 0.0), bounds[:, 1] - tau]) if len(cells) else np.zeros((2, 0))
