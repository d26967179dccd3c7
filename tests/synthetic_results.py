"""A small synthetic results directory (fake numbers, real layout) for the table and figure tests.

The rows are made up: they exercise the tables and figures without
running a model. ``model`` is "synthetic" so they can never be mistaken for a
measurement.
"""

from __future__ import annotations

import random
from pathlib import Path

from baselines import AR
from eval.store import storage
from eval.store.keys import config_hash, method_key
from rheo.config import PAPER_TREE, SpecConfig
from rheo.methods import get_method, reads

TREE = dict(PAPER_TREE)
#: made-up mean tau of each tree method (Rheo m=1 a little higher); references emit one token a call
FAKE_TAU = {"topk": 3.0, "rheo": 3.1}


def write_synthetic_results(root: Path | str, suites=("gsm8k", "mt_bench"), n_items: int = 4,
                            seeds=(0, 1), temperatures=(0.0, 0.5, 1.0), ms=(0, 1, 2, 3),
                            seed: int = 0) -> Path:
    root = Path(root)
    storage.prepare_output_dir(root)
    rnd = random.Random(seed)
    for t in temperatures:
        specs = ([SpecConfig(method=AR.name, temperature=t), SpecConfig(method="topk", temperature=t, **TREE)]
                 + [SpecConfig(method="rheo", m=m, temperature=t, **TREE) for m in ms])
        for s in seeds:
            for spec in specs:
                key = method_key(spec, model="synthetic", device="cpu", dtype="float32", seed=s, max_new_tokens=64)
                chash = config_hash(key)
                cdir = storage.prepare_config_dir(root, "synthetic", chash, key)
                for suite in suites:
                    for item in range(n_items):
                        for turn in range(2 if suite == "mt_bench" else 1):
                            row = _row(rnd, spec, key, chash, suite, item, turn)
                            storage.write_row(storage.shard_path(cdir, suite, item, turn), row)
    return root


def _row(rnd: random.Random, spec: SpecConfig, key: dict, chash: str, suite: str, item: int, turn: int) -> dict:
    reference = get_method(spec.method).is_reference
    base = 1.0 if reference else FAKE_TAU[spec.method] + 0.1 * (reads(spec.method, "m") and spec.m == 1)
    new_tokens = 64
    calls = new_tokens if reference else max(1, round(new_tokens / (base + rnd.uniform(-0.3, 0.3))))
    accept = [new_tokens // calls + (i < new_tokens % calls) for i in range(calls)]
    wall = calls * 0.01 * (1.0 if reference else 1.3) * rnd.uniform(0.95, 1.05)
    row = storage.key_row(key)
    row.update(device=key["device"], dtype=key["dtype"], dataset=suite, item_id=item, turn=turn,
               category="synthetic", gen_seed=0, prompt_tokens=20,
               new_tokens=new_tokens, target_calls=calls, tau=new_tokens / calls, accept_lengths=accept,
               wall_s=wall, tokens_per_s=new_tokens / wall, output_tokens=list(range(new_tokens)),
               torch_version="synthetic", transformers_version="synthetic", rheo_version="synthetic",
               git_sha="synthetic", config_hash=chash, status="ok", error=None, finished_at="synthetic")
    return row
