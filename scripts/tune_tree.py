"""Tune the draft tree for this machine (eval/tuning.py): costs per dtype, tau per shape, best shape.

    python scripts/tune_tree.py [--model smollm2_135m] [--dtypes float32,bfloat16]
        [--shapes 4x4x8,6x5x16,8x6x24,10x8x60] [--prompts 12] [--max-new 64] [--temps 0,1]
        [--out results/tune] [--config-dir configs/experiment] [--threads 1]

Per dtype: the target's cost of scoring n nodes (``--nodes``), the head's cost per
drafted layer (``--widths``), the commit cost, and AR tokens/s on the tuning prompts.
In ``--tau-dtype`` (default: the dtype whose 16-node tree is cheapest): tau, tokens/s
and the core's per-cycle cost of Top-K and Rheo m=1 for every shape at every T.
Writes ``<out>/tune.json`` (everything measured), ``tune.md`` (tables) and
``speedup_vs_tree.png`` (expected and measured speedup vs tree size), and the best
shape per method as ``<config-dir>/tuned_topk.yaml`` / ``tuned_rheo.yaml`` (stamped
with the machine), used by ``make speed``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from baselines import AR  # noqa: E402
from eval import tuning  # noqa: E402
from rheo.config import SpecConfig  # noqa: E402
from rheo.methods import get_method  # noqa: E402
from rheo.timing import device_name  # noqa: E402
from rheo.placement import DTYPES as PLACEMENT_DTYPES
from rheo.cli import ArgumentParser, positive_int, run_main

DTYPES = PLACEMENT_DTYPES
#: the tuned methods: (name, the fields they are tuned with besides the tree shape)
METHODS = (("topk", {}), ("rheo", {"m": 1}))
DEFAULT_SHAPES = "2x2x2,3x2x4,4x3x6,4x4x8,6x4x12,6x5x16,8x6x24,10x8x60"


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for part in text.split(","):
        try:
            k, depth, size = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {part!r} is not KxDEPTHxR (e.g. 8x6x24)") from None
        shapes.append((k, depth, size))
    return shapes


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2_135m")
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("results/tune"))
    ap.add_argument("--config-dir", type=Path, default=Path("configs/experiment"))
    ap.add_argument("--costs-only", action="store_true", help="measure and print the costs per dtype; no tau runs")
    ap.add_argument("--replot", action="store_true", help="only redraw <out>/speedup_vs_tree.png from <out>/tune.json")
    args = ap.parse_args(argv)
    if args.replot:
        figure(json.loads((args.out / "tune.json").read_text()), args.out / "speedup_vs_tree.png")
        return 0
    torch.set_num_threads(args.threads)
    from rheo.models import load_model_pair

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
        for t in temps:
            ar = tuning.run_tau(pair, prompts, SpecConfig(method=AR.name, temperature=t), args.max_new, args.seed,
                                args.device)
            report[AR.name].append({"dtype": dtype, "temperature": t, "tokens_per_s": ar.tokens_per_s,
                                 "new_tokens": ar.new_tokens, "wall_s": ar.wall_s})
            print(f"[{dtype}] AR T={t:g}: {ar.tokens_per_s:.1f} tok/s")
    if args.costs_only:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "costs.json").write_text(json.dumps(_jsonable(report), indent=1))
        print(f"wrote {args.out}/costs.json")
        return 0
    tau_dtype = args.tau_dtype or min(dtypes, key=lambda d: tuning._interp(report["costs"][d]["target_ms"], 16))
    report["tau_dtype"] = tau_dtype
    pair = pairs[tau_dtype]
    prompts = [pair.format_chat([{"role": "user", "content": t}]) for t in texts]
    ar_tps = {(a["dtype"], a["temperature"]): a["tokens_per_s"] for a in report[AR.name]}
    for shape in shapes:
        for name, fields in METHODS:
            for t in temps:
                spec = tuning.tree_spec(name, shape, t, **fields)
                run = tuning.run_tau(pair, prompts, spec, args.max_new, args.seed, args.device)
                method = run.method
                measured = run.tokens_per_s / ar_tps[(tau_dtype, t)]
                report["runs"].append({"method": method, "shape": list(shape), "temperature": t, "dtype": tau_dtype,
                                       "tau": run.tau, "tokens_per_s": run.tokens_per_s, "core_ms": run.core_ms,
                                       "measured_speedup": measured, "new_tokens": run.new_tokens,
                                       "target_calls": run.target_calls, "phases_ms": run.phases_ms})
                for dtype in dtypes:
                    exp = tuning.expected(report["costs"][dtype], run)
                    report["expected"].append({"method": method, "shape": list(shape), "temperature": t,
                                               "dtype": dtype, "tau": run.tau, "cycle_ms": exp["cycle_ms"],
                                               "expected_tokens_per_s": exp["tokens_per_s"],
                                               "expected_speedup": exp["tokens_per_s"] / ar_tps[(dtype, t)]})
                print(f"{method:9s} {shape} T={t:g}: tau {run.tau:.2f}, measured {run.tokens_per_s:.1f} tok/s "
                      f"({measured:.2f}x AR, {tau_dtype}), core {run.core_ms:.1f} ms/cycle")
    tuned = {label(name, fields): SpecConfig(method=name, **fields) for name, fields in METHODS}
    report["best"] = {m: tuning.pick_best(report["expected"], m) for m in tuned}
    report["wall_s"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune.json").write_text(json.dumps(_jsonable(report), indent=1))
    (args.out / "tune.md").write_text(markdown(report))
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


def label(method: str, fields: dict) -> str:
    """The variant label of a tuned method ("rheo m=1"), as the report and the tables name it."""
    return get_method(method).variant(SpecConfig(method=method, **fields))


def write_config(folder: Path, spec: SpecConfig, best: dict, report: dict) -> Path:
    """configs/experiment/tuned_<method>.yaml: ``spec``'s method and fields on the best shape."""
    name, method = f"tuned_{spec.method}", get_method(spec.method).variant(spec)
    k, depth, size = best["shape"]
    m_line = f"  m: {spec.m}\n" if "m" in get_method(spec.method).fields else ""
    text = (f"# @package _global_\n"
            f"# Tree tuned by measurement (scripts/tune_tree.py, `make tune`) for {method}: best expected tokens/s\n"
            f"# averaged over T in {report['temperatures']} ({best['expected_tokens_per_s']:.1f} tok/s).\n"
            f"# Tuned on: {report['machine']} (host {report['host']}), device {report['device']}, "
            f"{report['threads']} thread(s), torch {report['torch']}, {report['date']}.\n"
            f"# Tau from {report['prompts']} held-out training-style prompts x {report['max_new_tokens']} tokens.\n"
            f"# Another machine: rerun `make tune`. A speed experiment (like experiment=speed) on this tree:\n"
            f"#   python -m eval.run -m experiment={name} limit=2 max_new_tokens=128 num_threads=1\n"
            f"defaults:\n  - override /dataset: all\n  - override /method: {spec.method}\n"
            f"experiment: {name}\n"
            f"baseline: true\npaired_baseline: true\nprofile_phases: true\n"
            f"dtype: {best['dtype']}\n"
            f"method:\n{m_line}"
            f"  k: {k}\n  depth: {depth}\n  tree_size: {size}\n"
            f"hydra:\n  sweeper:\n    params:\n      temperature: {','.join(str(float(t)) for t in report['temperatures'])}\n")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def markdown(report: dict) -> str:
    lines = [f"# Tree tuning on {report['machine']}", "",
             f"device {report['device']}, {report['threads']} thread(s), torch {report['torch']}, {report['date']}; "
             f"tau from {report['prompts']} held-out training-style prompts x {report['max_new_tokens']} tokens, "
             f"measured in {report['tau_dtype']}; {report['wall_s']:.0f} s in all.", "",
             "## Costs (median ms)", "", "| dtype | " + " | ".join(f"target n={n}" for n in
                                                                  next(iter(report["costs"].values()))["target_ms"])
             + " | head/layer (f=K) | commit |"]
    first = next(iter(report["costs"].values()))
    lines.append("|---" * (len(first["target_ms"]) + 3) + "|")
    for dtype, c in report["costs"].items():
        heads = ", ".join(f"{f}:{v:.1f}" for f, v in c["head_ms"].items())
        lines.append(f"| {dtype} | " + " | ".join(f"{v:.1f}" for v in c["target_ms"].values())
                     + f" | {heads} | {c['commit_ms']:.1f} |")
    lines += ["", "AR tokens/s: " + ", ".join(f"{a['dtype']} T={a['temperature']:g}: {a['tokens_per_s']:.1f}"
                                             for a in report[AR.name]), "",
              "## Shapes (tau measured; speedup over AR in the same dtype and T)", "",
              "| method | K | depth | R | T | tau | core ms | " + " | ".join(
                  f"expected {d}" for d in report["costs"]) + f" | measured ({report['tau_dtype']}) |",
              "|---" * (7 + len(report["costs"]) + 1) + "|"]
    exp = {(e["method"], tuple(e["shape"]), e["temperature"], e["dtype"]): e for e in report["expected"]}
    for r in report["runs"]:
        k, depth, size = r["shape"]
        cells = [f"{exp[(r['method'], (k, depth, size), r['temperature'], d)]['expected_speedup']:.2f}x"
                 for d in report["costs"]]
        lines.append(f"| {r['method']} | {k} | {depth} | {size} | {r['temperature']:g} | {r['tau']:.2f} | "
                     f"{r['core_ms']:.1f} | " + " | ".join(cells) + f" | {r['measured_speedup']:.2f}x |")
    lines += ["", "## Picked (best expected tokens/s, mean over T)", ""]
    for m, b in report["best"].items():
        if b:
            lines.append(f"- {m}: K={b['shape'][0]} depth={b['shape'][1]} R={b['shape'][2]}, {b['dtype']}, "
                         f"{b['expected_tokens_per_s']:.1f} tok/s expected")
    return "\n".join(lines) + "\n"


def figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.analysis import display_name

    temps = report["temperatures"]
    fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4), squeeze=False)
    for ax, t in zip(axes[0], temps):
        for method, color in zip([label(n, f) for n, f in METHODS], ("tab:blue", "tab:orange")):
            for dtype, style in zip(report["costs"], ("-", "--", ":")):
                pts = sorted((e["shape"][2], e["expected_speedup"]) for e in report["expected"]
                             if e["method"] == method and e["temperature"] == t and e["dtype"] == dtype)
                if pts:
                    ax.plot(*zip(*pts), style, color=color, marker=".", label=f"{display_name(method)} expected, {dtype}")
            pts = sorted((r["shape"][2], r["measured_speedup"]) for r in report["runs"]
                         if r["method"] == method and r["temperature"] == t)
            if pts:
                ax.plot(*zip(*pts), "o", color=color, mfc="none", ms=8,
                        label=f"{display_name(method)} measured, {report['tau_dtype']}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("tree size R (drafted nodes kept)")
        ax.set_ylabel("speedup over AR, same dtype (×)")
        ax.set_title(f"T={t:g}")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    fig.suptitle(f"Speedup vs tree size: {report['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    run_main(main)
