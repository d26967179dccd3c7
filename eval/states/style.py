"""Shared look of the same-state figures: one colour per compared method (in table order), one
line style and marker per family (dynamic / static / chain), legends outside the data, PNG bytes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eval.report.plots import palette_png  # noqa: E402
from eval.states.labels import ordered_labels  # noqa: E402

LINESTYLE = {"dynamic": "-", "static": "--", "chain": ":"}
MARKER = {"dynamic": "o", "static": "s", "chain": "^"}
CI_NOTE = "95% CI over keys, clustered by item (a key = one prompt; its states averaged first)"


def palette(rows: pd.DataFrame) -> dict[str, tuple]:
    """label -> colour, the same in every figure of these rows."""
    cmap = plt.get_cmap("tab10")
    return {label: cmap(i % 10) for i, label in enumerate(ordered_labels(rows))}


def families(rows: pd.DataFrame) -> dict[str, str]:
    return dict(zip(rows["label"], rows["family"]))


def style(rows: pd.DataFrame, label: str) -> dict:
    """plot() keywords of ``label``: its colour, its family's line style and marker."""
    fam = families(rows).get(label, "dynamic")
    return {"color": palette(rows)[label], "linestyle": LINESTYLE[fam], "marker": MARKER[fam]}


def panels(n: int, width: float = 4.2, height: float = 3.6, rows: int = 1, sharey: bool = False):
    """(figure, axes as a [rows, n] array)."""
    fig, axes = plt.subplots(rows, n, figsize=(width * n + 2.2, height * rows), squeeze=False, sharey=sharey)
    return fig, axes


def legend_outside(fig, axes, title: str | None = None) -> None:
    """One legend for the figure, right of the panels (the union of the panels' entries)."""
    handles, labels = {}, []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if labels:
        fig.legend([handles[lab] for lab in labels], labels, loc="center left", bbox_to_anchor=(1.0, 0.5),
                   fontsize=8, title=title, title_fontsize=8, frameon=False)


def png(fig, note: str = CI_NOTE) -> bytes:
    """The figure as PNG bytes (closed afterwards); ``note`` under the panels."""
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="dimgray", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    data = palette_png(fig, dpi=110)
    plt.close(fig)
    return data


def temps_title(t: float) -> str:
    return f"T = {t:g}"
