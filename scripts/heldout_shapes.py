"""Choose Rheo-Seq's shapes on held-out prompts (never on the benchmark suites, which are the test set).

    python scripts/heldout_shapes.py [--prompts 4] [--new-tokens 8] [--temperature 1.0] [--out FILE.md]

The first ``--prompts`` held-out sequences of the self-instructed draft corpus (prompts no benchmark
holds; eval.measure.head_reading reads the same ones), the embedded pair in float32, one thread: at
every state of a Top-K driver, each candidate shape and the published combinations it must beat score
their own tree (rheo.same_state), and the mean exact E[tau] over prompts (states averaged first) is
printed per configuration.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import torch

from rheo.cli import ArgumentParser, positive_float, positive_int, run_main
from rheo.config import SpecConfig

CANDIDATES = [
    dict(method="rheo", m=1, tree_size=8), dict(method="chain", depth=8, verifier="traversal"),
    dict(method="rheo_seq", branching=(2, 1, 1, 1)), dict(method="rheo_seq", branching=(1, 1, 1, 1, 1, 1, 1, 1)),
    dict(method="rheo", m=1, tree_size=24), dict(method="rheo_seq", branching=(3, 1, 1, 1, 1, 1, 1, 1)),
    dict(method="rheo_seq", branching=(2, 2, 1, 1, 1, 1)),
    dict(method="rheo", m=1), dict(method="rheo_seq", branching=(4, 2, 1, 1, 1, 1, 1, 1)),
    dict(method="rheo_seq", branching=(3, 2, 2, 1, 1, 1, 1, 1)),
]


def main(argv=None) -> int:
    ap = ArgumentParser(prog="heldout_shapes.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=positive_int, default=4)
    ap.add_argument("--new-tokens", type=positive_int, default=8)
    ap.add_argument("--temperature", type=positive_float, default=1.0)
    args = ap.parse_args(argv)
    from eval.measure.pairs import load_pair
    from rheo.methods import get_method, reads
    from rheo.same_state import same_state_generate
    from rheo.training.corpus import DEFAULT_DIR, load_corpus

    torch.set_num_threads(1)
    pair = load_pair("smollm2_135m", "cpu", "float32")
    corpus = load_corpus(DEFAULT_DIR / "selfinstruct")
    held = [int(i) for i in corpus.held_out.nonzero()[0][: args.prompts]]
    configs = [SpecConfig(**c, temperature=args.temperature) for c in CANDIDATES]
    driver = SpecConfig(method="topk", temperature=args.temperature)
    per_prompt = defaultdict(list)
    for s in held:
        prompt = corpus.sequence(s)[: int(corpus.resp_start[s])].tolist()
        got = same_state_generate(pair.target, pair.drafter, prompt, args.new_tokens, driver, configs,
                                  torch.Generator().manual_seed(s), key=f"heldout/{s}",
                                  eos_token_id=list(pair.eos_token_ids) or None, calibration=False, ot_bound=False)
        for i in range(len(configs)):
            vals = [t.columns["expected_emitted"] for t in got.trees if t.method == i]
            per_prompt[i].append(sum(vals) / len(vals))
        print(f"prompt {s}: {len(got.output.accept_lengths)} states", file=sys.stderr, flush=True)
    for i, cfg in enumerate(configs):
        vals = per_prompt[i]
        label = get_method(cfg.method).variant(cfg) + (f" R={cfg.tree_size}" if reads(cfg.method, "tree_size") else "")
        print(f"| {label} | {sum(vals) / len(vals):.3f} | {' '.join(f'{v:.2f}' for v in vals)} |")
    return 0


if __name__ == "__main__":
    run_main(main, prog="heldout_shapes.py")
