"""The exact expected emitted tokens of real trees against a Monte-Carlo of the verifier.

    python -m eval.measure.expected_mc [--model smollm2_135m] [--method rheo] [--runs 3000] [--every 3]
                               [--max-new 60] [--out FILE.md]
    python -m eval.measure.expected_mc --method chain --verifier traversal [--depth 8]
    python -m eval.measure.expected_mc --method static --branching 2 1 1 1 --verifier traversal
    python -m eval.measure.expected_mc --method rheo_seq --branching 2 1 1 1

One generation (the method's own, seed 0) of a fixed everyday prompt (not a benchmark item);
at every ``every``-th cycle start the method builds a tree with its own seeded stream, the
target scores it, and the tree's exact expectation (rheo.expected) is set beside the mean of
``runs`` verifications of that same tree with independent random numbers. Per state: z =
(MC mean - expected) / its standard error; a correct expectation gives |z| > 4 about once in
16,000 states.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from eval.report.analysis import normal_half_width
from eval.report.markdown import BLANK, markdown_table
from rheo import config as rheo_config
from rheo.cli import ArgumentParser, path_arg, positive_int, run_main
from rheo.config import SpecConfig
from rheo.decode import generate_with_source
from rheo.io import open_append
from rheo.methods import get_method, reads
from rheo.random import TorchRandom

PROMPT = "Write a short story about a robot who learns to paint."
PAPER_TREE = {**rheo_config.PAPER_TREE, "temperature": 1.0}


def check_states(pair, cfg: SpecConfig, runs: int, every: int, max_new: int) -> list[dict]:
    """One row per checked state: state, nodes, expected, mc, se, z."""
    method, rows = get_method(cfg.method), []
    prompt = pair.format_chat([{"role": "user", "content": PROMPT}])

    def on_state(state) -> None:
        if state.index % every:
            return
        rng = TorchRandom(torch.Generator().manual_seed(1000 + state.index))
        built = method.build_tree(state.draft_fn, state.root, cfg, rng, state.draft_to_target, state.device)
        logits = state.target_session.score_tree(built.tree).logits
        try:
            expected = method.expected_emitted(built, logits, cfg)
            verifier = TorchRandom(torch.Generator().manual_seed(7 + state.index))
            got = [len(method.verify_tree(built, logits, cfg, verifier).tokens) for _ in range(runs)]
        finally:
            state.target_session.discard()
        mean = sum(got) / runs
        se = math.sqrt(sum((x - mean) ** 2 for x in got) / (runs - 1) / runs)
        rows.append(dict(state=state.index, nodes=built.tree.num_nodes - 1, expected=expected, mc=mean, se=se,
                         z=(mean - expected) / se if se > 0 else 0.0))

    with torch.inference_mode():
        generate_with_source(pair.target, pair.drafter, prompt, max_new, cfg, TorchRandom(torch.Generator().manual_seed(0)),
                             list(pair.eos_token_ids) or None, on_state=on_state)
    return rows


def markdown(rows: list[dict], cfg: SpecConfig, model: str, runs: int) -> str:
    label = get_method(cfg.method).variant(cfg)
    diffs = [r["mc"] - r["expected"] for r in rows]
    pooled_se = math.sqrt(sum(r["se"] ** 2 for r in rows)) / len(rows)  # of the mean of independent trees
    tree = f"K={cfg.k} depth={cfg.depth} R={cfg.tree_size} " if get_method(cfg.method).kind == "dynamic" else ""
    lines = [f"### {model}, {label}, {tree}top-{cfg.sparse_top}, "
             f"T={cfg.temperature:g}, {runs} verifications per tree", "",
             markdown_table(["state", "drafted nodes", "expected", "Monte-Carlo", "MC − expected", "z"],
                            [[r["state"], r["nodes"], f"{r['expected']:.4f}",
                              f"{r['mc']:.4f} ± {normal_half_width(r['se']):.4f}", f"{r['mc'] - r['expected']:+.4f}",
                              f"{r['z']:+.2f}"] for r in rows]
                            + [["**mean**", BLANK, BLANK, BLANK, f"{sum(diffs) / len(diffs):+.4f} ± "
                                f"{normal_half_width(pooled_se):.4f}", BLANK]])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m eval.measure.expected_mc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2_135m")
    ap.add_argument("--method", default="rheo", choices=["rheo", "topk", "static", "chain", "rheo_seq"])
    ap.add_argument("--verifier", default=None, choices=["rrs", "traversal"], help="static and chain: the verifier")
    ap.add_argument("--branching", type=positive_int, nargs="+", default=None,
                    help="static and rheo_seq: the shape (static: i.i.d. siblings)")
    ap.add_argument("--depth", type=positive_int, default=None, help="chain: its length")
    ap.add_argument("--runs", type=positive_int, default=3000)
    ap.add_argument("--every", type=positive_int, default=3)
    ap.add_argument("--max-new", type=positive_int, default=60)
    ap.add_argument("--out", type=path_arg, help="append the markdown here instead of printing it")
    args = ap.parse_args(argv)
    from eval.measure.pairs import load_pair

    torch.set_num_threads(1)
    pair = load_pair(args.model, "cpu", "bfloat16")
    shape = {"branching": tuple(args.branching)} if args.branching else {}
    if reads(args.method, "replacement"):  # a static tree: i.i.d. children, the setting every verifier is exact on
        shape["replacement"] = True
    extra = {k: v for k, v in (("verifier", args.verifier), ("depth", args.depth)) if v is not None}
    cfg = SpecConfig.for_method(method=args.method, **{**PAPER_TREE, **extra},
                                **({"m": 1} if reads(args.method, "m") else {}), **shape)
    rows = check_states(pair, cfg, args.runs, args.every, args.max_new)
    if not rows:
        raise SystemExit("no state was checked: raise --max-new or lower --every")
    text = markdown(rows, cfg, args.model, args.runs)
    if args.out:
        with open_append(Path(args.out)) as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    run_main(main, prog="python -m eval.measure.expected_mc")
