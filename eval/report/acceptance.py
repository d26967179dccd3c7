"""Acceptance breakdowns of the tree methods' rows (``rheo tables``: acceptance.md; ``rheo figures``:
acceptance_*.png), from the stored ``accept_lengths`` (eval.report.analysis.acceptance_by_cell).

For each setting and temperature, every tree variant (Top-K and Rheo first), per suite and pooled: the
mean acceptance length, the per-position acceptance rate as vLLM's metrics define it (the share of
verification steps that accept at least i drafted tokens, i = 1..depth) and the accepted-length
histogram (the share of steps that accept exactly a drafted tokens).
"""

from __future__ import annotations

from typing import Optional

import pandas as pd

from eval.report.analysis import SETTING, acceptance_by_cell, display_name, setting_title, suites_in
from eval.report.markdown import markdown_table
from rheo.methods.registry import method_of_variant, registration_rank

DEFINITION = ("Pooled over the verification steps (target calls) of a cell's rows, as vLLM's speculative-decoding "
              "metrics pool them. A step emits `accept_length` tokens (the bonus included) and accepts "
              "`accept_length − 1` drafted ones. **Mean acceptance length** = emitted tokens per step (1 + the mean "
              "accepted drafted tokens; τ of the main table is its mean over rows instead). **Per-position "
              "acceptance rate** at i (≥i) = the share of steps that accept at least i drafted tokens, i = 1..depth; "
              "the rates sum to the mean accepted drafted tokens. **Histogram** at a = the share of steps that "
              "accept exactly a drafted tokens. A row's last step counts as stored (cut by max_new_tokens or EOS). "
              "From the rows' stored `accept_lengths` (eval.report.analysis.acceptance_breakdown).")


def _order(variant: str) -> tuple:
    method = method_of_variant(variant)
    return (registration_rank(method.name) if method is not None else registration_rank(variant), variant)


def _cells(df: pd.DataFrame) -> list[tuple[dict, pd.DataFrame, pd.DataFrame]]:
    """(setting with temperature, pooled breakdowns, per-suite breakdowns) of every setting and temperature."""
    keys = SETTING + ["temperature"]
    out = []
    for values, rows in (df.groupby(keys, dropna=False, sort=True) if len(df) else ()):
        pooled = acceptance_by_cell(rows, ("temperature",))
        pooled = pooled[pooled["steps"] > 0]
        if not pooled.empty:
            by_suite = acceptance_by_cell(rows, ("temperature", "dataset"))
            out.append((dict(zip(keys, values)), pooled, by_suite[by_suite["steps"] > 0]))
    return out


def acceptance_table(df: pd.DataFrame) -> Optional[str]:
    """acceptance.md: per setting and temperature, the per-position rates and the histogram of every tree
    variant, per suite and pooled; None without tree-method rows."""
    blocks = []
    for setting, pooled, by_suite in _cells(df):
        depth = max(len(p) for p in pooled["per_position"])
        variants = sorted(pooled["variant"].unique(), key=_order)
        rates, hist = [], []
        for suite in suites_in(by_suite) + ["**pooled**"]:
            part = pooled if suite == "**pooled**" else by_suite[by_suite["dataset"] == suite]
            for variant in variants:
                found = part[part["variant"] == variant]
                if found.empty:
                    continue
                one = found.iloc[0]
                head = [suite, display_name(variant), str(one["rows"]), str(one["steps"])]
                rates.append(head + [f"{one['mean_accept_length']:.3f}"]
                             + [_share(one["per_position"], i) for i in range(depth)])
                hist.append(head + [_share(one["histogram"], a) for a in range(depth + 1)])
        base = ["suite", "method", "rows", "steps"]
        blocks.append(f"### {setting_title(setting)}\n\nPer-position acceptance rate\n\n"
                      + markdown_table(base + ["mean acceptance length"] + [f"≥{i}" for i in range(1, depth + 1)],
                                       rates)
                      + "\n\nAccepted drafted tokens per step (share of steps)\n\n"
                      + markdown_table(base + [str(a) for a in range(depth + 1)], hist))
    if not blocks:
        return None
    return "## Acceptance per position and accepted lengths\n\n" + DEFINITION + "\n\n" + "\n\n".join(blocks) + "\n"


def _share(values: list, i: int) -> str:
    return f"{values[i]:.3f}" if i < len(values) else "0.000"


def acceptance_figures(df: pd.DataFrame) -> list:
    """Per setting and temperature: the per-position acceptance rate of every tree variant (Top-K and Rheo
    first) and its accepted-length histogram, pooled over the suites."""
    from eval.report.plots import COLORS, _name, _title, legend_outside, plt

    out = []
    for setting, pooled, _ in _cells(df):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.4))
        variants = sorted(pooled["variant"].unique(), key=_order)
        width = 0.8 / len(variants)
        for j, variant in enumerate(variants):
            one = pooled[pooled["variant"] == variant].iloc[0]
            label = f"{display_name(variant)} (mean length {one['mean_accept_length']:.2f})"
            rates, hist = one["per_position"], one["histogram"]
            left.plot(range(1, len(rates) + 1), rates, marker="o", color=COLORS.get(variant), label=label)
            right.bar([a + (j - (len(variants) - 1) / 2) * width for a in range(len(hist))], hist, width,
                      color=COLORS.get(variant), label=display_name(variant))
        left.set(xlabel="position i (drafted tokens)", ylabel="share of steps accepting ≥ i", ylim=(0, 1))
        right.set(xlabel="accepted drafted tokens per step", ylabel="share of steps")
        legend_outside(right, title=f"{int(pooled['steps'].min())}+ steps per method", title_fontsize=7)
        left.legend(fontsize=7)
        fig.suptitle(_title(setting, width=110), fontsize=8)
        fig.tight_layout()
        out.append((_name("acceptance", setting) + f"_t{setting['temperature']:g}", fig))
    return out
