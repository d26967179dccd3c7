"""A small synthetic results directory (fake numbers, real layout) for tests and demos.

The rows are made up: they exercise the tables, figures and notebook without
running a model. ``model`` is "synthetic" so they can never be mistaken for a
measurement.
"""

from __future__ import annotations

import random
from pathlib import Path

from eval import storage
from eval.keys import config_hash

TREE = {"k": 10, "depth": 8, "tree_size": 60, "sparse_top": 128}


def write_synthetic_results(root: Path | str, suites=("gsm8k", "mt_bench"), n_items: int = 4,
                            seeds=(0, 1), temperatures=(0.0, 0.5, 1.0), ms=(0, 1, 2, 3),
                            seed: int = 0) -> Path:
    root = Path(root)
    storage.prepare_output_dir(root)
    rnd = random.Random(seed)
    variants = [("ar", None), ("topk", None)] + [("rheo", m) for m in ms]
    for t in temperatures:
        for s in seeds:
            for method, m in variants:
                key = _key(method, m, t, s)
                chash = config_hash(key)
                cdir = storage.prepare_config_dir(root, "synthetic", chash, key)
                for suite in suites:
                    for item in range(n_items):
                        for turn in range(2 if suite == "mt_bench" else 1):
                            row = _row(rnd, key, chash, suite, item, turn)
                            storage.write_row(storage.shard_path(cdir, suite, item, turn), row)
    return root


def _key(method: str, m, t: float, s: int) -> dict:
    tree = TREE if method != "ar" else dict.fromkeys(TREE)
    return {"model": "synthetic", "target_path": None, "head_path": None, "device": "cpu", "dtype": "float32",
            "method": method, "temperature": t, "seed": s, "max_new_tokens": 64, **tree, "m": m,
            "verify_order": "stochastic_first" if method == "rheo" else None,
            "proxy": "rheo" if method == "rheo" else None, "paired_with": None}


def _row(rnd: random.Random, key: dict, chash: str, suite: str, item: int, turn: int) -> dict:
    base = {"ar": 1.0, "topk": 3.0, "rheo": 3.1 + 0.1 * (key["m"] == 1)}[key["method"]]
    new_tokens = 64
    calls = new_tokens if key["method"] == "ar" else max(1, round(new_tokens / (base + rnd.uniform(-0.3, 0.3))))
    accept = [new_tokens // calls + (i < new_tokens % calls) for i in range(calls)]
    wall = calls * 0.01 * (1.0 if key["method"] == "ar" else 1.3) * rnd.uniform(0.95, 1.05)
    row = {c: None for c in storage.COLUMNS}
    row.update({k: key[k] for k in ("model", "target_path", "head_path", "method", "m", "temperature", "seed", "max_new_tokens", "k",
                                    "depth", "tree_size", "sparse_top", "verify_order", "proxy", "device",
                                    "dtype", "paired_with")})
    row.update(dataset=suite, item_id=item, turn=turn, category="synthetic", gen_seed=0, prompt_tokens=20,
               new_tokens=new_tokens, target_calls=calls, tau=new_tokens / calls, accept_lengths=accept,
               wall_s=wall, tokens_per_s=new_tokens / wall, output_tokens=list(range(new_tokens)),
               torch_version="synthetic", transformers_version="synthetic", rheo_version="synthetic",
               git_sha="synthetic", config_hash=chash, status="ok", error=None, finished_at="synthetic")
    return row
