"""Learning curve of a draft-head run: held-out top-1 per unrolled step vs training tokens seen.

    python scripts/plot_learning_curve.py --metrics .cache/train_head/metrics.jsonl \\
        --out rheo/assets/eagle3_smollm2_135m/learning_curve.png

Several ``--metrics`` files are stages of one head (a run warm-started from the previous
one's output): each stage's tokens are counted after the previous stage's last record, and a
dashed line marks where a stage starts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from eval.report.plots import palette_png  # noqa: E402
from rheo.cli import ArgumentParser, run_main
from rheo.io import atomic_write_bytes
from rheo.paths import folder


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics", nargs="+", default=[str(folder("cache", "train_head", "metrics.jsonl"))],
                    help="one metrics.jsonl per training stage, in order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bar", type=float, default=None, help="draw a goal for step-1 top-1 (e.g. 0.65)")
    ap.add_argument("--title", default="SmolLM2-135M EAGLE-3 head: held-out top-1 accuracy")
    args = ap.parse_args()
    recs, starts, offset = [], [], 0
    for path in args.metrics:
        lines = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
        if not lines:
            raise SystemExit(f"{path} holds no evaluation yet")
        by_tokens = {}
        for rec in lines:  # a resumed run repeats a checkpoint: keep the last record per position
            by_tokens[rec["tokens_seen"]] = rec
        stage = [dict(by_tokens[k], tokens_seen=k + offset) for k in sorted(by_tokens)]
        if recs and stage[0]["tokens_seen"] == recs[-1]["tokens_seen"]:
            recs.pop()  # the next stage's step-0 evaluation replaces the previous stage's last point
        starts.append(offset)
        recs += stage
        offset = stage[-1]["tokens_seen"]
    x = [r["tokens_seen"] / 1e6 for r in recs]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for step in range(len(recs[0]["held_out_top1"])):
        ax.plot(x, [r["held_out_top1"][step] for r in recs], marker="o", ms=3, label=f"unrolled step {step + 1}")
    if args.bar is not None:
        ax.axhline(args.bar, color="black", ls=":", lw=1, label=f"goal, step 1 ({args.bar:g})")
    for x0 in starts[1:]:
        ax.axvline(x0 / 1e6, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("training tokens seen (millions)")
    ax.set_ylabel("held-out top-1 (head argmax == target argmax)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    atomic_write_bytes(Path(args.out), palette_png(fig, dpi=120))
    print(f"wrote {args.out} ({len(recs)} points)")


if __name__ == "__main__":
    run_main(main)
