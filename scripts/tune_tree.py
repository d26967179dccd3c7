"""Tune the draft tree for this machine (eval/device/tuning.py): costs per dtype, tau per shape, best shape.

    python scripts/tune_tree.py [--model smollm2_135m] [--dtypes float32,bfloat16]
        [--shapes 4x4x8,6x5x16,8x6x24,10x8x60] [--prompts 12] [--max-new 64] [--temps 0,1]
        [--out outputs/tune] [--config-dir outputs/experiment/mine] [--threads 1]

Per dtype: the target's cost of scoring n nodes (``--nodes``), the head's cost per
drafted layer (``--widths``), the commit cost, and AR tokens/s on the tuning prompts.
In ``--tau-dtype`` (default: the dtype whose 16-node tree is cheapest): tau, tokens/s
and the core's per-cycle cost of Top-K and Rheo m=1 for every shape at every T.
Writes ``<out>/tune.json`` (everything measured), ``tune.md`` (tables) and
``speedup_vs_tree.png`` (expected and measured speedup vs tree size), and the best
shape per method as ``<config-dir>/tuned_topk.yaml`` / ``tuned_rheo.yaml`` (stamped
with the machine): ``experiment=mine/tuned_topk``, which ``make reproduce-speed`` and ``rheo generate``
prefer to the committed presets. Nothing committed is written (``make publish`` copies them there).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import socket
import time
from pathlib import Path

import torch

from baselines import AR
from eval.device import tuning
from eval.device.tuning import METHODS, label
from eval.device.tuning_report import figure, markdown
from eval.store.committed import refuse_committed
from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.config import SpecConfig
from rheo.io import atomic_write_text
from rheo.methods import get_method
from rheo.paths import REPO_ROOT, TUNED_PRESETS, announce, folder, out_root
from rheo.placement import DTYPES as PLACEMENT_DTYPES
from rheo.timing import device_name

DTYPES = PLACEMENT_DTYPES
DEFAULT_MODEL = "smollm2_135m"
DEFAULT_SHAPES = "2x2x2,3x2x4,4x3x6,4x4x8,6x4x12,6x5x16,8x6x24,10x8x60"


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for part in text.split(","):
        try:
            k, depth, size = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {part!r} is not KxDEPTHxR (e.g. 8x6x24)") from None
        if min(k, depth, size) < 1:
            raise SystemExit(f"--shapes: {part!r} needs K, DEPTH and R >= 1 (e.g. 8x6x24)")
        shapes.append((k, depth, size))
    return shapes


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse(argv):
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--nodes", default="1,2,4,8,12,16,24,32,48,64", help="tree sizes (root included) to time")
    ap.add_argument("--widths", default="1,2,4,6,8,10,12", help="head frontier widths to time")
    ap.add_argument("--reps", type=positive_int, default=7)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="candidate KxDEPTHxR shapes")
    ap.add_argument("--prompts", type=positive_int, default=12, help="held-out training-style prompts for tau")
    ap.add_argument("--max-new", type=positive_int, default=64)
    ap.add_argument("--temps", default="0,1")
    ap.add_argument("--tau-dtype", default=None, help="dtype of the tau runs (default: cheapest 16-node tree)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--out", type=Path, default=folder("out", "tune"))
    ap.add_argument("--config-dir", type=Path, default=folder("out", "experiment", "mine"),
                    help="where the tuned presets go (default: this machine's, experiment=mine/tuned_<method>)")
    ap.add_argument("--costs-only", action="store_true", help="measure and print the costs per dtype; no tau runs")
    ap.add_argument("--replot", action="store_true", help="only redraw <out>/speedup_vs_tree.png from <out>/tune.json")
    args = ap.parse_args(argv)
    for flag in ("nodes", "widths"):  # checked now, not after minutes of measuring
        text = getattr(args, flag)
        try:
            values = ints(text)
        except ValueError:
            values = []
        if not values or min(values) < 1:
            ap.error(f"--{flag} {text!r}: give integers >= 1, comma-separated (e.g. 1,2,4)")
    parse_shapes(args.shapes)
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} is an existing file: give a folder for tune.json, tune.md and the figure")
    refuse_committed(args.out / "tune.json", *(args.config_dir / name for name in TUNED_PRESETS),
                     source="make tune")  # before minutes of measuring
    return args


def measure_dtypes(args, dtypes: list[str], texts: list[str], nodes: list[int], widths: list[int],
                   report: dict) -> dict:
    """Per dtype: the costs (report["costs"]) and AR tokens/s at each T (report[AR.name]); the pairs by dtype."""
    from rheo.models import load_model_pair

    pairs = {}
    for dtype in dtypes:
        pair = load_model_pair(args.model, device=args.device, dtype=DTYPES[dtype])
        pairs[dtype] = pair
        prompts = [pair.format_chat([{"role": "user", "content": t}]) for t in texts]
        context = [t for p in prompts[:4] for t in p][:256]
        costs = tuning.measure_costs(pair, context, nodes, widths, args.reps, args.device, args.seed)
        report["costs"][dtype] = costs
        print(f"[{dtype}] target ms by nodes: " + ", ".join(f"{n}:{v:.1f}" for n, v in costs["target_ms"].items()))
        print(f"[{dtype}] head ms per layer by width: " + ", ".join(f"{f}:{v:.1f}" for f, v in costs["head_ms"].items())
              + f"; commit {costs['commit_ms']:.1f} ms")
        for t in report["temperatures"]:
            ar = tuning.run_tau(pair, prompts, SpecConfig.for_method(method=AR.name, temperature=t), args.max_new, args.seed,
                                args.device)
            report[AR.name].append({"dtype": dtype, "temperature": t, "tokens_per_s": ar.tokens_per_s,
                                 "new_tokens": ar.new_tokens, "wall_s": ar.wall_s})
            print(f"[{dtype}] AR T={t:g}: {ar.tokens_per_s:.1f} tok/s")
    return pairs


def measure_shapes(args, pair, texts: list[str], shapes: list[tuple[int, int, int]], report: dict) -> None:
    """Tau runs of every tuned method on every shape at every T in report["tau_dtype"] (report["runs"]),
    and their expected speedup in every dtype (report["expected"])."""
    tau_dtype = report["tau_dtype"]
    prompts = [pair.format_chat([{"role": "user", "content": t}]) for t in texts]
    ar_tps = {(a["dtype"], a["temperature"]): a["tokens_per_s"] for a in report[AR.name]}
    for shape in shapes:
        for name, fields in METHODS:
            for t in report["temperatures"]:
                spec = tuning.tree_spec(name, shape, t, **fields)
                run = tuning.run_tau(pair, prompts, spec, args.max_new, args.seed, args.device)
                method = run.method
                measured = run.tokens_per_s / ar_tps[(tau_dtype, t)]
                report["runs"].append({"method": method, "shape": list(shape), "temperature": t, "dtype": tau_dtype,
                                       "tau": run.tau, "tokens_per_s": run.tokens_per_s, "core_ms": run.core_ms,
                                       "measured_speedup": measured, "new_tokens": run.new_tokens,
                                       "target_calls": run.target_calls, "phases_ms": run.phases_ms})
                for dtype in report["costs"]:
                    exp = tuning.expected(report["costs"][dtype], run)
                    report["expected"].append({"method": method, "shape": list(shape), "temperature": t,
                                               "dtype": dtype, "tau": run.tau, "cycle_ms": exp["cycle_ms"],
                                               "expected_tokens_per_s": exp["tokens_per_s"],
                                               "expected_speedup": exp["tokens_per_s"] / ar_tps[(dtype, t)]})
                print(f"{method:9s} {shape} T={t:g}: tau {run.tau:.2f}, measured {run.tokens_per_s:.1f} tok/s "
                      f"({measured:.2f}x AR, {tau_dtype}), core {run.core_ms:.1f} ms/cycle")


def main(argv=None) -> int:
    args = parse(argv)
    announce()
    if args.replot:
        figure(json.loads((args.out / "tune.json").read_text()), args.out / "speedup_vs_tree.png")
        return 0
    torch.set_num_threads(args.threads)
    dtypes = [d for d in args.dtypes.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"--dtypes: unknown {d!r}; choose from {list(DTYPES)}")
    temps = [float(t) for t in args.temps.split(",")]
    shapes = parse_shapes(args.shapes)
    widths = sorted(set(ints(args.widths)) | {k for k, _, _ in shapes})
    nodes = sorted(set(ints(args.nodes)) | {1})
    texts = tuning.tuning_prompts(args.prompts, args.seed)
    started = time.perf_counter()
    report = {"machine": device_name(args.device), "host": socket.gethostname(), "device": args.device,
              "torch": torch.__version__, "threads": args.threads, "model": args.model,
              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "prompts": len(texts), "max_new_tokens": args.max_new, "temperatures": temps,
              "costs": {}, AR.name: [], "runs": [], "expected": []}
    pairs = measure_dtypes(args, dtypes, texts, nodes, widths, report)
    if args.costs_only:
        atomic_write_text(args.out / "costs.json", json.dumps(_jsonable(report), indent=1), record=True)
        print(f"wrote {args.out}/costs.json")
        return 0
    tau_dtype = args.tau_dtype or min(dtypes, key=lambda d: tuning._interp(report["costs"][d]["target_ms"], 16))
    report["tau_dtype"] = tau_dtype
    measure_shapes(args, pairs[tau_dtype], texts, shapes, report)
    tuned = {label(name, fields): SpecConfig.for_method(method=name, **fields) for name, fields in METHODS}
    report["best"] = {m: tuning.pick_best(report["expected"], m) for m in tuned}
    report["wall_s"] = time.perf_counter() - started
    atomic_write_text(args.out / "tune.json", json.dumps(_jsonable(report), indent=1), record=True)
    atomic_write_text(args.out / "tune.md", markdown(report), record=True)
    figure(report, args.out / "speedup_vs_tree.png")
    for method, best in report["best"].items():
        if best is not None:
            write_config(args.config_dir, tuned[method], best, report)
    print(f"wrote {args.out}/tune.json, tune.md, speedup_vs_tree.png and tuned configs in {args.config_dir} "
          f"({report['wall_s']:.0f} s)")
    return 0


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def preset_path(folder: Path, name: str) -> str:
    """How Hydra names the preset ``folder/name.yaml``: its path under configs/experiment (``broad/tuned_topk``)
    or under the output root's experiment/ (``mine/tuned_topk``, on Hydra's search path), or just ``name``
    for a folder elsewhere (copy the file under <output root>/experiment/mine to use it)."""
    for root in (REPO_ROOT / "configs" / "experiment", out_root() / "experiment"):
        try:
            return (Path(folder).resolve().relative_to(root.resolve()) / name).as_posix()
        except ValueError:
            continue
    return name


def write_config(folder: Path, spec: SpecConfig, best: dict, report: dict) -> Path:
    """<folder>/tuned_<method>.yaml: ``spec``'s method and fields on the best shape."""
    name, method = f"tuned_{spec.method}", get_method(spec.method).variant(spec)
    k, depth, size = best["shape"]
    m_line = f"  m: {spec.m}\n" if "m" in get_method(spec.method).fields else ""
    model_arg = f" model={report['model']}" if report.get("model", DEFAULT_MODEL) != DEFAULT_MODEL else ""
    text = (f"# @package _global_\n"
            f"# Tree tuned by measurement (scripts/tune_tree.py, `make tune`) for {method}: best expected tokens/s\n"
            f"# averaged over T in {report['temperatures']} ({best['expected_tokens_per_s']:.1f} tok/s).\n"
            f"# Tuned on: {report['machine']} (host {report['host']}), device {report['device']}, "
            f"{report['threads']} thread(s), torch {report['torch']}, {report['date']}.\n"
            f"# Tau from {report['prompts']} held-out training-style prompts x {report['max_new_tokens']} tokens.\n"
            f"# Another machine: rerun `make tune`. A speed experiment (like experiment=speed) on this tree:\n"
            f"#   python -m eval.run -m experiment={preset_path(folder, name)}{model_arg} limit=2 max_new_tokens=128 "
            f"num_threads=1\n"
            f"defaults:\n  - override /dataset: all\n  - override /method: {spec.method}\n"
            f"experiment: {name}\n"
            f"baseline: true\npaired_baseline: true\nprofile_phases: true\n"
            f"dtype: {best['dtype']}\n"
            f"method:\n{m_line}"
            f"  k: {k}\n  depth: {depth}\n  tree_size: {size}\n"
            f"hydra:\n  sweeper:\n    params:\n      temperature: {','.join(str(float(t)) for t in report['temperatures'])}\n")
    return atomic_write_text(folder / f"{name}.yaml", text, record=True)


if __name__ == "__main__":
    run_main(main)
