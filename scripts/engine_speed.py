"""Tokens per second of the embedded pair under ``engine=eager`` and ``engine=graphs``, side by side.

One process, one torch thread, float32: each method decodes the same chat prompt under both engines,
warmed up first (the first ``graphs`` generation compiles its graphs: Inductor on a CPU, minutes),
then ``--repeats`` timed rounds interleaved (eager, graphs, graphs, eager, ...). Prints the median
tokens/s of each, their ratio, and whether the two engines emitted the same tokens (greedy: they
must; at T > 0 on a CPU the same seed gives the same tokens too). The ratio is of this machine
only: a CPU runs the embedded pair's forward compute-bound, so it says little of a GPU, where the
compiled cycle removes the per-op launch cost (docs/gpu.md, "Engines").

    .venv/bin/python scripts/engine_speed.py --new-tokens 32 --repeats 3
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.config import SpecConfig

#: (label, method, temperature) of the rows printed
CASES = (("AR", "ar", 0.0), ("Top-K", "topk", 0.0), ("Rheo m=1", "rheo", 1.0))
TREE = {"k": 6, "depth": 5, "tree_size": 24}  # a small tree, so that the compiles stay few and short
PROMPT = "Name three prime numbers and say why each is prime."


def decode(pair, prompt, method: str, temperature: float, engine: str, new_tokens: int) -> list[int]:
    from baselines.autoregressive import autoregressive_generate  # (registers the reference methods)
    from rheo.decode import speculative_generate
    from rheo.engine import engine_target
    from rheo.methods import get_method

    if get_method(method).is_reference:  # AR: the target alone, under the engine
        return list(autoregressive_generate(engine_target(pair.target, engine), prompt, new_tokens, 0.0).tokens)
    cfg = SpecConfig.for_method(method=method, temperature=temperature, engine=engine, **TREE)
    out = speculative_generate(pair.target, pair.drafter, prompt, new_tokens, cfg,
                               generator=torch.Generator().manual_seed(0))
    return list(out.tokens)


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=positive_int, default=32, help="tokens per generation")
    ap.add_argument("--repeats", type=positive_int, default=3, help="timed rounds per engine (after one warm-up)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from rheo.models import load_model_pair

    pair = load_model_pair("smollm2_135m", dtype=torch.float32)
    prompt = pair.format_chat([{"role": "user", "content": PROMPT}])
    print(f"embedded pair, float32, 1 thread, {args.new_tokens} new tokens, tree {TREE}, {args.repeats} rounds",
          flush=True)
    for label, method, temperature in CASES:
        tokens, times = {}, {"eager": [], "graphs": []}
        for engine in ("eager", "graphs"):
            start = time.perf_counter()
            tokens[engine] = decode(pair, prompt, method, temperature, engine, args.new_tokens)
            print(f"  {label} {engine}: warm-up {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        for r in range(args.repeats):
            for engine in (("eager", "graphs") if r % 2 == 0 else ("graphs", "eager")):
                start = time.perf_counter()
                decode(pair, prompt, method, temperature, engine, args.new_tokens)
                times[engine].append(time.perf_counter() - start)
        rate = {e: len(tokens[e]) / statistics.median(t) for e, t in times.items()}
        print(f"{label} T={temperature:g}: eager {rate['eager']:.2f} tok/s, graphs {rate['graphs']:.2f} tok/s, "
              f"graphs/eager {rate['graphs'] / rate['eager']:.2f}x, same tokens: {tokens['eager'] == tokens['graphs']}",
              flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
