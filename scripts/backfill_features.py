"""Features for generation shards that were written without them (``<shard>.feats.npz``).

``scripts/gen_corpus.py`` keeps the target features it computes while generating; shards
from a run with ``--no-features`` (or from before that existed) get them here, from one
teacher-forced bf16 forward per group of sequences. Resumable: a shard is done once its
``.feats.npz`` holds the key of its sequences, the model, the precision and the feature layers
(rheo.training.shard_keys.features_key); features of other sequences (a shard generated again) or written without
a key are computed again.

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
from rheo.training.shard_keys import features_key


DTYPE = "bfloat16"


def key_of(shard, layers) -> str:
    """The features key (rheo.training.shard_keys.features_key) the shard's features must hold to be done."""
    return features_key(read_shard(shard)["samples"], DTYPE, layers)


def stored_key(npz) -> str | None:
    """The key a features file was written with (None: missing, unreadable, or written without one)."""
    try:
        with np.load(npz) as z:
            return str(z["key"]) if "key" in z.files else None
    except (OSError, ValueError, EOFError):
        return None


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default=str(folder("cache", "draft_corpus", "shards")))
    ap.add_argument("--max-tokens", type=positive_int, default=8192)
    ap.add_argument("--threads", type=positive_int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_smollm2(dtype=getattr(torch, DTYPE))
    layers = eagle3_feature_layers(model.config.num_hidden_layers)
    todo = [f for f in shard_files(args.shards) if stored_key(f.with_name(f"{f.stem}.feats.npz")) != key_of(f, layers)]
    for f in tqdm(todo, desc="backfill shards"):
        seqs = [np.array(s["prompt"] + s["response"]) for s in read_shard(f)["samples"]]
        lengths = np.array([len(q) for q in seqs])
        rows = [None] * len(seqs)
        for batch in length_batches(lengths, list(np.argsort(-lengths)), args.max_tokens):
            for i, r in zip(batch, forward_features(model, [seqs[i] for i in batch], layers)):
                rows[i] = r
        out = {k: np.concatenate([r[k] for r in rows]) for k in ("feats", "final", "argmax")}
        out["key"] = np.array(key_of(f, layers))
        atomic_write(f.with_name(f"{f.stem}.feats.npz"), lambda fh: np.savez(fh, **out))


if __name__ == "__main__":
    run_main(main)
