"""What one target call costs, by phase: aten ops, host syncs, ms, and the predicted speedup at a tau.

AR, Top-K, Rheo m=1 and rheo_auto at T = 0 and 1 on the paper tree (eval.device.cycle_cost;
what counts as an op and a sync: eval.device.op_counter; docs/gpu.md).

    python scripts/cycle_cost.py [--shape tiny32|llama31_8b|vicuna_13b|smollm2] [--device cuda]
        [--dtype bfloat16] [--reduce 8] [--new-tokens 24] [--tau 5.0] [--no-time] [--out DIR]
    python scripts/cycle_cost.py --rows results/speed.parquet --shape smollm2 --out outputs/tables/speed

``--engine static|graphs``: the same methods under that engine beside the eager one, counted with
torch.profiler (eval.device.profiled_cost: kernels launched, graph launches, host syncs and ms per
target call and phase), written to DIR/cycle_cost_<shape>_<device>_<engine>.{md,parquet}.

``--verifiers``: the verifier study's combinations (configs/compare_sets/verifiers.yaml) at T = 1 instead,
written to DIR/cycle_cost_verifiers_<shape>_<device>.{md,parquet} (eval.states.verifiers reads it).

``--rows``: count the configurations of a speed study's rows instead (eval.device.row_cost): ops, syncs
and predicted GPU speedup next to the CPU speedup the rows measured, written to DIR/launches.md.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pandas as pd

from eval.device.cycle_cost import cost_rows, cost_tables
from eval.device.cycle_shapes import SHAPES, load_cost_pair
from rheo.cli import ArgumentParser, positive_float, positive_int, run_main
from rheo.io import check_dir


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="tiny32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--reduce", type=positive_int, default=1, help="divide a random shape's widths by this")
    ap.add_argument("--new-tokens", type=positive_int, default=24)
    ap.add_argument("--prompt-len", type=positive_int, default=64)
    ap.add_argument("--tau", type=positive_float, default=5.0, help="tokens per call for the predicted speedup")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch threads (CPU)")
    ap.add_argument("--no-time", action="store_true", help="count only (no timed generations)")
    ap.add_argument("--engine", default=None, choices=("static", "graphs"),
                    help="profile the methods under this engine beside eager (torch.profiler counts)")
    ap.add_argument("--verifiers", action="store_true", help="the verifier study's combinations at T = 1")
    ap.add_argument("--rows", default=None, help="a speed study's rows (folder or archive): count their configurations")
    ap.add_argument("--out", default=None, help="folder for cycle_cost_<shape>.{md,parquet} (default: none, print)")
    args = ap.parse_args()
    if args.out:
        args.out = check_dir(args.out)  # before minutes of work: not the committed evidence, not a file
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    pair = load_cost_pair(args.shape, args.device, args.dtype, args.reduce)
    if args.rows:
        return launches(pair, args)
    if args.engine:
        return engine_costs(pair, args)
    extra = {}
    if args.verifiers:
        from eval.states.verifiers import compare_set_methods

        extra = dict(methods=(("AR", None), *compare_set_methods()), temperatures=(1.0,))
    rows = cost_rows(pair, args.new_tokens, args.prompt_len, timed=not args.no_time, **extra,
                     progress=lambda r: print(f"  {r['method']:<10} T={r['temperature']:g}: {r['ops']:,.0f} ops, "
                                              f"{r['syncs']:.1f} syncs per call", file=sys.stderr, flush=True))
    for r in rows:
        r.update(device=args.device, dtype=args.dtype, reduce=args.reduce)
    text = cost_tables(rows, args.tau)
    print(text)
    if args.out:
        from eval.store.committed import write_outputs

        out = Path(args.out)
        name = (f"cycle_cost_{'verifiers_' if args.verifiers else ''}{args.shape}"
                + (f"_r{args.reduce}" if args.reduce > 1 else "") + f"_{args.device}")
        blob = io.BytesIO()
        pd.DataFrame(rows).to_parquet(blob, index=False)
        title = f"# Cycle cost: {args.shape} on {args.device} ({args.dtype})\n\n"
        write_outputs([(out / f"{name}.md", (title + text).encode()), (out / f"{name}.parquet", blob.getvalue())],
                      f"{args.shape} on {args.device}")


def engine_costs(pair, args) -> None:
    """--engine: eager and the engine, profiled (module docstring)."""
    from eval.device.profiled_cost import profile_rows, profile_tables

    rows = profile_rows(pair, ("eager", args.engine), args.new_tokens, args.prompt_len,
                        progress=lambda r: print(f"  {r['engine']:<6} {r['method']:<10} T={r['temperature']:g}: "
                                                 f"{r['kernels']:,.0f} kernels, {r['graphs']:.1f} graph launches, "
                                                 f"{r['syncs']:.1f} syncs, {r['ms']:.1f} ms per call (warm-up "
                                                 f"{r['warm_s']:.0f} s)", file=sys.stderr, flush=True))
    for r in rows:
        r.update(device=args.device, dtype=args.dtype, reduce=args.reduce, new_tokens=args.new_tokens)
    text = profile_tables(rows)
    print(text)
    if args.out:
        from eval.store.committed import write_outputs

        out = Path(args.out)
        name = f"cycle_cost_{args.shape}_{args.device}_{args.engine}"
        blob = io.BytesIO()
        pd.DataFrame(rows).to_parquet(blob, index=False)
        write_outputs([(out / f"{name}.md", (f"# Cycle cost under engine={args.engine}: {args.shape} on {args.device} "
                                             f"({args.dtype}), eager beside\n\n{text}").encode()),
                       (out / f"{name}.parquet", blob.getvalue())], f"{args.shape} on {args.device}")


def launches(pair, args) -> None:
    """--rows: the launch table of a speed study's configurations (module docstring)."""
    from eval.device.row_cost import row_costs
    from eval.report.analysis import load
    from eval.store.storage import require_results_dir, rows_or_archive

    source = rows_or_archive(Path(args.rows))
    require_results_dir(source)
    counts, _, text = row_costs(pair, load(source), args.new_tokens, args.prompt_len,
                                progress=lambda r: print(f"  {r['method']:<10} T={r['temperature']:g} "
                                                         f"{r['config_hash']}: {r['ops']:,.0f} ops, {r['syncs']:.1f} "
                                                         "syncs per call", file=sys.stderr, flush=True))
    print(text)
    if args.out:
        from eval.store.committed import Outputs

        out = Path(args.out)
        blob = io.BytesIO()
        counts.to_parquet(blob, index=False)
        outputs = Outputs(out)
        outputs.add(out / "launches.md", text.encode())
        outputs.add(out / "launches.parquet", blob.getvalue())
        outputs.write((), source)
        print(f"wrote {out / 'launches'}.md and .parquet", file=sys.stderr)


if __name__ == "__main__":
    run_main(main)
