"""``rheo generate "prompt"``: decode one chat turn with a pair, stream the answer, report tau and speed.

    rheo generate "Name three colors." --model smollm2_135m --method rheo --temperature 0.7
    rheo generate "Hi" --target ~/llama --head ~/eagle3-head --chat-format template --compare-ar

The answer is printed as each verification cycle emits it; the last line is the mean
tokens per target call (tau), tokens per second and, with ``--compare-ar``, the speedup over
plain decoding of the same prompt by the same target in the same process (the target's own
``generate``: greedy at temperature 0, sampling otherwise).
"""

from __future__ import annotations

import sys
import time
from typing import Optional, Sequence

import torch

from rheo.cli import ArgumentParser, non_negative_float, non_negative_int, positive_int, seed_arg, text_input

__all__ = ["build_parser", "generate_main"]


def build_parser(prog: str = "rheo generate") -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Decode a prompt with lossless tree speculative sampling and "
                                              "stream the answer; the last line reports tau and tokens/s.")
    p.add_argument("prompt", help="the user message (the pair's chat format is applied); - reads it from "
                                  "stdin, @FILE from a file")
    p.add_argument("--model", default=None, help="a catalog pair (default smollm2_135m, the embedded one)")
    p.add_argument("--target", default=None, help="a local Llama-family checkpoint folder (with --head)")
    p.add_argument("--head", default=None, help="an EAGLE-3 head folder for --target (official layout or rheo's)")
    p.add_argument("--chat-format", default=None, choices=("template", "vicuna_v1.1"),
                   help="how prompts are rendered (default: the pair's; 'template' for --target)")
    p.add_argument("--method", default="rheo", choices=("rheo", "topk"), help="tree rule (default rheo)")
    p.add_argument("--temperature", type=non_negative_float, default=0.7, help="0 = greedy (default 0.7)")
    p.add_argument("--m", type=non_negative_int, default=None, help="rheo: lead slots per node (default 1)")
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="default 128")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: the pair's")
    p.add_argument("--compare-ar", action="store_true",
                   help="also decode with the target alone and report the speedup")
    return p


def generate_main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from rheo.config import SpecConfig
    from rheo.decode import check_prompt, speculative_generate
    from rheo.models import load_model_pair

    if (args.target is None) != (args.head is None):
        raise ValueError("give both --target DIR and --head DIR (a local pair), or --model NAME")
    if args.target is not None and args.model is not None:
        raise ValueError("give either --model NAME or --target DIR --head DIR, not both")
    name = args.model or (None if args.target else "smollm2_135m")
    text = text_input(args.prompt)  # refused before anything loads: the text, then the method's values
    changes = {} if args.m is None else {"m": args.m}
    config = SpecConfig(method=args.method, temperature=args.temperature, **changes)
    pair = load_model_pair(name, device=args.device, dtype=args.dtype, target_path=args.target,
                           head_path=args.head, chat_format=args.chat_format)
    prompt = pair.format_chat([{"role": "user", "content": text}])
    check_prompt(prompt, args.max_new_tokens, pair.target.vocab_size, getattr(pair.target, "context_length", None))
    printer = _Printer(pair.tokenizer)
    speculative_generate(pair.target, pair.drafter, prompt, 1, config,  # warm-up: first calls are slow
                         generator=torch.Generator(device=pair.target.device))
    generator = torch.Generator(device=pair.target.device).manual_seed(args.seed)
    start = time.perf_counter()
    out = speculative_generate(pair.target, pair.drafter, prompt, args.max_new_tokens, config, generator=generator,
                               eos_token_id=pair.eos_token_ids, on_tokens=printer.add)
    seconds = time.perf_counter() - start
    printer.finish()
    speed = len(out.tokens) / max(seconds, 1e-9)
    line = f"tau {out.tau:.2f} ({len(out.tokens)} tokens in {out.target_calls} target calls), {speed:.1f} tokens/s"
    if args.compare_ar:
        ar_speed = _plain_speed(pair, prompt, args, len(out.tokens))
        line += f", plain decoding {ar_speed:.1f} tokens/s, speedup {speed / ar_speed:.2f}x"
    print(line, flush=True)
    return 0


class _Printer:
    """Prints the answer as tokens arrive (decoded as a whole, so multi-token characters come out right)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.tokens, self.shown = tokenizer, [], ""

    def add(self, new: list[int]) -> None:
        self.tokens.extend(new)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
            return
        sys.stdout.write(text[len(self.shown):])
        sys.stdout.flush()
        self.shown = text

    def finish(self) -> None:
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        print(text[len(self.shown):], flush=True)


def _plain_speed(pair, prompt: list[int], args, new_tokens: int) -> float:
    """Tokens/s of the target's own generate on the same prompt, for as many tokens as rheo emitted."""
    ids = torch.tensor([prompt], device=pair.target.device)  # [1, len]
    sample = args.temperature > 0
    extra = {"temperature": args.temperature, "top_k": 0} if sample else {}
    pair.hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False,
                           pad_token_id=pair.eos_token_ids[0] if pair.eos_token_ids else None)  # warm-up
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    out = pair.hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=sample,
                                 max_new_tokens=max(1, new_tokens), min_new_tokens=max(1, new_tokens),
                                 pad_token_id=pair.eos_token_ids[0] if pair.eos_token_ids else None, **extra)
    seconds = time.perf_counter() - start
    return (out.shape[1] - ids.shape[1]) / max(seconds, 1e-9)
