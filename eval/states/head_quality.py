"""Rheo m=1's gain over Top-K on shared states against draft quality (each head's held-out top-1).

    python -m eval.states.head_quality ROWS [ROWS ...] --top1 HEADS_TOP1.jsonl [--out FILE.md]
                                [--figure FILE.png]

ROWS: same-state folders or archives (measure=same_state) holding Top-K and Rheo m=1 for one or
more heads. HEADS_TOP1: one JSON line per head as ``scripts/train_draft.py --eval-only`` prints
it (``head``, ``head_sha``, ``held_out_top1`` per unrolled step), all measured on the same
held-out sequences. A row's head is matched by ``head_sha`` (the weights' fingerprint).

One point per (head, temperature): the pooled paired difference Rheo m=1 - Top-K, a 95%
interval over keys clustered by item (eval.states.stats), at x = the head's step-1 top-1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from eval.report.markdown import markdown_table
from eval.states.labels import BASELINE_METHOD, rheostat_rows
from eval.states.outputs import OutputPlan, joined_rows
from eval.states.stats import POOLED, paired_differences
from eval.store.committed import CommittedOutputsError
from rheo.cli import ArgumentParser, one_line, path_arg, run_main
from rheo.paths import own_or_committed

PROG = "python -m eval.states.head_quality"
COLUMNS = ["head", "head_sha", "top1", "temperature", "keys", "topk", "rheo_m1", "diff", "half_width"]


def read_top1(path: Path) -> pd.DataFrame:
    """[head, head_sha, top1] from the --eval-only lines of ``path`` (step-1 top-1; yours under the output
    root, else the committed one)."""
    heads = []
    path = own_or_committed(path)
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            heads.append(dict(head=Path(rec["head"]).name, head_sha=rec["head_sha"], top1=rec["held_out_top1"][0]))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a train_draft.py --eval-only line ({e})") from None
    if not heads:
        raise ValueError(f"{path} holds no head")
    return pd.DataFrame(heads)


def gain_table(rows: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """One row per (head, temperature) that has both Top-K and Rheo m=1 rows (COLUMNS)."""
    rheo_m1 = rheostat_rows(rows)
    both = pd.concat([rows[rows["method"] == BASELINE_METHOD], rheo_m1[rheo_m1["m"] == 1]])
    both = both[both["head_sha"].isin(set(heads["head_sha"]))]
    out = []
    for _, head in heads.iterrows():
        mine = both[both["head_sha"] == head["head_sha"]]
        if mine.empty:
            continue
        stats = paired_differences(mine)
        pooled = stats[stats["suite"] == POOLED]
        for temp, part in pooled.groupby("temperature"):
            top, rheo = part[part["diff"].isna()], part[part["diff"].notna()]
            if top.empty or rheo.empty:
                continue
            r = rheo.iloc[0]
            out.append(dict(head=head["head"], head_sha=head["head_sha"], top1=float(head["top1"]),
                            temperature=float(temp), keys=int(r["diff_keys"]), topk=float(top["mean"].iloc[0]),
                            rheo_m1=float(r["mean"]), diff=float(r["diff"]), half_width=float(r["half_width"])))
    return pd.DataFrame(out, columns=COLUMNS).sort_values(["temperature", "top1"]).reset_index(drop=True)


def markdown(table: pd.DataFrame) -> str:
    lines = ["## Rheo m=1 - Top-K on shared states vs the draft head's held-out top-1", "",
             "Pooled over suites; ± = 95% half-width over keys, clustered by item (a key's states averaged first). "
             "top-1: step-1 held-out top-1 of each head on the same held-out sequences "
             "(`make heads-top1`).", "",
             markdown_table(["head", "top-1", "T", "keys", "Top-K", "Rheo m=1", "m=1 − Top-K"],
                            [[r.head, f"{r.top1:.3f}", f"{r.temperature:g}", r.keys, f"{r.topk:.3f}",
                              f"{r.rheo_m1:.3f}", f"{r.diff:+.3f} ± {r.half_width:.3f}"] for r in table.itertuples()])]
    return "\n".join(lines) + "\n"


def figure_png(table: pd.DataFrame) -> bytes:
    from eval.states.style import plt, png

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for temp, part in table.groupby("temperature"):
        ax.errorbar(part["top1"], part["diff"], yerr=part["half_width"], marker="o", capsize=3, label=f"T = {temp:g}")
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xlabel("draft head held-out top-1 (step 1)")
    ax.set_ylabel("Rheo m=1 − Top-K\n(expected emitted tokens per state)")
    ax.legend(frameon=False)
    return png(fig)


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=path_arg, nargs="+", help="same-state folders or archives")
    ap.add_argument("--top1", type=path_arg, required=True, help="train_draft.py --eval-only lines, one per head")
    ap.add_argument("--out", type=path_arg, help="write the markdown here instead of printing it")
    ap.add_argument("--figure", type=path_arg, help="draw the gain against top-1 here (PNG)")
    args = ap.parse_args(argv)
    try:
        table = gain_table(joined_rows(args.rows[0], args.rows[1:]), read_top1(args.top1))
        if table.empty:
            raise ValueError("no head of --top1 has Top-K and Rheo m=1 rows in the given results")
        text = markdown(table)
        plan = OutputPlan()
        if args.out:
            plan.add(Path(args.out), text.encode())
        else:
            print(text, end="")
        if args.figure:
            plan.add(Path(args.figure), figure_png(table))
        plan.write(args.rows[0])
    except (OSError, ValueError, CommittedOutputsError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run_main(main, prog=PROG)
