"""Figures of the ranking-option studies (eval.states.options): gain over Top-K against temperature,
and against Top-K's expected tokens per call along the draft-quality dial, the paper's points beside."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from eval.states.style import panels, png


def serving_figure(frame: pd.DataFrame, baseline: str, highlight: dict[str, str]) -> Optional[bytes]:
    """``frame``: eval.states.options.serving_frame. Left: the ``highlight`` labels (label -> legend
    name) minus ``baseline`` vs T with 95% CI bands; right: every option (lines only)."""
    if frame.empty:
        return None
    fig, axes = panels(2, width=4.8, height=4.0)
    every = {lab: lab for lab in dict.fromkeys(frame["label"]) if lab != baseline}
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(every)}  # one colour per option in both panels
    for ax, labels, bands in ((axes[0, 0], highlight, True), (axes[0, 1], every, False)):
        for label in labels:
            part = frame[frame["label"] == label].sort_values("temperature")
            if part.empty:
                continue
            ax.plot(part["temperature"], part["d_topk"], marker="o", ms=5 if bands else 3, label=labels[label],
                    color=colors.get(label))
            if bands:
                ax.fill_between(part["temperature"], part["d_topk"] - part["h_topk"],
                                part["d_topk"] + part["h_topk"], color=colors.get(label), alpha=0.15)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("expected emitted tokens per call − Top-K")
        ax.legend(fontsize=7, frameon=False, **({"loc": "best"} if bands else
                                                 {"loc": "center left", "bbox_to_anchor": (1.0, 0.5)}))
    axes[0, 0].set_title("the paper's rules and the recommended one (95% CI)", fontsize=9)
    axes[0, 1].set_title("every option", fontsize=9)
    return png(fig)


def dial_figure(frame: pd.DataFrame, paper_points) -> Optional[bytes]:
    """``frame``: eval.states.options.dial_frame. Gain over Top-K (absolute, %) vs Top-K's expected
    tokens per call; ``paper_points``: (name, Top-K tau, Rheo tau) drawn beside."""
    if frame.empty:
        return None
    fig, axes = panels(2, width=4.8, height=4.0)
    for ax, col, unit in ((axes[0, 0], "gain", "tokens per call"), (axes[0, 1], "gain_pct", "% of Top-K")):
        several_t = frame["temperature"].nunique() > 1
        for i, ((label, t), part) in enumerate(frame.groupby(["label", "temperature"], sort=False)):
            part = part.sort_values("draft_mix")  # the line follows the dial
            label = f"{label}, T = {t:g}" if several_t else label
            ax.errorbar(part["topk"], part[col], yerr=part[f"{col}_hw"], marker="o", capsize=3, label=label)
            for x, y, a in zip(part["topk"], part[col], part["draft_mix"]):
                if i == 0:  # one label per dial value
                    ax.annotate(f"a={a:g}", (x, y), fontsize=6, xytext=(3, -9), textcoords="offset points")
        for (name, a, b), marker in zip(paper_points, ("*", "P", "X")):
            ax.plot([a], [b - a if col == "gain" else 100 * (b - a) / a], marker=marker, markersize=10,
                    linestyle="", color="black", label=f"paper: {name}")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("Top-K expected tokens per call (τ)")
        ax.set_ylabel(f"Rheo − Top-K ({unit})")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return png(fig)
