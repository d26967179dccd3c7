"""Greedy agreement table from result rows.

* :func:`agreement_table` - at T=0, each method's output tokens against our AR's on the
  same item: identical outputs, and tokens before the first divergence. In fp32 this is
  the identity check; in bf16 a tree scored in one batch rounds differently from
  one-token steps, so a near-tie can flip and the outputs part (agreement, not identity).
Returns Markdown, or None when the rows it needs are absent.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd

from baselines import AR
from eval.report.analysis import display_name
from eval.report.markdown import markdown_table
from eval.report.speed import _order, _targets, _title, tree_label


def first_divergence(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """Index of the first differing token (or the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


AGREE_KEY = ["model", "target_sha", "prompt_format", "device", "dtype", "max_new_tokens", "dataset", "item_id", "turn",
             "seed"]
AGREE_GROUP = AGREE_KEY[:6]  # one table per (model, target, prompt format, device, dtype, length)


def agreement_table(df: pd.DataFrame) -> Optional[str]:
    """T=0: each method's output vs our AR's on the same (item, turn, seed), per model x device/dtype.

    The reference of a row is the AR row timed next to it (``paired_with``), else any AR row
    of the same key (greedy AR is deterministic). A second turn is compared only when the
    first turns were identical: otherwise the two second-turn prompts differ.
    """
    if df.empty or "output_tokens" not in df:
        return None
    df = _targets(df)
    greedy = df[(df["temperature"] == 0) & df["output_tokens"].notna()]
    ar = greedy[greedy["method"] == AR.name]
    spec = greedy[greedy["method"] != AR.name]
    if ar.empty or spec.empty:
        return None
    by_pair = {(r.paired_with, *[getattr(r, k) for k in AGREE_KEY]): list(r.output_tokens)
               for r in ar.itertuples() if isinstance(r.paired_with, str)}
    by_key = {}
    for r in ar.itertuples():
        by_key.setdefault(tuple(getattr(r, k) for k in AGREE_KEY), list(r.output_tokens))
    records = []
    for r in spec.itertuples():
        key = tuple(getattr(r, k) for k in AGREE_KEY)
        ref = by_pair.get((r.config_hash, *key), by_key.get(key))
        if ref is None:
            continue
        div = first_divergence(ref, r.output_tokens)
        records.append({**dict(zip(AGREE_KEY, key)), "variant": r.variant, "tree": tree_label(r._asdict()),
                        "ref_len": len(ref), "agree": len(ref) if div is None else div, "identical": div is None})
    if not records:
        return None
    rec = pd.DataFrame(records)
    first_ok = {tuple(x) for x in rec[(rec["turn"] == 0) & rec["identical"]][
        ["variant", "tree"] + AGREE_KEY[:-2] + ["seed"]].itertuples(index=False)}
    later = rec["turn"] > 0
    keep = ~later | pd.Series([tuple(x) in first_ok for x in rec[["variant", "tree"] + AGREE_KEY[:-2] + ["seed"]]
                               .itertuples(index=False)], index=rec.index)
    rec = rec[keep]
    blocks = []
    for key, rows in rec.groupby(AGREE_GROUP, sort=True):
        body = []
        for (variant, tree), part in sorted(rows.groupby(["variant", "tree"]), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
            diverged = part[~part["identical"]]["agree"]
            body.append([display_name(variant), tree, str(len(part)), f"{int(part['identical'].sum())}/{len(part)}",
                         f"{part['agree'].sum() / max(1, part['ref_len'].sum()):.3f}",
                         "-" if diverged.empty else f"{int(diverged.min())} / {float(diverged.median()):g}"])
        header = ["method", "tree", "outputs", "identical to AR", "agreement", "first divergence (min / median)"]
        title = _title({**dict(zip(AGREE_GROUP, key)),
                        "temperature": 0.0})
        blocks.append(f"### {title}\n\n" + markdown_table(header, body))
    return ("## Greedy output vs our AR (T=0)\n\nagreement = Σ tokens before the first divergence / Σ AR "
            "tokens. fp32: an identity check (every output should be identical). bf16: a tree scored in one "
            "batch rounds differently from one-token steps, so a near-tie can flip the argmax and the outputs "
            "part from there (lossless in distribution, not token-identical); this is the agreement rate. A "
            "second turn counts only when the first turns were identical (else its prompt differs).\n\n"
            + "\n\n".join(blocks) + "\n")
