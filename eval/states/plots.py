"""Figures of same-state rows (eval.measure.same_states): expected emitted tokens per driver state, and its
paired difference vs Top-K, with 95% CIs over keys clustered by item (eval.states.stats).

:func:`figures` gives every figure the rows allow, by name (each one (model, driver, head)
study; several studies get their names suffixed):

* ``m_ablation`` - Rheo m minus Top-K vs m, one panel per temperature with two or more m;
* ``temperature`` - expected emitted per method vs T (CI bands), and minus Top-K vs T;
* ``families`` - the dilemma: expected emitted vs T, one panel per family (dynamic, static,
  chain), Top-K in every panel for reference;
* ``depth``, ``probe``, ``calibration``, ``root_gap`` - the mechanism (eval.states.mech_plots).

A figure the rows cannot draw (one temperature, no Rheo m ablation, one family) is left out
and :func:`figures` says why. :func:`summary_png` is the one-file summary of ``--figure``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval.states.labels import FAMILIES, baseline_label, ordered_labels, rheostat_rows
from eval.states.stats import POOLED, labelled, paired_differences
from eval.states.style import legend_outside, palette, panels, png, style, temps_title

STUDY = ["model", "dtype", "driver", "head_sha", "dial"]


def pooled_table(rows: pd.DataFrame) -> pd.DataFrame:
    table = paired_differences(rows)
    return table[table["suite"] == POOLED]


def fig_m_ablation(rows: pd.DataFrame) -> bytes | None:
    """Rheo m minus Top-K (95% CI) vs m; a panel per temperature with >= 2 values of m, hottest first."""
    rows = labelled(rows)
    rheo = rheostat_rows(rows)
    temps = sorted((t for t, g in rheo.groupby("temperature") if g["m"].nunique() >= 2), reverse=True)
    base = baseline_label(rows)
    if not temps or base is None:
        return None
    table = pooled_table(rows)
    m_of = dict(zip(rheo["label"], rheo["m"]))
    fig, axes = panels(len(temps), sharey=True)
    for ax, t in zip(axes[0], temps):
        part = table[(table["temperature"] == t) & table["label"].isin(m_of)].copy()
        part["m"] = part["label"].map(m_of)
        part = part.sort_values("m")
        ax.errorbar(part["m"], part["diff"], yerr=part["half_width"], fmt="o-", capsize=4, color="tab:blue",
                    label=f"Rheo m − {base}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(part["m"].tolist(), [f"{m:g}" for m in part["m"]])
        ax.set_xlabel("m (deterministic lead slots per node)")
        ax.set_title(f"{temps_title(t)}, {int(part['diff_keys'].max())} keys", fontsize=9)
    axes[0][0].set_ylabel(f"expected emitted − {base}\n(tokens / target call)")
    legend_outside(fig, axes)
    return png(fig)


def _curve(ax, frame: pd.DataFrame, y: str, hw: str, kw: dict, label: str, band: float = 0.12) -> None:
    """``y`` vs T with its CI ``hw``: a band of opacity ``band``, or error bars when ``band`` is 0."""
    frame = frame.sort_values("temperature")
    x, mid, half = frame["temperature"].to_numpy(), frame[y].to_numpy(float), frame[hw].to_numpy(float)
    ax.plot(x, mid, label=label, **kw)
    if band:
        ax.fill_between(x, mid - half, mid + half, color=kw["color"], alpha=band, lw=0)
    else:
        ax.errorbar(x, mid, yerr=half, fmt="none", ecolor=kw["color"], capsize=3, lw=1)


def fig_temperature(rows: pd.DataFrame) -> bytes | None:
    """Expected emitted per method vs T (CI bands) and its paired difference vs Top-K vs T."""
    rows = labelled(rows)
    if rows["temperature"].nunique() < 2:
        return None
    table, base = pooled_table(rows), baseline_label(rows)
    fig, axes = panels(2)
    left, right = axes[0]
    for label in ordered_labels(rows):
        part = table[table["label"] == label]
        if part["temperature"].nunique() < 2:
            continue
        _curve(left, part, "mean", "mean_hw", style(rows, label), label, band=0.06)
        if label != base:
            _curve(right, part, "diff", "half_width", style(rows, label), label)
    left.set_ylabel("expected emitted tokens / target call")
    right.set_ylabel(f"expected emitted − {base}")
    right.axhline(0, color="grey", lw=0.8)
    for ax in (left, right):
        ax.set_xlabel("temperature T")
        ax.set_xticks(sorted(rows["temperature"].unique()))
    counts = sorted({int(k) for k in table["keys"]})  # keys per T (a T can have more prompts than another)
    keys = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    left.set_title(f"mean over the driver's states, {keys} keys per T", fontsize=9)
    right.set_title(f"paired difference vs {base} on the same states", fontsize=9)
    legend_outside(fig, axes)
    return png(fig)


def fig_families(rows: pd.DataFrame) -> bytes | None:
    """The dilemma: expected emitted vs T per method, a panel per family, Top-K in each (grey)."""
    rows = labelled(rows)
    present = [f for f in FAMILIES if (rows["family"] == f).any()]
    if rows["temperature"].nunique() < 2 or len(present) < 2:
        return None
    table, base = pooled_table(rows), baseline_label(rows)
    fig, axes = panels(len(present), sharey=True)
    for ax, fam in zip(axes[0], present):
        labels = ordered_labels(rows[rows["family"] == fam])
        if base is not None and base not in labels:
            ref = {"color": "grey", "linestyle": "-", "marker": "o"}
            _curve(ax, table[table["label"] == base], "mean", "mean_hw", ref, f"{base} (reference)", band=0)
        for i, label in enumerate(labels):
            part = table[table["label"] == label].copy()
            part["temperature"] += (i - (len(labels) - 1) / 2) * 0.012  # keep the error bars apart
            _curve(ax, part, "mean", "mean_hw", style(rows, label), label, band=0)
        ax.set_title(f"{fam} trees", fontsize=9)
        ax.set_xlabel("temperature T")
        ax.set_xticks(sorted(rows["temperature"].unique()))
    axes[0][0].set_ylabel("expected emitted tokens / target call")
    legend_outside(fig, axes)
    return png(fig)


def summary_png(rows: pd.DataFrame) -> bytes:
    """The one-file summary (``--figure``): the paired difference vs Top-K per method and temperature,
    and the per-depth acceptance at the highest temperature."""
    rows = labelled(rows)
    table, base = pooled_table(rows), baseline_label(rows)
    others = [lab for lab in ordered_labels(rows) if lab != base]
    temps = sorted(table["temperature"].unique())
    fig, axes = panels(2, width=5.0, height=4.2)
    left, right = axes[0]
    width = 0.8 / max(len(temps), 1)
    for i, t in enumerate(temps):
        part = table[table["temperature"] == t].set_index("label").reindex(others)
        x = np.arange(len(others)) + (i - (len(temps) - 1) / 2) * width
        left.errorbar(x, part["diff"], yerr=part["half_width"], fmt="o", capsize=3, label=temps_title(t))
    left.axhline(0, color="grey", lw=0.8)
    left.set_xticks(np.arange(len(others)), others, rotation=25, ha="right", fontsize=8)
    left.set_ylabel(f"expected emitted − {base} (tokens / target call)")
    left.set_title(f"paired on the same states, {int(table['keys'].max())} keys", fontsize=9)
    from eval.states.mech_plots import depth_panel

    depth_panel(right, rows, max(temps))
    right.set_ylim(bottom=0)
    legend_outside(fig, axes)
    return png(fig)


def figures(rows: pd.DataFrame) -> tuple[dict[str, bytes], list[str]]:
    """({name: PNG bytes} of every figure the rows allow, [why each other one is left out])."""
    from eval.states.mech_plots import fig_calibration, fig_depth, fig_probe, fig_root_gap

    makers = {"m_ablation": (fig_m_ablation, "no temperature with two or more values of Rheo's m"),
              "temperature": (fig_temperature, "one temperature only"),
              "families": (fig_families, "one temperature or one family (dynamic / static / chain) only"),
              "depth": (fig_depth, "no rows, or no per-depth acceptance recorded"), "probe": (fig_probe, "no method drew sampled children"),
              "calibration": (fig_calibration, "no calibration counts"),
              "root_gap": (fig_root_gap, "no root acceptance / bound recorded")}
    rows = labelled(rows)
    studies = list(rows.groupby(STUDY))
    named = [c not in ("dtype", "dial") or rows[c].nunique() > 1 for c in STUDY]  # named only when they vary
    drawn, skipped = {}, []
    for key, part in studies:
        tag = "" if len(studies) == 1 else "_" + "_".join(str(k) for k, n in zip(key, named) if n)
        for name, (make, why) in makers.items():
            got = make(part)
            if got is None:
                skipped.append(f"{name}{tag}: {why}")
            else:
                drawn[name + tag] = got
    return drawn, skipped
