"""Figure of same-state rows: paired gain over Top-K per method and temperature (95% CI over
keys), and the per-depth acceptance of each method at the highest temperature."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from eval.analysis import display_name as display  # noqa: E402
from eval.same_state_tables import BASELINE, mechanism_table, paired_differences  # noqa: E402


def draw(rows: pd.DataFrame, out: Path | str) -> Path:
    """One PNG with two panels; returns its path."""
    pooled = paired_differences(rows)
    pooled = pooled[(pooled["suite"] == "pooled") & (pooled["variant"] != BASELINE)]
    temps = sorted(pooled["temperature"].unique())
    variants = sorted(pooled["variant"].unique())
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(len(temps), 1)
    for i, t in enumerate(temps):
        part = pooled[pooled["temperature"] == t].set_index("variant").reindex(variants)
        x = np.arange(len(variants)) + (i - (len(temps) - 1) / 2) * width
        left.errorbar(x, part["diff"], yerr=part["half_width"], fmt="o", capsize=3, label=f"T = {t:g}")
    left.axhline(0, color="grey", lw=0.8)
    left.set_xticks(np.arange(len(variants)), [display(v) for v in variants], rotation=20)
    left.set_ylabel("expected emitted − Top-K (tokens / target call)")
    keys = int(pooled["keys"].max()) if len(pooled) else 0
    left.set_title(f"paired on the same states, 95% CI over {keys} keys", fontsize=9)
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    mech = mechanism_table(rows)
    hottest = mech[mech["temperature"] == mech["temperature"].max()]
    for r in hottest.itertuples():
        depths = np.arange(1, len(r.depth_accept) + 1)
        right.plot(depths, r.depth_accept, marker=".", label=display(r.variant))
    right.set_xlabel("depth d")
    right.set_ylabel("P(accepted path reaches depth d)")
    right.set_title(f"per-depth acceptance, T = {hottest['temperature'].max():g}", fontsize=9)
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
