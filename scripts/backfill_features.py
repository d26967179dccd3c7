"""Features for generation shards that were written without them (``<shard>.feats.npz``).

``scripts/gen_corpus.py`` keeps the target features it computes while generating; shards
from a run with ``--no-features`` (or from before that existed) get them here, from one
teacher-forced bf16 forward per group of sequences. Resumable: a shard is done once its
``.feats.npz`` exists.

    python scripts/backfill_features.py --shards .cache/draft_corpus/shards
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from tqdm import tqdm

from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.io import atomic_write
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.paths import folder
from rheo.training.corpus import read_shard, shard_files
from rheo.training.features import forward_features, length_batches


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default=str(folder("cache", "draft_corpus", "shards")))
    ap.add_argument("--max-tokens", type=positive_int, default=8192)
    ap.add_argument("--threads", type=positive_int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_smollm2(dtype=torch.bfloat16)
    layers = eagle3_feature_layers(model.config.num_hidden_layers)
    todo = [f for f in shard_files(args.shards) if not f.with_name(f"{f.stem}.feats.npz").exists()]
    for f in tqdm(todo, desc="backfill shards"):
        seqs = [np.array(s["prompt"] + s["response"]) for s in read_shard(f)["samples"]]
        lengths = np.array([len(q) for q in seqs])
        rows = [None] * len(seqs)
        for batch in length_batches(lengths, list(np.argsort(-lengths)), args.max_tokens):
            for i, r in zip(batch, forward_features(model, [seqs[i] for i in batch], layers)):
                rows[i] = r
        out = {k: np.concatenate([r[k] for r in rows]) for k in ("feats", "final", "argmax")}
        atomic_write(f.with_name(f"{f.stem}.feats.npz"), lambda fh: np.savez(fh, **out))


if __name__ == "__main__":
    run_main(main)
