"""A plan's counts and estimates, per model: jobs, configurations, prompts, generations, tokens,
target calls, disk for rows and hours per GPU kind (:mod:`eval.plan.cost`).

A *configuration* is one folder of rows (output_dir, model, config_hash): jobs of a sweep that share
one (Top-K in an m sweep: m is not Top-K's) compute its rows once and the others skip them, as the
run loop does. A *generation* is one (configuration, suite, item, turn): one stored row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from eval.plan import cost
from eval.plan.expand import Command, Generation, Job


@dataclass
class Totals:
    model: str
    jobs: int = 0
    configurations: int = 0
    generations: int = 0
    tokens: int = 0  # new tokens, every generation at max_new_tokens (an upper bound)
    calls: int = 0  # target calls at the assumed tau
    disk_bytes: int = 0
    hours: dict[str, float] = field(default_factory=dict)  # GPU kind -> hours, one GPU, one job at a time
    device_hours: dict[str, float] = field(default_factory=dict)  # of which the device's own work (the floor)
    by_method: dict[str, int] = field(default_factory=dict)  # method label -> generations
    prompts: dict[int, int] = field(default_factory=dict)  # prompts per configuration -> configurations
    unpriced: set = field(default_factory=set)  # models without a shape: no hours
    devices: set = field(default_factory=set)  # the jobs' device settings
    engines: set = field(default_factory=set)  # the configurations' engines (each priced by its own table)
    per_job: list = field(default_factory=list)  # a JobCost per job, in the sweeps' order
    capped: dict = field(default_factory=dict)  # tree label -> the tau it was priced at (its depth + 1 < tau)
    most_per_call: int = 0  # the most tokens per call any tree of the plan can emit (its depth + 1)


@dataclass
class JobCost:
    """One job's hours per GPU kind: the configurations it is the first to hold (a later job that shares
    one reads its rows); ``timed``: it times rows against each other, so it runs alone."""

    command: int  # 1-based, as the plan numbers its commands
    overrides: list[str]
    hours: dict[str, float]
    timed: bool


def totals(commands: Sequence[Command], tau: float = cost.DEFAULT_TAU,
           gpus: Sequence[str] = tuple(cost.GPUS)) -> dict[str, Totals]:
    """model -> its Totals over every job of ``commands`` (configurations counted once)."""
    out: dict[str, Totals] = {}
    seen: set[tuple[str, str, str]] = set()
    for number, job in ((i, j) for i, c in enumerate(commands, 1) for j in c.jobs):
        t = out.setdefault(job.model, Totals(job.model, hours=dict.fromkeys(gpus, 0.0),
                                             device_hours=dict.fromkeys(gpus, 0.0)))
        t.jobs += 1
        t.devices.add(job.device)
        before = dict(t.hours)
        configs = job.configs[:1] if job.measure == "same_state" else job.configs
        for one in configs:
            where = (job.output_dir, job.model, one.config_hash)
            if where in seen:
                continue
            seen.add(where)
            _add(t, job, one, tau, len(job.configs) - 1 if job.measure == "same_state" else 0)
        t.per_job.append(JobCost(number, job.overrides, {g: t.hours[g] - before[g] for g in gpus}, job.timed))
    return out


def _add(t: Totals, job: Job, one: Generation, tau: float, compared: int) -> None:
    """One configuration's rows: ``compared`` trees scored at each of its states besides its own (same-state)."""
    rows = job.prompts
    if not one.reference:  # a tree emits at most its deepest path and one more token per call
        t.most_per_call = max(t.most_per_call, one.spec.depth + 1)
        if tau > one.spec.depth + 1:
            t.capped[one.label] = tau = one.spec.depth + 1
    per_row_calls = job.max_new_tokens if one.reference else cost.calls_per_generation(job.max_new_tokens, tau)
    t.configurations += 1
    t.generations += rows
    t.tokens += rows * job.max_new_tokens
    t.calls += rows * per_row_calls
    t.by_method[one.label] = t.by_method.get(one.label, 0) + rows
    t.prompts[rows] = t.prompts.get(rows, 0) + 1
    t.engines.add(one.spec.engine)
    t.disk_bytes += rows * cost.row_bytes(job.max_new_tokens, per_row_calls, one.expected)
    shape = cost.shape_of(job.model)
    if shape is None:
        t.unpriced.add(job.model)
        return
    spec = one.spec
    label = cost.cost_label(spec.method, None if one.reference else spec.proxy)
    nodes, steps = (1, 0) if one.reference else (spec.tree_size + 1, spec.depth)
    for name in t.hours:
        host, device = cost.ms_per_call(label, spec.temperature, shape, cost.GPUS[name], nodes, steps,
                                         spec.engine)
        trees = 1 + compared  # same-state: every compared tree is built and scored at each state too
        t.hours[name] += trees * rows * per_row_calls * max(host, device) / 3.6e6
        t.device_hours[name] += trees * rows * per_row_calls * device / 3.6e6
