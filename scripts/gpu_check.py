"""What a user with a GPU runs first: the CUDA path, checked and timed (`make gpu-check`).

    python scripts/gpu_check.py --out results/gpu [--device cuda] [--items 4] [--max-new 256]

1. fp32 (TF32 off): greedy output of our AR, Top-K and Rheo m=1 (paper tree) against
   ``generate(do_sample=False)`` on one prompt per suite (``--check-tokens``); at a
   divergence the target's top-2 logit margin.
2. bf16: the same, reported as agreement (tokens before the first divergence).
3. Same seed, same tokens (T=1, twice); seeded chi-square on toy models whose tensors
   and generators live on the device.
4. Tau parity: fp32 T=0 tau and tokens against the CPU reference
   (``results/gpu/cpu_reference.json``; ``--make-reference`` on a CPU writes a new one to
   ``<out>/cpu_reference.json``, which ``make publish`` commits; computed on this machine's CPU
   when missing or made with other settings).
5. Speed (``--speed-dtype``, default bf16 on CUDA): AR, ``transformers`` ``generate``,
   Top-K and Rheo m=1 at each T, paper tree, on ``--items`` items x 6 suites x
   ``--max-new`` tokens, per-phase ms; then the tree_size sweep (``--sweep``) on
   ``--sweep-items`` items, or the tuned trees (``--tuned``). Rows go to ``<out>/runs``
   in the harness layout (device, dtype, GPU name); it stops cleanly at ``--time-limit``.

Writes ``<out>/summary.md`` (rewritten after every section, so a cut run keeps what it
did), ``<out>/checks.json`` and ``<out>/tables/{speed,phases}.md``. Exit status 1 if a
correctness check fails (fp32 identity, determinism, chi-square).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # (make gpu-check puts it and tests/ on PYTHONPATH)

import torch

from eval.device import devcheck as dc
from eval.device.devreport import Report, greedy_section, md_table, tau_parity
from eval.store import storage
from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.config import SpecConfig
from rheo.io import atomic_write_text, check_dir
from rheo.paths import folder, git_sha
from rheo.placement import DTYPES as PLACEMENT_DTYPES
from rheo.placement import setting
from rheo.timing import device_name

DTYPES = {k: v for k, v in PLACEMENT_DTYPES.items() if k != "float16"}
REFERENCE = ROOT / folder("results", "gpu", "cpu_reference.json")


def parse(argv):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=check_dir, required=True, help="the folder of the summary, checks and tables "
                    "(under the output root; `make publish` makes them committed results)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="smollm2_135m")
    ap.add_argument("--check-tokens", type=positive_int, default=64, help="tokens per prompt of the correctness checks")
    ap.add_argument("--tree", default="10,8,60", help="K,DEPTH,R of the checks and the speed table (paper: 10,8,60)")
    ap.add_argument("--chi-runs", type=positive_int, default=2000, help="runs of each lossless chi-square case (the "
                    "negative control runs its own fixed number, whose power the check states)")
    ap.add_argument("--items", type=positive_int, default=4, help="speed: items per suite")
    ap.add_argument("--max-new", type=positive_int, default=256, help="speed: new tokens")
    ap.add_argument("--temps", default="0,1")
    ap.add_argument("--speed-dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--sweep", default="8,16,32", help="extra tree sizes R (K, depth of --tree) after --tree")
    ap.add_argument("--sweep-items", type=positive_int, default=1)
    ap.add_argument("--tuned", action="store_true", help="also time configs/experiment/tuned_{topk,rheo}.yaml")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds from the start; the speed section stops "
                    "before it, and the engine section starts no part after it (default 540; with --engine 420, so "
                    "that `make gpu-check ENGINE=graphs` stays under 8 minutes on one GPU)")
    ap.add_argument("--engine", default="eager", choices=("eager", "static", "graphs"),
                    help="also check this engine against eager: per call on --engine-shape, per cycle there and on "
                         "the embedded pair (eval/device/engine_check.py)")
    ap.add_argument("--engine-shape", default=None, help="cost shape of the engine check (default: llama31_8b on "
                                                         "CUDA, tiny32 elsewhere)")
    ap.add_argument("--engine-reduce", type=positive_int, default=1, help="divide the engine shape's widths by this")
    ap.add_argument("--skip", default="", help="comma list of: fp32,bf16,determinism,chi,engine,speed")
    ap.add_argument("--make-reference", action="store_true", help="write the CPU reference of the tau parity")
    ap.add_argument("--data-dir", type=Path, default=ROOT / "data" / "benchmarks")
    ap.add_argument("--reference", type=Path, default=REFERENCE, help="the CPU reference file of the tau parity")
    # how the user set --device, for hints: `make gpu-check` passes DEVICE (its variable)
    ap.add_argument("--device-setting", default="--device", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        k, depth, size = (int(x) for x in args.tree.split(","))
    except ValueError:
        ap.error(f"--tree must be K,DEPTH,R (e.g. 10,8,60), got {args.tree!r}")
    args.tree = {**dc.PAPER_TREE, "k": k, "depth": depth, "tree_size": size}
    return args


def reference_settings(args) -> dict:
    return {"model": args.model, "check_tokens": args.check_tokens, "tree": args.tree, "dtype": "float32"}


def load_pair(args, dtype: str, device: str):
    from rheo.models import load_model_pair

    return load_model_pair(args.model, device=device, dtype=DTYPES[dtype])


def cpu_reference(args, prompts) -> dict:
    """The fp32 greedy runs on this machine's CPU (what --make-reference stores)."""
    pair = load_pair(args, "float32", "cpu")
    return {"settings": reference_settings(args), "machine": device_name("cpu"), "torch": torch.__version__,
            "rows": dc.greedy_runs(pair, prompts, args.check_tokens, args.tree, "cpu")}


def main(argv=None) -> int:
    args = parse(argv)
    if args.time_limit is None:
        args.time_limit = 540.0 if args.engine == "eager" else 420.0
    started = args.started = time.perf_counter()
    device, skip = args.device, set(filter(None, args.skip.split(",")))
    cuda = torch.device(device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"{setting(args.device_setting, device)} but torch.cuda.is_available() is False (use "
                         f"{setting(args.device_setting, 'cpu')} to rehearse)")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 identity needs full-precision matmuls
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    prompts = dc.load_prompts(args.data_dir, 1)
    if args.make_reference:
        ref = cpu_reference(args, prompts)
        ref["source"] = f"{ref['machine']}, torch {ref['torch']}"
        made = args.out / REFERENCE.name  # under the output root; `make publish` makes it the committed one
        atomic_write_text(made, json.dumps(ref, indent=1), record=True)
        print(f"wrote {made}")
        return 0
    import transformers

    env = {"device": device, "device_name": device_name(device), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": sys.version.split()[0], "git_sha": git_sha(),
           "model": args.model, "engine": args.engine, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    report = Report(args.out, env)
    if not cuda:
        report.add("scope", None, f"## What this run is\n\nA rehearsal on {device}: it checks the path (exactness, "
                   "determinism, chi-square, recompiles, kernel and graph-launch counts) with small sizes. Its "
                   "milliseconds are this CPU's, not a GPU's, and no GPU speed mark is read from them. The GPU "
                   "result is what `make gpu-check` writes on a GPU.")
    for name, fn in (("fp32", fp32_checks), ("bf16", bf16_check), ("chi", chi_check), ("engine", engine_check),
                     ("speed", speed)):
        if name in skip or (name == "engine" and args.engine == "eager"):
            continue
        try:
            fn(args, report, prompts) if name != "speed" else fn(args, report, started)
        except Exception as e:  # one broken section must not hide the others' results
            report.add(f"error_{name}", traceback.format_exc(),
                       f"## {name}: FAILED with {type(e).__name__}\n\n```\n{traceback.format_exc(limit=6)}```",
                       failed=True)
    report.env["wall_s"] = round(time.perf_counter() - started, 1)
    report.write()
    print((args.out / "summary.md").read_text())
    return 1 if report.failed else 0


def fp32_checks(args, report: Report, prompts) -> None:
    device, skip = args.device, set(filter(None, args.skip.split(",")))
    pair = load_pair(args, "float32", device)
    rows = dc.greedy_vs_generate(pair, prompts, args.check_tokens, args.tree, device, "float32")
    text, failed = greedy_section(rows, "float32", strict=True)
    report.add("greedy_fp32", rows, text, failed)
    ref = json.loads(args.reference.read_text()) if args.reference.exists() else None
    if ref is None or ref.get("settings") != json.loads(json.dumps(reference_settings(args))):
        ref = cpu_reference(args, prompts)
        ref["source"] = f"computed now on this machine's CPU ({ref['machine']})"
    else:
        ref["source"] = f"{args.reference.name}: {ref['machine']}, torch {ref['torch']}"
    parity, text = tau_parity(rows, ref)
    report.add("tau_parity", parity, text)
    if "determinism" not in skip:
        same = dc.same_seed_twice(pair, prompts[:2], min(args.check_tokens, 48), args.tree, device)
        report.add("determinism", same, "## Same seed, same tokens (T=1, two runs)\n\n"
                   + md_table(same, ["suite", "method", "same", "len"]), not all(r["same"] for r in same))


def bf16_check(args, report: Report, prompts) -> None:
    pair = load_pair(args, "bfloat16", args.device)
    rows = dc.greedy_vs_generate(pair, prompts, args.check_tokens, args.tree, args.device, "bfloat16")
    report.add("greedy_bf16", rows, greedy_section(rows, "bfloat16", strict=False)[0])


def chi_check(args, report: Report, prompts) -> None:
    chi = dc.chi_square_on_device(args.device, args.chi_runs)
    lossy = chi[-1]
    power = (f"Each lossless case fails at p < {dc.ALPHA:g} (its false-alarm rate). The negative control "
             f"(target {dc.LOSSY_TARGET_PROBS}, draft {dc.LOSSY_DRAFT_PROBS}, k={dc.LOSSY_CONFIG.k}, depth 1) is "
             f"{lossy['tv']:.3f} in total variation from the target (exact enumeration on {args.device}); at "
             f"{lossy['runs']} runs the chance that it is missed is <= {lossy['miss']:.1e} (an exact binomial "
             f"bound, eval/device/power.py): power >= 1 - {lossy['miss']:.1e} (required: miss <= {dc.MAX_MISS:g}).")
    report.add("chi_square", chi, f"## Seeded chi-square on toy models, tensors and generators on {args.device}\n\n"
               f"{power}\n\n" + md_table(chi, ["case", "runs", "tokens", "dof", "p", "expect", "tv", "miss", "ok"]),
               not all(r["ok"] for r in chi))


def speed(args, report: Report, started: float) -> None:
    from eval.report.analysis import add_variant
    from eval.report.speed import phase_table, speed_table
    from eval.store.code_version import code_version

    device = args.device
    dtype = args.speed_dtype or ("bfloat16" if torch.device(device).type == "cuda" else "float32")
    pair = load_pair(args, dtype, device)
    root = args.out / "runs"
    storage.prepare_output_dir(root)
    meta = {"model": args.model, "device": device, "dtype": dtype, "torch_version": torch.__version__,
            "transformers_version": report.env["transformers"], "rheo_version": "0.1.0",
            "git_sha": report.env["git_sha"], "device_name": report.env["device_name"],
            "num_threads": torch.get_num_threads(), "code_version": code_version()}
    temps = [float(t) for t in args.temps.split(",")]
    items = dc.load_prompts(args.data_dir, args.items)
    first = dc.load_prompts(args.data_dir, min(args.sweep_items, args.items))
    trees = [{**args.tree, "tree_size": int(s)} for s in args.sweep.split(",") if s]

    def paper(prompts):
        return [(p, one) for t in temps for p in prompts
                for one in dc.reference_specs(t) + dc.tree_specs(args.tree, t)]
    # order: the first item(s) of every suite on every tree, then the other items on the paper tree,
    # so a run cut by the time limit still has a complete small picture
    plan = paper(first) + [(p, one) for tree in trees for t in temps for p in first for one in dc.tree_specs(tree, t)]
    if args.tuned:
        plan += [(p, one) for t in temps for one in tuned_specs(t) for p in first]
    plan += paper([p for p in items if p not in first])
    warm = dc.Prompt("warmup", -1, "warmup", "Say hello.")
    for one in dc.reference_specs(1.0) + dc.tree_specs(args.tree, 1.0):  # kernels, allocator, cuBLAS handles: untimed
        dc.timed_row(pair, meta, None, warm, one, 8)
    done, stopped, errors = 0, None, []
    for p, one in plan:
        if time.perf_counter() - started > args.time_limit:
            stopped = f"stopped at the time limit ({args.time_limit:.0f} s) after {done} of {len(plan)} generations"
            break
        try:
            dc.timed_row(pair, meta, root, p, one, args.max_new)
            done += 1
        except Exception as e:  # recorded, the plan goes on
            errors.append(f"{dc.label(one)} {p.suite}/{p.item_id} T={one.temperature:g} k={one.k} depth={one.depth} "
                          f"R={one.tree_size}: {type(e).__name__}: {e}")
    df = add_variant(storage.load_results(root))
    tables = {"speed": speed_table(df), "phases": phase_table(df)}
    for name, text in tables.items():
        if text:
            atomic_write_text(args.out / "tables" / f"{name}.md", text, record=True)
    note = stopped or f"all {len(plan)} generations done"
    if errors:
        note += f"; {len(errors)} FAILED:\n\n" + "\n".join(f"- {e}" for e in errors[:20])
    report.add("speed", {"dtype": dtype, "generations": done, "planned": len(plan), "note": note, "errors": errors},
               f"## Speed ({dtype}, {args.items} items x 6 suites x {args.max_new} tokens; sweep on "
               f"{args.sweep_items} item(s) per suite)\n\n{note}\n\n" + "\n\n".join(
                   t.replace("## ", "### ", 1) for t in tables.values() if t), failed=bool(errors))


def engine_check(args, report: Report, prompts) -> None:
    """eager against --engine: per call and per cycle on a random cost shape, per cycle on the embedded pair."""
    from eval.device.cycle_shapes import CostPair, load_cost_pair
    from eval.device.engine_check import engine_page, per_call, per_cycle

    cuda = torch.device(args.device).type == "cuda"
    dtype = args.speed_dtype or ("bfloat16" if cuda else "float32")
    shape = args.engine_shape or ("llama31_8b" if cuda else "tiny32")
    cost = load_cost_pair(shape, args.device, dtype, args.engine_reduce)
    repeats = 3 if cuda else 1  # a CPU rehearsal checks the path; its milliseconds are not what it is for
    calls, cycles = per_call(cost, args.engine, dtype), per_cycle(cost, args.engine, dtype, repeats=repeats)
    parity, late = [], time.perf_counter() - args.started > args.time_limit
    if not late:  # the embedded pair compiles graphs of its own
        embedded = load_pair(args, "float32", args.device)
        parity = per_cycle(CostPair(args.model, embedded.target, embedded.drafter, embedded.target.vocab_size),
                           args.engine, "float32", new_tokens=min(args.check_tokens, 48))
    text = engine_page(calls, cycles, parity, engine=args.engine, shape=shape, dtype=dtype, device=args.device,
                       repeats=repeats, model=args.model, late=late, time_limit=args.time_limit)
    report.add("engine", {"calls": calls, "cycles": cycles, "embedded": parity}, text,
               not all(r["ok"] for r in calls + cycles + parity))


def tuned_specs(temperature: float) -> list[SpecConfig]:
    """The trees of configs/experiment/tuned_{topk,rheo}.yaml at ``temperature``, read without omegaconf."""
    out = []
    for method, name in (("topk", "tuned_topk"), ("rheo", "tuned_rheo")):
        path = ROOT / "configs" / "experiment" / f"{name}.yaml"
        if not path.exists():
            continue
        vals = {}
        for line in path.read_text().splitlines():
            key, _, value = line.strip().partition(":")
            if key in ("k", "m", "depth", "tree_size") and value.strip():
                vals[key] = int(value)
        out.append(SpecConfig.for_method(method=method, temperature=temperature, **{**dc.PAPER_TREE, **vals}))
    return out


if __name__ == "__main__":
    run_main(main)
