"""Acceptance breakdowns of the tree methods' rows, from their stored ``accept_lengths``: per method and
cell (:func:`acceptance_by_cell`, beside :mod:`eval.report.analysis`), as a table (``rheo tables``:
acceptance.md) and as figures (``rheo figures``: acceptance_*.png).

For each setting and temperature, every tree variant (Top-K and Rheo first), per suite and pooled: the
mean acceptance length, the per-position acceptance rate as vLLM's metrics define it (the share of
verification steps that accept at least i drafted tokens, i = 1..depth) and the accepted-length
histogram (the share of steps that accept exactly a drafted tokens).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Optional, Sequence

import pandas as pd

from eval.report.analysis import SETTING, display_name, setting_title, suites_in
from eval.report.markdown import markdown_table
from rheo.methods import find_method
from rheo.methods.registry import method_of_variant, registration_rank

#: what a breakdown pools: the verification steps (target calls) of every row of a cell
BREAKDOWN_KEYS = ("steps", "mean_accept_length", "mean_accepted", "per_position", "histogram")


def acceptance_breakdown(accept_lengths: Iterable[Sequence[int]], depth: Optional[int] = None) -> dict:
    """The acceptance of the verification steps in ``accept_lengths`` (rows' ``accept_lengths``: tokens
    emitted by each target call, the bonus included, so a step accepts ``length - 1`` drafted tokens),
    pooled over steps as vLLM's speculative-decoding metrics pool them:

    * ``mean_accept_length``: emitted tokens per step, 1 + ``mean_accepted`` (vLLM's mean acceptance length);
    * ``per_position[i - 1]``, i = 1..D: the share of steps that accept at least i drafted tokens (vLLM's
      per-position acceptance rate); their sum is ``mean_accepted``;
    * ``histogram[a]``, a = 0..D: the share of steps that accept exactly a drafted tokens.

    D is ``depth`` (the tree's depth), or the most any step accepted when that is more. A row's last
    step counts as stored (cut by max_new_tokens or EOS)."""
    counts = Counter(int(a) - 1 for lengths in accept_lengths for a in lengths)
    steps = sum(counts.values())
    if steps and min(counts) < 0:
        raise ValueError("accept_lengths hold a step that emitted no token: every target call emits at least one")
    top = max([*counts, int(depth or 0)]) if steps else int(depth or 0)
    at_least = [sum(c for a, c in counts.items() if a >= i) for i in range(top + 2)]
    accepted = sum(a * c for a, c in counts.items())
    return {"steps": steps, "mean_accept_length": 1 + accepted / steps if steps else math.nan,
            "mean_accepted": accepted / steps if steps else math.nan,
            "per_position": [at_least[i] / steps if steps else math.nan for i in range(1, top + 1)],
            "histogram": [(at_least[a] - at_least[a + 1]) / steps if steps else math.nan for a in range(top + 1)]}


def acceptance_by_cell(df: pd.DataFrame, by: Sequence[str] = ("temperature", "dataset")) -> pd.DataFrame:
    """One row per (setting, ``by``, variant) of the tree methods' rows of ``df`` (eval.report.analysis.load;
    a method this process does not know counts as one): ``rows`` and :func:`acceptance_breakdown`'s columns, D the deepest
    ``depth`` of the cell's rows. ``by=("temperature",)`` pools the suites."""
    method = {m: find_method(m) for m in df["method"].unique()} if len(df) else {}
    tree = df[df["method"].map(lambda m: method[m] is None or not method[m].is_reference)] if len(df) else df
    keys = SETTING + list(by) + ["variant"]
    out = []
    for values, rows in (tree.groupby(keys, dropna=False, sort=True) if len(tree) else ()):
        depth = pd.to_numeric(rows["depth"], errors="coerce").max() if "depth" in rows.columns else math.nan
        found = acceptance_breakdown(rows["accept_lengths"], None if pd.isna(depth) else int(depth))
        out.append({**dict(zip(keys, values)), "rows": len(rows), **found})
    return pd.DataFrame(out, columns=keys + ["rows", *BREAKDOWN_KEYS])


DEFINITION = ("Pooled over the verification steps (target calls) of a cell's rows, as vLLM's speculative-decoding "
              "metrics pool them. A step emits `accept_length` tokens (the bonus included) and accepts "
              "`accept_length − 1` drafted ones. **Mean acceptance length** = emitted tokens per step (1 + the mean "
              "accepted drafted tokens; τ of the main table is its mean over rows instead). **Per-position "
              "acceptance rate** at i (≥i) = the share of steps that accept at least i drafted tokens, i = 1..depth; "
              "the rates sum to the mean accepted drafted tokens. **Histogram** at a = the share of steps that "
              "accept exactly a drafted tokens. A row's last step counts as stored (cut by max_new_tokens or EOS). "
              "From the rows' stored `accept_lengths` (eval.report.acceptance.acceptance_breakdown).")


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
