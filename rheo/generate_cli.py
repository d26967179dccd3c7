"""``rheo generate "prompt"``: decode one chat turn with a pair, stream the answer, report tau and speed.

    rheo generate "Name three colors." --model smollm2_135m --method rheo --temperature 0.7
    rheo generate "Hi" --target ~/llama --head ~/eagle3-head --chat-format template --compare-ar

The answer is printed as each verification cycle emits it; the last line is the mean
tokens per target call (tau) and tokens per second. With ``--compare-ar`` a line more gives the
speedup over plain decoding of the same prompt by the same target in the same process (the
target's own ``generate``: greedy at temperature 0, sampling otherwise), warmed up and repeated
(``--repeats``) with a 95% interval (rheo.compare_ar), next to the tree, the CPU and the dtype.

``--method`` takes a registered tree method or a preset (rheo.presets: ``rheo_auto``), or the tree method
of a plug-in (rheo.methods.plugins). The tree is
``--tree tuned`` on a CPU (the small tree ``make tune`` measured for it: this machine's under the output
root, else the committed configs/experiment/tuned_*.yaml; the paper's 60-node tree costs more than it saves
there) and ``--tree paper`` elsewhere;
``--k/--depth/--tree-size`` override either. ``--dtype auto`` (the default) is float32 on a CPU
that emulates bf16 and bf16 where it is native (rheo.cpu_dtype); the choice and its reason are
printed on stderr. ``--threads`` (default 1) is torch's intra-op thread count, printed on that line too:
one thread is the setting the project's timed CPU numbers use, and on a shared machine more threads
than the free cores wait on each other (a busy 2-core machine ran 12x slower with torch's default of
one per core). ``--compare-ar`` prints one line per timed repeat on stderr as it goes.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import torch

from rheo.cli import ArgumentParser, non_negative_float, non_negative_int, positive_int, seed_arg, text_input
from rheo.compare_ar import repeat_line
from rheo.config import ENGINES, PAPER_TREE
from rheo.cpu_dtype import AUTO, cpu_kind
from rheo.engine import compile_count
from rheo.paths import REPO_ROOT, is_committed_evidence, out_root, shown
from rheo.methods import method_names, plugin_methods, reads
from rheo.models.protocol import PROTOCOLS, default_protocol, dtype_choice
from rheo.placement import as_device
from rheo.presets import PRESETS

__all__ = ["build_parser", "generate_main"]


def build_parser(prog: str = "rheo generate") -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Decode a prompt with lossless tree speculative sampling and "
                                              "stream the answer; the last line reports tau and tokens/s.")
    p.add_argument("prompt", help="the user message (the pair's chat format is applied); - reads it from "
                                  "stdin, @FILE from a file; a message that starts with @ is written @@...")
    p.add_argument("--model", default=None, help="a catalog pair (default smollm2_135m, the embedded one)")
    p.add_argument("--target", default=None, help="a local Llama-family checkpoint folder (with --head)")
    p.add_argument("--head", default=None, help="an EAGLE-3 head folder for --target (official layout or rheo's)")
    p.add_argument("--chat-format", default=None, choices=("template", "vicuna_v1.1"),
                   help="how prompts are rendered (default: the pair's; 'template' for --target)")
    p.add_argument("--protocol", default=None, choices=PROTOCOLS,
                   help="prompt protocol (rheo.models.protocol): template, or eagle3 (EAGLE-3's evaluation prompts: "
                        "system message, turn ends, float16 with --dtype auto); default: the model's own (eagle3 "
                        "for the paper's three models, template for the embedded pair); `rheo prompt` shows it")
    p.add_argument("--method", default="rheo", choices=METHODS,
                   help="tree rule or preset (default rheo, the paper's; rheo_auto: rheo.presets)")
    p.add_argument("--tree", default=None, choices=("paper", "tuned"),
                   help="paper: K=10 depth 8 R=60; tuned: the tree `make tune` measured for a CPU "
                        "(this machine's, outputs/experiment/mine/, else configs/experiment/tuned_*.yaml). "
                        "Default: tuned on a CPU, paper elsewhere")
    p.add_argument("--k", type=positive_int, default=None, help="candidates per node (overrides --tree)")
    p.add_argument("--depth", type=positive_int, default=None, help="drafted layers (overrides --tree)")
    p.add_argument("--tree-size", type=positive_int, default=None, help="kept nodes (overrides --tree)")
    p.add_argument("--temperature", type=non_negative_float, default=0.7, help="0 = greedy (default 0.7)")
    p.add_argument("--m", type=non_negative_int, default=None, help="rheo: lead slots per node (default 1)")
    p.add_argument("--engine", default="eager", choices=ENGINES,
                   help="eager (default, the reference); static: static-shape sessions; graphs: those compiled "
                        "(CUDA graphs on a GPU, Inductor on a CPU); an EAGLE-3 pair (rheo.engine)")
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="default 128")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--dtype", default=AUTO, choices=(AUTO, "float32", "bfloat16", "float16"),
                   help="auto (default): on a CPU float32 unless it has bf16 instructions (avx512_bf16, "
                        "amx_bf16), elsewhere the pair's")
    p.add_argument("--compare-ar", action="store_true",
                   help="also decode with the target alone and report the speedup with its 95%% interval")
    p.add_argument("--repeats", type=positive_int, default=5,
                   help="--compare-ar: timed repetitions of each decoder after a warm-up (default 5)")
    p.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                   help=f"torch CPU threads (default {DEFAULT_THREADS}: the setting of the project's timed CPU numbers, "
                        f"and safe on a shared machine, where threads beyond the free cores stall each other; "
                        f"raise it on a machine of your own)")
    return p


#: --threads when not given (module docstring: why one)
DEFAULT_THREADS = 1


def set_threads(threads: int) -> str:
    """Set torch's intra-op threads to ``threads`` (refused in one line beyond the machine's cores);
    returns what was used, for the report line ('1 thread of 2 cores')."""
    cores = os.cpu_count() or 1
    if threads > cores:
        raise ValueError(f"--threads {threads} exceeds the {cores} cores of this machine (more threads than cores only "
                         f"wait on each other): choose --threads <= {cores}")
    torch.set_num_threads(threads)
    used = torch.get_num_threads()
    return f"{used} thread{'s' if used != 1 else ''} of {cores} cores"


#: what --method takes: the tree methods a user picks from, the presets, then the tree methods of plug-ins
#: (rheo.methods.plugins)
METHODS = ("rheo", "topk", *PRESETS, *(n for n in plugin_methods() if n in method_names()))


def tuned_preset(base: str) -> Path:
    """The tuned tree of ``base`` ("topk" or "rheo"): this machine's (`make tune`, under the output root)
    when it exists, else the committed preset of configs/experiment/."""
    own = out_root() / "experiment" / "mine" / f"tuned_{base}.yaml"
    return own if own.is_file() else REPO_ROOT / "configs" / "experiment" / f"tuned_{base}.yaml"


def tree_of(args) -> tuple[dict, str]:
    """(k, depth, tree_size) of the run and its name for the report line."""
    tree = args.tree or ("tuned" if str(args.device).split(":")[0] == "cpu" else "paper")
    shape = {f: PAPER_TREE[f] for f in ("k", "depth", "tree_size")}
    name = "paper"
    if tree == "tuned":
        method = PRESETS[args.method]["method"] if args.method in PRESETS else args.method
        base = "rheo" if reads(method, "m") else "topk"  # the tuned tree of the sampling methods, or Top-K's
        path = tuned_preset(base)
        if path.is_file():
            from omegaconf import OmegaConf

            shape.update({f: int(v) for f, v in OmegaConf.load(path).method.items() if f in shape})
            name = f"tuned ({shown(path)}{', committed' if is_committed_evidence(path) else ', this machine'})"
        else:
            name = f"paper ({path.name} not found: run `make tune`)"
    given = {f: getattr(args, f) for f in shape if getattr(args, f) is not None}
    if given:
        shape.update(given)
        name = "given"
    return shape, f"{name} K={shape['k']} d={shape['depth']} R={shape['tree_size']}"


def spec_of(args, shape: dict):
    """The SpecConfig of the run: a preset's fields or the method's, with the tree, T and --m on top. A
    tree field the method does not read is dropped unless typed (static's k); a typed one is refused."""
    from rheo.config import SpecConfig

    method = PRESETS[args.method]["method"] if args.method in PRESETS else args.method
    shape = {f: v for f, v in shape.items() if reads(method, f) or getattr(args, f, None) is not None}
    changes = {**shape, "temperature": args.temperature, "engine": getattr(args, "engine", "eager"),
               **({} if args.m is None else {"m": args.m})}
    if args.method in PRESETS:
        try:
            return SpecConfig.preset(args.method, **changes)
        except ValueError as e:
            if args.m != 0:
                raise
            fixed = ", ".join(f"{k} {v!r}" for k, v in PRESETS[args.method].items() if k not in ("method", "m"))
            raise ValueError(f"--method {args.method} does not take --m 0 (it fixes {fixed}, which need at least one "
                             f"lead, m >= 1): for Rheo m=0 give --method rheo --m 0, or drop --m ({args.method} is "
                             f"m={PRESETS[args.method]['m']})") from None
    return SpecConfig(method=args.method, **changes)


def generate_main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from rheo.compare_ar import time_pair
    from rheo.decode import check_prompt, speculative_generate
    from rheo.models import load_model_pair

    if (args.target is None) != (args.head is None):
        raise ValueError("give both --target DIR and --head DIR (a local pair), or --model NAME")
    if args.target is not None and args.model is not None:
        raise ValueError("give either --model NAME or --target DIR --head DIR, not both")
    as_device(args.device, "--device")  # refused as this command spells it: "use --device cpu"
    shape, tree = tree_of(args)
    config = spec_of(args, shape)
    threads = set_threads(args.threads)
    name = args.model or (None if args.target else "smollm2_135m")
    protocol = args.protocol or default_protocol(name or "local")
    dtype = dtype_choice(args.dtype, args.device, name or "local", protocol)
    text = text_input(args.prompt)  # refused before anything loads: the text, then the method's values
    pair = load_model_pair(name, device=args.device, dtype=dtype.dtype, target_path=args.target,
                           head_path=args.head, chat_format=args.chat_format, protocol=protocol)
    ran_in = str(pair.hf_model.dtype).replace("torch.", "")
    engine = "" if args.engine == "eager" else f", engine {args.engine}"
    print(f"{args.method}, tree {tree}, {ran_in} ({dtype.reason}), {threads}{engine}, protocol {protocol}",
          file=sys.stderr, flush=True)
    prompt = pair.format_chat([{"role": "user", "content": text}])
    check_prompt(prompt, args.max_new_tokens, pair.target.vocab_size, getattr(pair.target, "context_length", None))
    printer = _Printer(pair.tokenizer)

    def decode(seed: int, max_new: int, on_tokens=None):
        generator = torch.Generator(device=pair.target.device).manual_seed(seed)
        return speculative_generate(pair.target, pair.drafter, prompt, max_new, config, generator=generator,
                                    eos_token_id=pair.eos_token_ids, on_tokens=on_tokens)

    decode(args.seed, 1)  # warm-up: first calls are slow
    _warm_graphs(pair, prompt, config, args.max_new_tokens)
    compiled = compile_count()
    start = time.perf_counter()
    out = decode(args.seed, args.max_new_tokens, printer.add)
    seconds = time.perf_counter() - start
    compiled = compile_count() - compiled
    printer.finish()
    speed = (f"{len(out.tokens) / max(seconds, 1e-9):.1f} tokens/s" if not compiled else
             f"tokens/s not reported: {compiled} graph(s) were compiled inside this generation")
    print(f"tau {out.tau:.2f} ({len(out.tokens)} tokens in {out.target_calls} target calls), {speed}", flush=True)
    if out.cycle_m:  # adapt="root" or "level": what the rule chose, and where the drafter sits (docs/algorithm.md)
        accept = (f"; a child sampled from the draft is accepted with probability {statistics.mean(out.root_accept):.2f} "
                  f"at the roots (mean of 1 - TV)" if out.root_accept else "")
        print(f"adapt: {out.cycle_m.count(0)} of {len(out.cycle_m)} cycles drafted with m=0{accept}", flush=True)
    if args.compare_ar:
        new = max(1, len(out.tokens))
        plain = _plain(pair, prompt, args.temperature, new)
        print(f"compare-ar: {args.repeats} timed repeat(s) of {args.method} and plain decoding, {new} tokens each, "
              f"after a warm-up", file=sys.stderr, flush=True)
        plain(args.seed)  # warm-up
        result = time_pair(lambda i: len(decode(args.seed + i, new).tokens), lambda i: plain(args.seed + i),
                           args.repeats, on_repeat=lambda i, s, p: print(repeat_line(i, args.repeats, args.method, s, p),
                                                                        file=sys.stderr, flush=True))
        where = cpu_kind().describe() if str(args.device).split(":")[0] == "cpu" else args.device
        print(f"{result.describe()}: {args.method} {result.spec_tps:.1f} tokens/s, plain decoding "
              f"{result.plain_tps:.1f} tokens/s; tree {tree}; {where}, {threads}, {ran_in}", flush=True)
    return 0


def _warm_graphs(pair, prompt: list[int], config, max_new_tokens: int) -> None:
    """engine=graphs: compile, before the timed generation, every cache bucket it can reach (rheo.warmup)."""
    if config.engine != "graphs":
        return
    from rheo.decode import speculative_generate
    from rheo.warmup import warm

    def run(ids: list[int], new_tokens: int) -> None:
        generator = torch.Generator(device=pair.target.device).manual_seed(0)
        speculative_generate(pair.target, pair.drafter, ids, new_tokens, config, generator=generator)

    start = time.perf_counter()
    made = warm(run, config, pair.target, [len(prompt)], max_new_tokens, prompt)
    print(f"warm-up: {made} graph(s) compiled for the cache buckets of this prompt in {time.perf_counter() - start:.1f} s "
          f"(not timed)", file=sys.stderr, flush=True)


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


def _plain(pair, prompt: list[int], temperature: float, new_tokens: int):
    """seed -> tokens decoded by the target's own generate on the same prompt (``new_tokens`` of them)."""
    ids = torch.tensor([prompt], device=pair.target.device)  # [1, len]
    extra = {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature > 0 else {"do_sample": False}
    pad = pair.eos_token_ids[0] if pair.eos_token_ids else None

    def run(seed: int) -> int:
        torch.manual_seed(seed)
        out = pair.hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, pad_token_id=pad, **extra)
        return out.shape[1] - ids.shape[1]
    return run
