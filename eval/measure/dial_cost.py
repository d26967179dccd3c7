"""What one draft tree costs along the draft-quality dial, side by side in one process.

    python -m eval.measure.dial_cost [--trees 6] [--threads 1] [--prompt TEXT]

On the embedded pair (SmolLM2-135M-Instruct + its EAGLE-3 head, float32), at the cycle starts
of one Top-K decode, the paper tree (K=10, depth 8, R=60, top-128) is built with the head alone
(draft_mix 0: the head only) and with the target itself mixed in (draft_mix 1: the target scores
each layer's frontier on its own cache), alternating; the target's one call on the pruned tree
(what verification pays every cycle) is timed beside them. Printed: mean ms per tree build, per
drafted layer, and the ratios to the tree call. Times are process CPU time of this thread, so a
busy machine slows them less than wall time would; only the ratios mean much.
"""

from __future__ import annotations

import statistics
import time
from typing import Optional

import torch

from eval.report.markdown import markdown_table
from rheo.cli import ArgumentParser, positive_int, run_main

PROG = "python -m eval.measure.dial_cost"


def _clock(fn):
    start = time.process_time()
    out = fn()
    return out, 1000 * (time.process_time() - start)


def main(argv=None) -> Optional[int]:
    """Measure and print (module docstring)."""
    ap = ArgumentParser(prog=PROG, description="Draft-tree cost along the draft-quality dial.")
    ap.add_argument("--trees", type=positive_int, default=6, help="cycle starts measured")
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--prompt", default="Explain why the sky is blue in three sentences.")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from rheo.config import SpecConfig
    from rheo.decode import generate_with_source
    from rheo.methods import get_method
    from rheo.models import load_model_pair
    from rheo.models.mixture import MixedDrafter
    from rheo.random import TorchRandom

    pair = load_model_pair("smollm2_135m", dtype=torch.float32)
    prompt = pair.format_chat([{"role": "user", "content": args.prompt}])
    cfg = SpecConfig(method="topk", temperature=1.0)
    method = get_method("topk")
    times: dict[str, list[float]] = {"head (a=0)": [], "target mixed in (a=1)": [], "tree call": []}
    full = MixedDrafter(pair.drafter, pair.target, 1.0)
    mixed_sessions: list = []

    def on_state(state) -> None:
        if state.index >= args.trees:
            return
        rng = TorchRandom(torch.Generator().manual_seed(state.index))
        built, ms = _clock(lambda: method.build_tree(state.draft_fn, state.root, cfg, rng, state.draft_to_target))
        times["head (a=0)"].append(ms)
        scored, ms = _clock(lambda: state.target_session.score_tree(built.tree))
        times["tree call"].append(ms)
        state.target_session.discard()
        sess = mixed_sessions[0]
        rng = TorchRandom(torch.Generator().manual_seed(state.index))
        _, ms = _clock(lambda: method.build_tree(sess.draft, state.root, cfg, rng, None))
        times["target mixed in (a=1)"].append(ms)

    class Recording:  # the decode's drafter, with a mixed session following the same commits
        vocab_size, draft_to_target = pair.drafter.vocab_size, pair.drafter.draft_to_target
        device = pair.drafter.device

        def new_session(self):
            base, mixed = pair.drafter.new_session(), full.new_session()
            mixed_sessions.append(mixed)

            class Both:
                def prefill(self, ids, feats):
                    base.prefill(ids, feats)
                    mixed.prefill(ids, feats)

                def commit(self, tokens, feats):
                    base.commit(tokens, feats)
                    mixed.commit(tokens, feats)

                def draft(self, view, frontier):
                    return base.draft(view, frontier)
            return Both()

    with torch.inference_mode():
        generate_with_source(pair.target, Recording(), prompt, 400, cfg,
                             TorchRandom(torch.Generator().manual_seed(0)), on_state=on_state,
                             eos_token_id=list(pair.eos_token_ids) or None)
    call = statistics.mean(times["tree call"])
    print(f"paper tree, {len(times['tree call'])} cycle starts, float32, {args.threads} thread(s), process CPU time")
    body = [[name, f"{statistics.mean(times[name]):.1f}", f"{statistics.mean(times[name]) / cfg.depth:.1f}",
             f"{statistics.mean(times[name]) / call:.2f}"] for name in ("head (a=0)", "target mixed in (a=1)")]
    body.append([f"(the target's call on the pruned {cfg.tree_size + 1}-node tree)", f"{call:.1f}", "-", "1.00"])
    print(markdown_table(["tree build", "ms per tree", "ms per drafted layer", "× the target's tree call"], body))
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (FileNotFoundError, ValueError))
