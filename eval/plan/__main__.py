"""``rheo plan TARGET [OVERRIDES...]``: what a sweep target would run, counted from the sweep's own
expansion (:mod:`eval.plan.expand`), with an estimated GPU time and disk for rows (:mod:`eval.plan.cost`).
Nothing is run or loaded but configs and prompt files.

    rheo plan reproduce-full model=llama31_8b_instruct device=cuda dtype=bfloat16
    rheo plan reproduce-full device=cuda dtype=bfloat16 --models llama31_8b_instruct,vicuna_13b_v13 --markdown
    rheo plan --command experiment=main_table limit=2      # one harness command (make TARGET PLAN=1 uses it)

OVERRIDES are the target's ``ARGS``, as ``make TARGET ARGS="..."`` takes them.
"""

from __future__ import annotations

import shlex
from typing import Optional, Sequence

from eval.plan import cost
from eval.plan.expand import Command, expand, make_commands
from eval.plan.totals import Totals, totals
from eval.report.markdown import markdown_table
from rheo.cli import ArgumentParser, positive_float, run_main

ASSUMPTIONS = (
    "every generation runs to max_new_tokens (an upper bound: an answer that ends its turn earlier costs less)",
    "tree methods emit {tau:g} tokens per target call (--tau; the paper reports 5.04 for Top-K and 5.25 for "
    "Rheo on its pairs), AR and transformers generate 1",
    "a target call costs max(host, device): host = the ops it launches (results/tables/cycle_cost_tiny32_cpu"
    ".parquet, `make cycle-cost`: Llama-3.1-8B's 32 layers, the paper tree; the target's forward scaled by its "
    "layers / 32; T > 0 reads the T = 1 counts; Rheo at any m reads m = 1's) x {us:g} us per op (measured on "
    "one H200 on an 8B-shaped pair, eval.device.cycle_cost.US_PER_OP; taken to be the same on every GPU kind); "
    "device = the target's weights once and the head's once per draft step at the kind's memory bandwidth, "
    "plus 2 x parameters x scored tokens at its dense bf16 peak",
    "GPU kinds (SXM datasheets): {gpus}",
    "(device X h): the device's own work; where it is below the estimate the run is bound by the host's "
    "launches, and a faster GPU does not shorten it",
    "left out: prefill, the untimed warm-up, model loading, host slowdowns (results/gpu/README.md saw windows "
    "2x slower); one GPU, one job at a time",
    "disk: each row as eval.store.storage writes it (one parquet shard per generation, measured here)",
)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="rheo plan", description="Count what a sweep target would run (jobs, configurations, "
                       "prompts, generations, tokens) from the sweep's own expansion, and estimate its GPU time "
                       "and disk; nothing is run.")
    p.add_argument("target", nargs="?", default=None, help="a make target that runs sweeps (e.g. reproduce-full)")
    p.add_argument("overrides", nargs="*", help="the target's ARGS: Hydra overrides (model=... device=cuda ...)")
    p.add_argument("--command", action="store_true",
                   help="plan one harness command instead of a target: the arguments are its overrides")
    p.add_argument("--models", default=None, help="comma-separated model names: one plan each (adds model=NAME)")
    p.add_argument("--tau", type=positive_float, default=cost.DEFAULT_TAU,
                   help=f"tokens per target call assumed for tree methods (default {cost.DEFAULT_TAU:g})")
    p.add_argument("--markdown", action="store_true", help="one Markdown table row per model, then the assumptions")
    return p


def plan(target: Optional[str], overrides: Sequence[str], one_command: bool = False) -> list[Command]:
    if one_command:
        words = ([target] if target else []) + list(overrides)
        return [Command(words, expand(words))]
    if not target:
        raise ValueError("give a make target (e.g. rheo plan reproduce-full model=llama31_8b_instruct device=cuda), "
                         "or --command with a harness command's overrides")
    return make_commands(target, " ".join(shlex.quote(o) for o in overrides))


#: the cost line of a plan whose configurations run engine=graphs, and what its CPU counts predict
GRAPHS = (
    "under engine=graphs a target call costs max(host, device): host = its launches from the host, each graph "
    "launch and each kernel of a phase that launches no graph (the verifier's walk, what is left eager), from the "
    "engine=graphs rows of results/tables/cycle_cost_tiny32_cpu_graphs.parquet (`make cycle-cost ENGINE=graphs`: "
    "the same pair and tree; the target's forward scaled by its layers / 32; T > 0 reads the T = 1 counts) x {us:g} "
    "us per launch; device = the target's weights once and the head's once per draft step at the kind's memory "
    "bandwidth, plus 2 x parameters x scored tokens at its dense bf16 peak, plus {gap:g} us per kernel inside a "
    "graph (an assumed gap between a replayed graph's kernels, eval.plan.cost.US_PER_GRAPH_KERNEL; not measured)",
    "the engine=graphs counts were measured with Inductor on a CPU, where nothing is replayed: they predict how "
    "many launches the host makes per call and which phases stay eager; they do not predict CUDA's kernels (its "
    "Inductor fuses differently) nor their device time, which `make gpu-check GPU_ARGS='--engine graphs'` times on a GPU",
)


def assumptions(tau: float, engines: Sequence[str] = ("eager",)) -> list[str]:
    """The estimate's assumptions: each engine's cost line (eager's, graphs'), then the rest."""
    from eval.device.cycle_cost import US_PER_OP

    gpus = "; ".join(f"{g.name} {g.memory_gb:g} GB, {g.bandwidth_tbs:g} TB/s, {g.bf16_tflops:g} TFLOP/s"
                     for g in cost.GPUS.values())
    lines = [a.format(tau=tau, us=US_PER_OP, gpus=gpus) for a in ASSUMPTIONS]
    if "graphs" in engines:
        at = lines.index(next(a for a in lines if a.startswith("GPU kinds")))
        lines[at:at] = [g.format(us=US_PER_OP, gap=cost.US_PER_GRAPH_KERNEL) for g in GRAPHS]
    if "eager" not in engines:
        lines = [a for a in lines if not a.startswith("a target call costs")]
    return lines


def _engines(results: Sequence[Totals]) -> set[str]:
    """The engines a plan's configurations run (eager when none was priced)."""
    return set().union(*(t.engines for t in results)) or {"eager"}


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _h(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"
    return f"{hours:,.0f} h" if hours >= 10 else f"{hours:.1f} h"


def _hours(t: Totals, gpu: str) -> str:
    """'84 h (device 31 h)': the estimate, and the part of it the device itself works."""
    return "-" if t.unpriced else f"{_h(t.hours[gpu])} (device {_h(t.device_hours[gpu])})"


def text_report(title: str, commands: Sequence[Command], results: dict[str, Totals], tau: float) -> str:
    lines = [title, ""]
    for i, c in enumerate(commands, 1):
        guard = f" (runs only while {c.condition} is missing)" if c.condition else ""
        lines.append(f"command {i}: eval.run -m {' '.join(c.overrides)}{guard}: {len(c.jobs)} job(s)")
    for t in results.values():
        prompts = ", ".join(f"{n} configuration(s) x {p}" for p, n in sorted(t.prompts.items(), reverse=True))
        lines += ["", f"model {t.model}:",
                  f"  jobs                {t.jobs} (as the sweeps run them)",
                  f"  configurations      {t.configurations} (folders of rows; jobs that share one compute it once)",
                  f"  prompts             {prompts} (suite, item, turn)",
                  f"  generations         {t.generations:,} (one row each): "
                  + ", ".join(f"{m} {n:,}" for m, n in sorted(t.by_method.items())),
                  f"  new tokens          {t.tokens:,} at most",
                  f"  target calls        {t.calls:,} at most (tau {tau:g} for tree methods)",
                  f"  disk for rows       {_size(t.disk_bytes)}",
                  "  estimated time      " + ("none: no shape known for this model (eval/plan/cost.py TARGET_SHAPES)"
                                              if t.unpriced else ", ".join(f"{g} {_hours(t, g)}" for g in t.hours)
                                              + " (one GPU; an estimate, see below)")]
        if not any(d.startswith("cuda") for d in t.devices):
            lines.append(f"  (these jobs run on {', '.join(sorted(t.devices))}: the GPU hours are for the same "
                         f"sweep with device=cuda)")
    lines += ["", "the estimate assumes (eval/plan/cost.py):"] + [f"  - {a}" for a in assumptions(tau, _engines(results.values()))]
    return "\n".join(lines)


def markdown_report(results: Sequence[Totals], tau: float) -> str:
    gpus = list(cost.GPUS)
    head = ["model", "jobs", "configurations", "generations", "new tokens (at most)", "disk for rows",
            *[f"{g} (estimate)" for g in gpus]]
    rows = [[t.model, str(t.jobs), str(t.configurations), f"{t.generations:,}", f"{t.tokens:,}",
             _size(t.disk_bytes), *[_hours(t, g) for g in gpus]] for t in results]
    said = [f"- {a}" for a in assumptions(tau, _engines(results))]
    return "\n".join([markdown_table(head, rows), "", "The estimate assumes:", ""] + said)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    models = [m for m in (args.models or "").split(",") if m] or [None]
    collected: list[Totals] = []
    for model in models:
        overrides = list(args.overrides) + ([f"model={model}"] if model else [])
        commands = plan(args.target, overrides, args.command)
        results = totals(commands, args.tau)
        collected += results.values()
        if not args.markdown:
            what = (f"python -m eval.run -m {' '.join([args.target or '', *overrides]).strip()}" if args.command
                    else f"make {args.target} ARGS=\"{' '.join(overrides)}\"")
            print(text_report(f"rheo plan: {what} (nothing was run)", commands, results, args.tau), flush=True)
    if args.markdown:
        print(markdown_report(collected, args.tau))
    return 0


if __name__ == "__main__":
    run_main(main, "rheo plan")
