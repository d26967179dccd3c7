"""Mechanism figures of same-state rows (the columns of rheo.mechanism), pooled over states:

* ``depth`` - P(the accepted path reaches depth d) vs d per method, a panel per temperature;
* ``probe`` - the share of sampled children that survive pruning, by the depth of the node
  that drew them, per method that samples (Rheo's m), a panel per temperature;
* ``calibration`` - reliability of the draft head: per bucket of draft probability q of the
  kept children, mean q vs mean target probability p (buckets weighted by their children);
  a row of panels per head, one per temperature; at T = 0 the target side is the argmax match
  (the share of children that are the target's argmax); the diagonal is perfect calibration;
* ``root_gap`` - optimal-transport bound minus the method's own acceptance at the root, mean
  with a 95% CI over keys, per method and temperature (static roots with too many ordered draws
  record neither, and are named in the note).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eval.states.stats import labelled, mechanism_table, probe_share
from eval.states.style import CI_NOTE, legend_outside, panels, plt, png, style, temps_title


def depth_panel(ax, rows: pd.DataFrame, t: float, mech: pd.DataFrame | None = None) -> None:
    """P(reach depth d) vs d per method at temperature ``t`` (``mech``: mechanism_table(rows), if made)."""
    mech = mechanism_table(rows) if mech is None else mech
    for r in mech[mech["temperature"] == t].itertuples():
        depths = np.arange(1, len(r.depth_accept) + 1)
        ax.plot(depths, r.depth_accept, label=r.label, markersize=4, **style(rows, r.label))
    ax.set_xlabel("depth d")
    ax.set_ylabel("P(accepted path reaches depth d)")
    ax.set_title(f"per-depth acceptance, {temps_title(t)}", fontsize=9)


def fig_depth(rows: pd.DataFrame) -> bytes | None:
    rows = labelled(rows)
    temps = sorted(rows["temperature"].unique())
    mech = mechanism_table(rows) if temps else None
    if not temps or not any(len(d) for d in mech["depth_accept"]):  # none recorded (left out of an archive)
        return None
    fig, axes = panels(len(temps), sharey=True)
    for ax, t in zip(axes[0], temps):
        depth_panel(ax, rows, t, mech)
    top = max(line.get_ydata().max() for ax in axes[0] for line in ax.get_lines())
    axes[0][0].set_ylim(0, 1.05 * top)
    legend_outside(fig, axes)
    return png(fig, note="means over every driver state")


def fig_probe(rows: pd.DataFrame) -> bytes | None:
    """Kept / drawn sampled children by depth, per method that drew any (a panel per temperature)."""
    mech = mechanism_table(rows)
    if mech.empty:
        return None
    mech = mech[[sum(d) > 0 and f == "dynamic" for d, f in zip(mech["probe_drawn"], mech["family"])]]
    if mech.empty:
        return None
    rows = labelled(rows)
    temps = sorted(mech["temperature"].unique())
    fig, axes = panels(len(temps), sharey=True)
    for ax, t in zip(axes[0], temps):
        pooled = []
        for r in mech[mech["temperature"] == t].itertuples():
            drawn = np.asarray(r.probe_drawn, dtype=float)
            share = np.where(drawn > 0, np.asarray(r.probe_survival, dtype=float), np.nan)
            ax.plot(np.arange(len(share)), share, markersize=4, label=r.label, **style(rows, r.label))
            pooled.append(f"{r.label}: {probe_share(r.probe_drawn, r.probe_survival):.2f}")
        ax.text(0.98, 0.98, "kept, all depths\n" + "\n".join(pooled), transform=ax.transAxes, ha="right",
                va="top", fontsize=7)
        ax.set_xlabel("depth of the node that drew the sample (0 = root)")
        ax.set_ylim(0, 1.05)
        ax.set_title(temps_title(t), fontsize=9)
    axes[0][0].set_ylabel("sampled children kept after pruning")
    legend_outside(fig, axes)
    return png(fig, note="kept / drawn, summed over every driver state; pooled: over all depths")


def _calibration_panel(ax, mech: pd.DataFrame, rows: pd.DataFrame, t: float) -> None:
    ax.plot([0, 1], [0, 1], color="black", lw=0.8, label="perfect calibration")
    for r in mech.itertuples():
        n = np.asarray(r.calib_children, dtype=float)
        ok = n > 0
        q, p = np.asarray(r.calib_draft)[ok], np.asarray(r.calib_target)[ok]
        ax.plot(q, p, markersize=4, label=r.label, **style(rows, r.label))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean draft probability q (bucket)")
    ax.set_ylabel("share that is the target's argmax" if t == 0 else "mean target probability p")
    ax.set_title(temps_title(t) + (" (argmax match)" if t == 0 else ""), fontsize=9)


def fig_calibration(rows: pd.DataFrame) -> bytes | None:
    rows = labelled(rows)
    mech = mechanism_table(rows)
    if mech.empty or not any(sum(n) > 0 for n in mech["calib_children"]):
        return None
    heads, temps = sorted(mech["head_sha"].unique()), sorted(mech["temperature"].unique())
    fig, axes = panels(len(temps), width=3.8, height=3.8, rows=len(heads))
    for i, head in enumerate(heads):
        for j, t in enumerate(temps):
            part = mech[(mech["head_sha"] == head) & (mech["temperature"] == t)]
            _calibration_panel(axes[i][j], part, rows, t)
            axes[i][j].set_title(f"head {head}, {axes[i][j].get_title()}", fontsize=9)
    legend_outside(fig, axes)
    return png(fig, note="10 equal-width buckets of q; the kept children of every driver state")


def fig_root_gap(rows: pd.DataFrame) -> bytes | None:
    """Mean root_ot_bound - root_acceptance (95% CI over keys), a bar group per method."""
    rows = labelled(rows)
    mech = mechanism_table(rows)
    if mech.empty:
        return None
    have = mech[mech["root_states"] > 0]
    if have.empty:
        return None
    labels = list(dict.fromkeys(have["label"]))
    temps = sorted(have["temperature"].unique())
    fig, axes = panels(1, width=max(5.0, 0.9 * len(labels) * max(1, len(temps) / 2)), height=3.8)
    ax, width = axes[0][0], 0.8 / len(temps)
    shades = plt.get_cmap("viridis")(np.linspace(0.15, 0.85, len(temps)))
    for i, t in enumerate(temps):
        part = have[have["temperature"] == t].set_index("label").reindex(labels)
        x = np.arange(len(labels)) + (i - (len(temps) - 1) / 2) * width
        ax.bar(x, part["root_gap"], width * 0.9, yerr=part["root_gap_hw"].fillna(0).to_numpy(), capsize=3,
               label=temps_title(t), color=shades[i], edgecolor="black", lw=0.5)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("OT bound − own acceptance at the root")
    ax.set_title("root: how far each verifier is from the best lossless one", fontsize=9)
    legend_outside(fig, axes)
    missing = sorted(set(mech["label"]) - set(labels))
    note = CI_NOTE + ("" if not missing else f"; not recorded (too many ordered draws): {', '.join(missing)}")
    if have["root_below"].sum():  # an upper bound below the acceptance: the two saw different candidates
        note += f"\nbound below the own acceptance in {have['root_below'].sum()} of {have['root_states'].sum()} states"
    return png(fig, note=note)
