"""Train the EAGLE-3 draft head of SmolLM2-135M-Instruct on the committed corpus.

Pipeline (each stage resumable; nothing here reads the benchmarks):

1. the corpus: ``data/draft_corpus/`` (token ids; ``scripts/gen_corpus.py`` + ``pack_corpus.py``);
2. target features (``rheo.training.features``), cached under ``--features`` (outside git);
3. the draft vocabulary: the ``--draft-vocab`` most frequent response tokens of the training
   split; its coverage of the target's argmax on held-out responses is printed;
4. training: EAGLE-3 training-time test unrolled ``--steps-unrolled`` steps, loss against the
   target's own next-token distribution over the draft vocabulary, AdamW + cosine schedule
   planned over ``--epochs`` (fractional allowed). A full checkpoint (head, optimiser,
   scheduler, data position) is written every ``--ckpt-minutes``; ``--resume`` continues
   bit-exactly in data order. Held-out top-1 per unrolled step vs tokens seen is logged to
   ``<run-dir>/metrics.jsonl``; the head is exported (fp16, official layout) to ``--out``.

    python scripts/train_draft.py --run-dir .cache/train_head --out .cache/head_new --epochs 1

``--device cuda`` runs feature extraction and training on a GPU (the same code: tensors are
built on the host and moved; bf16 autocast on either device). ``--resume`` is bit-exact on
CPU; on CUDA it continues from the same data position, with CUDA's own kernel nondeterminism.
The loop itself is ``rheo.training.loop``; this script parses and checks the command line.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rheo.cli import ArgumentParser, non_negative_float, non_negative_int, positive_float, positive_int, run_main
from rheo.paths import folder
from rheo.training.corpus import DEFAULT_DIR
from rheo.training.loop import train


def check_inputs(args) -> None:
    """Everything that can be checked before the corpus, the model or the features are touched."""
    run_dir, state = Path(args.run_dir), Path(args.run_dir) / "state.pt"
    if args.threads > (os.cpu_count() or 1):
        raise SystemExit(f"--threads {args.threads}: this machine has {os.cpu_count()} cores; choose "
                         f"--threads <= {os.cpu_count()}")
    for flag, head in (("--eval-only", args.eval_only), ("--warm-start", args.warm_start)):
        if head and not ((Path(head) / "config.json").is_file() and (Path(head) / "model.safetensors").is_file()):
            raise SystemExit(f"{flag} {head}: no EAGLE-3 head there (config.json and model.safetensors): "
                             f"give a head folder, e.g. rheo/assets/eagle3_smollm2_135m")
    if args.keep_draft_vocab and not args.warm_start:
        raise SystemExit("--keep-draft-vocab keeps the --warm-start head's draft vocabulary: give --warm-start HEAD_DIR")
    if args.eval_only or args.features_only:
        return
    if args.resume and not state.is_file():
        raise SystemExit(f"--resume: no checkpoint {state}: check --run-dir, or drop --resume to start afresh")
    if not args.resume and (state.is_file() or (run_dir / "metrics.jsonl").is_file()):
        raise SystemExit(f"--run-dir {run_dir} holds an earlier run (state.pt / metrics.jsonl): pass --resume "
                         f"to continue it, or delete it or choose another --run-dir to start afresh")


def parse_args(argv=None) -> argparse.Namespace:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_DIR),
                    help="a corpus folder, or several comma-separated (e.g. data/draft_corpus,data/draft_corpus/selfinstruct)")
    ap.add_argument("--features", default=str(folder("cache", "draft_features")))
    ap.add_argument("--run-dir", default=str(folder("cache", "train_head")))
    ap.add_argument("--out", default=str(folder("cache", "train_head", "head")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-vocab", type=positive_int, default=8192)
    ap.add_argument("--steps-unrolled", type=positive_int, default=3)
    ap.add_argument("--epochs", type=positive_float, default=1.0)
    ap.add_argument("--max-tokens", type=positive_int, default=4096, help="padded tokens per batch")
    ap.add_argument("--lr", type=positive_float, default=5e-4)
    ap.add_argument("--warmup", type=positive_int, default=50)
    ap.add_argument("--step-decay", type=positive_float, default=0.8)
    ap.add_argument("--eval-every", type=positive_int, default=200)
    ap.add_argument("--eval-sequences", type=positive_int, default=120)
    ap.add_argument("--ckpt-minutes", type=positive_float, default=10.0)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]: where features are computed and the head trains")
    ap.add_argument("--warm-start", default="", help="head dir to copy fc/midlayer from")
    ap.add_argument("--train-lm-head", action="store_true",
                    help="train the head's output rows too (they start as the target's draft-vocabulary rows)")
    ap.add_argument("--keep-draft-vocab", action="store_true",
                    help="keep the --warm-start head's draft vocabulary (instead of choosing it on this corpus), "
                         "so that with --train-lm-head its trained output rows carry over")
    ap.add_argument("--lm-head-lr-mult", type=positive_float, default=0.1, help="lr of the output rows / --lr")
    ap.add_argument("--resume", action="store_true", help="continue from <run-dir>/state.pt")
    ap.add_argument("--features-only", action="store_true")
    ap.add_argument("--eval-only", default="", metavar="HEAD_DIR",
                    help="only measure this saved head's held-out top-1 on --eval-sequences held-out sequences "
                         "(with its own draft vocabulary), print it as JSON and exit; nothing is trained or written")
    ap.add_argument("--first-sequences", type=non_negative_int, default=0,
                    help="train and evaluate on the corpus's first N sequences only (0 = all)")
    ap.add_argument("--shard-features", default=str(folder("cache", "draft_corpus", "shards")),
                    help="generation shards whose kept features are imported instead of recomputed")
    ap.add_argument("--max-steps", type=non_negative_int, default=0, help="stop after this many steps (a smoke test)")
    ap.add_argument("--minutes", type=non_negative_float, default=0.0,
                    help="wall budget: after 25 steps the cosine schedule is shortened to fit it (saved for --resume)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    check_inputs(args)
    train(args)


if __name__ == "__main__":
    run_main(main)
