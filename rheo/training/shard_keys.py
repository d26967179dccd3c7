"""Keys of the draft corpus's generation shards and their features (rheo.resume_key).

``scripts/gen_corpus.py`` and ``scripts/gen_selfinstruct.py`` write one shard per batch, each holding its
key; a rerun skips a shard only when its stored key is the one it would write, and counts toward
``--target-tokens`` only shards of its own settings. ``scripts/backfill_features.py`` keys a shard's
features (``<shard>.feats.npz``, array ``key``) by :func:`features_key`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List

import torch

from rheo.resume_key import digest
from rheo.training.corpus import read_shard

__all__ = ["counted", "features_key", "run_settings", "shard_key", "stored_key"]


def run_settings(args, **extra) -> dict:
    """What decides every shard of a run besides its batch (rheo.resume_key): the model, its precision and
    device kind, the seed (the prompts' plan and the generation seeds), the batch size and the length."""
    return {"model": "smollm2_135m", "dtype": args.dtype, "device": torch.device(args.device).type, "seed": args.seed,
            "batch": args.batch, "max_new_tokens": args.max_new_tokens, **extra}


def shard_key(run: dict, name: str, k: int, batch: List[Dict]) -> dict:
    """The key of batch ``k`` of pass ``name``: the run's settings and the batch's conversations (their
    messages or text, temperature and name: what the pass planned from the prompts and earlier passes)."""
    inputs = [[c.get("messages", c.get("text")), c["temperature"], c["key"]] for c in batch]
    return {"run": run, "pass": name, "batch": k, "inputs": digest(inputs)}


def features_key(samples: List[Dict], dtype: str, layers) -> str:
    """What decides a shard's features (``<shard>.feats.npz``, stored in it as ``key``): its sequences, the
    model, its precision and the feature layers (scripts/backfill_features.py checks it)."""
    return digest({"sequences": [list(s["prompt"]) + list(s["response"]) for s in samples], "model": "smollm2_135m",
                   "dtype": str(dtype), "layers": [int(i) for i in layers]})


def stored_key(path: Path) -> dict | None:
    """The key a shard was written with (None: missing, unreadable, being written, or written without one)."""
    try:
        return read_shard(path).get("key") if path.exists() else None
    except (ValueError, KeyError, OSError):
        return None


def counted(paths: Iterable[Path], run: dict, expected: Dict[str, dict] | None = None) -> List[Path]:
    """The shards of ``paths`` written by a run of the settings ``run`` (and, for a file named in
    ``expected``, under exactly that key: a stale shard of the pass running now does not count)."""
    out = []
    for path in paths:
        key = stored_key(path) or {}
        if key.get("run") == run and (expected is None or expected.get(path.name, key) == key):
            out.append(path)
    return out
