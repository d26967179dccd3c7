"""Measure the acceptance length tau of an EAGLE-3 head for SmolLM2 on held-out chat prompts.

tau = tokens emitted per target call (accepted drafts + the bonus), pooled over
all cycles of all prompts. Usage::

    python scripts/eval_draft_head.py --head rheo/assets/eagle3_smollm2_135m \\
        --prompts .cache/draft_data/held_out_prompts.json --skip 32 --n 20
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models.eagle3 import load_eagle3_drafter
from rheo.models.hf_target import HFTarget
from rheo.models.smollm2 import load_smollm2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", default="rheo/assets/eagle3_smollm2_135m")
    ap.add_argument("--prompts", default=".cache/draft_data/held_out_prompts.json")
    ap.add_argument("--skip", type=int, default=32, help="held-out prompts already used for accuracy data")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--method", default="topk")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--tree-size", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-greedy", action="store_true", help="also compare with model.generate (T=0)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    target, drafter = HFTarget(model), load_eagle3_drafter(args.head, model)
    prompts = json.load(open(args.prompts))[args.skip : args.skip + args.n]
    cfg = SpecConfig(method=args.method, k=args.k, depth=args.depth, tree_size=args.tree_size,
                     temperature=args.temperature)
    lengths, mismatches, t0 = [], 0, time.time()
    for i, p in enumerate(prompts):
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"]
        out = speculative_generate(target, drafter, ids[0].tolist(), args.max_new_tokens, config=cfg,
                                   generator=torch.Generator().manual_seed(args.seed + i),
                                   eos_token_id=tok.eos_token_id)
        lengths += out.accept_lengths
        if args.check_greedy and args.temperature == 0:
            ref = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)[0, ids.shape[1]:]
            mismatches += int(out.tokens != ref.tolist())
        print(json.dumps(dict(prompt=i, tokens=len(out.tokens), tau=round(sum(out.accept_lengths) / len(out.accept_lengths), 3))), flush=True)
    tau = sum(lengths) / len(lengths)
    print(json.dumps(dict(tau=round(tau, 3), prompts=len(prompts), cycles=len(lengths), tokens=sum(lengths),
                          greedy_mismatches=mismatches if args.check_greedy else None,
                          wall_s=round(time.time() - t0, 1), config=vars(args))), flush=True)


if __name__ == "__main__":
    main()
