"""Benchmark the non-model work of one decoding cycle: Top-K vs Rheo, side by side.

Times candidate selection + tree build + pruning + mask (``build_tree``) and
verification (``verify_tree``) with the models replaced by precomputed logits, so
only the core's own work is measured. The paper tree (rheo.config.PAPER_TREE);
draft vocabulary 32k mapped into a 128k target vocabulary (EAGLE-3 / Llama-3).

    python scripts/bench_core.py [--cycles 60] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.config import PAPER_TREE, SpecConfig
from rheo.methods import get_method
from rheo.random import TorchRandom


class BankDrafter:
    """Returns fixed random draft logits (the same context-free row everywhere): no model cost."""

    def __init__(self, draft_vocab: int, bank: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.bank = torch.randn(bank, draft_vocab, generator=g) * 3.0  # [B, Vd] peaky like a real head
        self.bank_size = bank

    def draft(self, view, frontier: torch.Tensor) -> torch.Tensor:
        return self.bank[:1].expand(frontier.shape[0], -1)  # [f, Vd], a view: no copy


def target_logits_for(built, drafter: BankDrafter, d2t: torch.Tensor, vocab: int, g) -> torch.Tensor:
    """A target that mostly agrees with the drafter: [n, V]."""
    n = built.tree.num_nodes
    logits = torch.randn(n, vocab, generator=g) - 4.0
    rows = drafter.bank[:1].expand(n, -1)  # [n, Vd]: the drafter is a fair guess of the target
    logits[:, d2t] = rows + 0.5 * torch.randn(rows.shape, generator=g)
    return logits


def run(cfg: SpecConfig, cycles: int, drafter, d2t, vocab, seed: int) -> dict:
    rng = TorchRandom(torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed + 1)
    method = get_method(cfg.method)
    build_ms, verify_ms, accepted = [], [], []
    for cycle in range(cycles + 3):
        t0 = time.perf_counter()
        built = method.build_tree(drafter.draft, 0, cfg, rng, d2t)
        t1 = time.perf_counter()
        logits = target_logits_for(built, drafter, d2t, vocab, g)  # the "target call": not timed
        t2 = time.perf_counter()
        result = method.verify_tree(built, logits, cfg, rng)
        t3 = time.perf_counter()
        if cycle >= 3:  # warm-up
            build_ms.append((t1 - t0) * 1e3)
            verify_ms.append((t3 - t2) * 1e3)
            accepted.append(len(result.tokens))
    return dict(build=statistics.median(build_ms), verify=statistics.median(verify_ms),
                total=statistics.median([a + b for a, b in zip(build_ms, verify_ms)]),
                tau=statistics.mean(accepted))


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=positive_int, default=60)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--draft-vocab", type=positive_int, default=32_000)
    ap.add_argument("--target-vocab", type=positive_int, default=128_256)
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d2t = torch.randperm(args.target_vocab, generator=torch.Generator().manual_seed(0))[: args.draft_vocab].sort().values
    drafter = BankDrafter(args.draft_vocab, bank=97, seed=1)
    base = dict(PAPER_TREE, temperature=args.temperature)
    methods = {"topk": SpecConfig(method="topk", **base), "rheo m=1": SpecConfig(method="rheo", m=1, **base)}
    tree = " ".join(f"{k}={v}" for k, v in PAPER_TREE.items())
    print(f"core time per cycle (median of {args.cycles}), {tree}, "
          f"draft vocab {args.draft_vocab}, target vocab {args.target_vocab}, T={args.temperature}, "
          f"{args.threads} threads, torch {torch.__version__}")
    print(f"{'method':<10} {'build+prune+mask ms':>20} {'verify ms':>10} {'total ms':>9} {'emitted/cycle':>14}")
    results = {}
    for round_ in range(4):  # interleave to share machine noise
        for name, cfg in methods.items():
            results.setdefault(name, []).append(run(cfg, max(1, args.cycles // 4), drafter, d2t, args.target_vocab, 7 + round_))
    for name, rs in results.items():
        r = {key: statistics.mean(x[key] for x in rs) for key in rs[0]}
        results[name] = r
        print(f"{name:<10} {r['build']:>20.3f} {r['verify']:>10.3f} {r['total']:>9.3f} {r['tau']:>14.2f}")
    ratio = results["rheo m=1"]["total"] / results["topk"]["total"]
    print(f"ratio rheo/topk (total core time): {ratio:.3f}")
    rows = drafter.bank[:10]
    t0 = time.perf_counter()
    for _ in range(20):
        for _layer in range(8):
            torch.topk(rows, 128, dim=-1)
    topk_ms = (time.perf_counter() - t0) / 20 * 1e3
    print(f"of which the sparse top-128 truncation alone (8 layers x torch.topk on [10, {args.draft_vocab}]): "
          f"{topk_ms:.3f} ms")


if __name__ == "__main__":
    run_main(main)
