"""``rheo plan TARGET [OVERRIDES...]``: what a sweep target would run, counted from the sweep's own
expansion (:mod:`eval.plan.expand`), with an estimated GPU time and disk for rows (:mod:`eval.plan.cost`).
Nothing is run or loaded but configs and prompt files.

    rheo plan reproduce-full model=llama31_8b_instruct device=cuda dtype=bfloat16
    rheo plan reproduce-full device=cuda dtype=bfloat16 --models llama31_8b_instruct,vicuna_13b_v13 --markdown
    rheo plan reproduce-full device=cuda dtype=bfloat16 --gpus 4   # each job's hours, the time limit, the wall time
    rheo plan --command experiment=main_table limit=2      # one harness command

OVERRIDES are the target's ``ARGS``, as ``make TARGET ARGS="..."`` takes them (``make TARGET PLAN=1
ARGS="..."`` runs ``rheo plan TARGET --args "..."``: every goal planned as one, nothing run).
"""

from __future__ import annotations

import re
import shlex
from typing import Optional, Sequence

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from eval.plan import cost, schedule
from eval.plan.expand import Command, expand, make_commands
from eval.plan.totals import Totals, totals
from eval.report.markdown import markdown_table
from rheo.cli import ArgumentParser, positive_int, run_main

#: a bad override (an unknown key, a missing config) is the user's error, said in one line
HYDRA_ERRORS = (HydraException, OmegaConfBaseException)

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
    p.add_argument("target", nargs="?", default=None, help="a make target that runs sweeps (e.g. reproduce-full); "
                   "several, space-separated in one argument, are planned as one (each configuration once)")
    p.add_argument("overrides", nargs="*", help="the target's ARGS: Hydra overrides (model=... device=cuda ...)")
    p.add_argument("--args", default="", help="the target's ARGS as one string, split as the shell splits "
                   "make's ARGS (make TARGET PLAN=1 passes it so); added before OVERRIDES")
    p.add_argument("--command", action="store_true",
                   help="plan one harness command instead of a target: the arguments are its overrides")
    p.add_argument("--models", default=None, help="comma-separated model names: one plan each (adds model=NAME)")
    p.add_argument("--tau", type=tokens_per_call, default=None,
                   help=f"tokens per target call assumed for tree methods, >= 1 (default {cost.DEFAULT_TAU:g}); a "
                        f"tree shallower than tau - 1 is priced at its depth + 1, the most it can emit")
    p.add_argument("--gpus", type=positive_int, default=None,
                   help="each job's hours against the SLURM launcher's time limit, and the wall time on N GPUs")
    p.add_argument("--markdown", action="store_true", help="one Markdown table row per model, then the assumptions")
    return p


def tokens_per_call(text: str) -> float:
    """argparse type of --tau: a finite number >= 1 (every target call emits at least its own token)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of tokens per target call, got {text!r}") from None
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 1 (every target call emits at least one "
                                         f"token; a tree at most its depth + 1), got {text}")
    return value


def plan(target: Optional[str], overrides: Sequence[str], one_command: bool = False) -> list[Command]:
    try:
        return _plan(target, overrides, one_command)
    except HydraException as e:  # "Could not override 'foo'. To append to your config use +foo=1": + is refused too
        found = re.match(r"Could not override '([^']+)'", str(e))
        if found and "not in" in str(e.__cause__ or e):
            raise ValueError(f"unknown config key {found.group(1)!r}: not a field of the run schema "
                             f"(eval/conf/schema.py); check the spelling (e.g. max_new_tokens, method.k)") from None
        raise


def _plan(target: Optional[str], overrides: Sequence[str], one_command: bool) -> list[Command]:
    if one_command:
        words = ([target] if target else []) + list(overrides)
        return [Command(words, expand(words))]
    if not target:
        raise ValueError("give a make target (e.g. rheo plan reproduce-full model=llama31_8b_instruct device=cuda), "
                         "or --command with a harness command's overrides")
    args = " ".join(shlex.quote(o) for o in overrides)
    return [c for goal in target.split() for c in make_commands(goal, args)]


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
                  f"  target calls        {t.calls:,} at most (tau {tau:g} for tree methods"
                  + "".join(f"; {label} {cap:g}, its depth + 1" for label, cap in sorted(t.capped.items())) + ")",
                  f"  disk for rows       {_size(t.disk_bytes)}",
                  "  estimated time      " + ("none: no shape known for this model (eval/plan/cost.py TARGET_SHAPES)"
                                              if t.unpriced else ", ".join(f"{g} {_hours(t, g)}" for g in t.hours)
                                              + " (one GPU; an estimate, see below)")]
        if not any(d.startswith("cuda") for d in t.devices):
            lines.append(f"  (these jobs run on {', '.join(sorted(t.devices))}: the GPU hours are for the same "
                         f"sweep with device=cuda)")
    lines += ["", "the estimate assumes (eval/plan/cost.py):"] + [f"  - {a}" for a in assumptions(tau, _engines(results.values()))]
    return "\n".join(lines)


def gpus_report(commands: Sequence[Command], t: Totals, gpus: int) -> list[str]:
    """Each job's hours, the jobs over the launcher's time limit, the wall time on ``gpus`` GPUs
    (eval.plan.schedule)."""
    if t.unpriced:
        return [f"  per job             none: no shape known for model {t.model}"]
    kinds = list(t.hours)
    lines = [f"  per job             hours on one GPU (the configurations a job is the first to hold; shared: "
             f"an earlier job's; * timed: runs alone)",
             "    " + "  ".join([f"{'job':<8}", *[f"{k:>8}" for k in kinds], "overrides"])]
    numbers: dict[int, int] = {}
    for j in t.per_job:
        numbers[j.command] = numbers.get(j.command, 0) + 1
        own = [o for o in j.overrides if o not in commands[j.command - 1].overrides]
        shared = not any(j.hours.values())  # every configuration of it is an earlier job's
        lines.append("    " + "  ".join([f"{j.command}.{numbers[j.command]}{'*' if j.timed else ''}".ljust(8),
                                         *[f"{'shared' if shared else _h(j.hours[k]):>8}" for k in kinds],
                                         " ".join(own) or "-"]))
    limits = [schedule.time_limit(j.overrides) for j in t.per_job]
    over = {k: [i for i, (j, lim) in enumerate(zip(t.per_job, limits)) if lim and j.hours[k] * 60 > lim.minutes]
            for k in kinds}
    known = next((lim for lim in limits if lim), None)
    if known is None:
        lines.append("  time limit          none found (no configs/hydra/launcher/slurm_gpu.yaml timeout_min)")
    elif not any(over.values()):
        lines.append(f"  time limit          every job fits in {_h(known.minutes / 60)} ({known.source})")
    else:
        said = "; ".join(f"{k}: {len(v)} job(s), the longest {_h(max(t.per_job[i].hours[k] for i in v))}"
                         for k, v in over.items() if v)
        lines.append(f"  time limit          {_h(known.minutes / 60)} ({known.source}) is exceeded on {said}: raise "
                     f"hydra.launcher.timeout_min, or split those jobs (limit=, dataset=); a job ended by the limit "
                     f"and requeued resumes from its stored rows")
    walls = []
    for k in kinds:
        wall, together, alone = schedule.wall_hours(t.per_job, k, gpus)
        walls.append(f"{k} {_h(wall)}" + (f" ({_h(together)} together + {_h(alone)} timed, alone)" if alone else ""))
    lines.append(f"  wall time on {gpus} GPU(s) " + ", ".join(walls))
    lines.append(f"    (untimed jobs of every command at once, {gpus} at a time, longest first; then the timed "
                 f"jobs one at a time, alone on the node)")
    return lines


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
    tau = cost.DEFAULT_TAU if args.tau is None else args.tau
    models = [m for m in (args.models or "").split(",") if m] or [None]
    if not args.command and "$" in " ".join([args.args, *args.overrides]):
        raise ValueError(f"ARGS {' '.join([args.args, *args.overrides]).strip()!r} holds '$', which make expands "
                         f"(a $(shell ...) would run while the plan runs nothing): rheo plan refuses it; write the "
                         f"values themselves")
    try:
        given = shlex.split(args.args)
    except ValueError as e:
        raise ValueError(f"--args {args.args!r} cannot be split as the shell would ({e})") from None
    collected: list[Totals] = []
    for model in models:
        overrides = given + list(args.overrides) + ([f"model={model}"] if model else [])
        commands = plan(args.target, overrides, args.command)
        results = totals(commands, tau)
        most = max((t.most_per_call for t in results.values()), default=0)
        if args.tau is not None and most and args.tau > most:
            raise ValueError(f"--tau {args.tau:g} is more tokens per target call than any tree of the plan can emit "
                             f"(at most {most}: the deepest tree's depth + 1): choose --tau <= {most}")
        collected += results.values()
        if not args.markdown:
            what = (f"python -m eval.run -m {' '.join([args.target or '', *overrides]).strip()}" if args.command
                    else f"make {args.target} ARGS=\"{' '.join(overrides)}\"")
            report = text_report(f"rheo plan: {what} (nothing was run)", commands, results, tau)
            if args.gpus:
                extra = [line for t in results.values() for line in ["", f"model {t.model} on {args.gpus} GPU(s):",
                                                                         *gpus_report(commands, t, args.gpus)]]
                at = report.index("\n\nthe estimate assumes")
                report = report[:at] + "\n" + "\n".join(extra) + report[at:]
            print(report, flush=True)
    if args.markdown:
        print(markdown_report(collected, tau))
    return 0


if __name__ == "__main__":
    run_main(main, "rheo plan", HYDRA_ERRORS)
