"""A plan on N GPUs (``rheo plan --gpus N``): each job's hours, checked against the SLURM launcher's
time limit, and the wall time when the jobs share N GPUs.

* A job's hours are those of the configurations it is the first to hold (eval.plan.totals.JobCost):
  jobs that share a configuration compute each of its rows once (eval.store.claims).
* The time limit is the launcher's ``timeout_min`` (configs/hydra/launcher/<name>.yaml; the one a
  ``hydra/launcher=NAME`` override names, else :data:`DEFAULT_LAUNCHER`), or a
  ``hydra.launcher.timeout_min=N`` override of the command.
* Wall time: the jobs that time nothing against each other (the tau studies) run N at a time, every
  command's at once, longest first on the GPU that frees first; the timed jobs (an AR baseline or
  ``alongside`` methods beside: the speed part) run after them, one at a time, alone on the node.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import yaml

from eval.plan.totals import JobCost
from rheo.paths import REPO_ROOT

LAUNCHERS = REPO_ROOT / "configs" / "hydra" / "launcher"
DEFAULT_LAUNCHER = "slurm_gpu"


@dataclass(frozen=True)
class TimeLimit:
    minutes: float
    source: str  # where it was read, in words


def time_limit(overrides: Sequence[str], folder: Path = LAUNCHERS) -> Optional[TimeLimit]:
    """The time limit a job of a command with ``overrides`` gets on SLURM (None: no SLURM launcher config)."""
    for word in overrides:
        key, _, value = word.partition("=")
        if key.lstrip("+") == "hydra.launcher.timeout_min":
            return TimeLimit(float(value), f"the override {word}")
    name = next((w.partition("=")[2] for w in overrides if w.startswith("hydra/launcher=")), DEFAULT_LAUNCHER)
    path = folder / f"{name}.yaml"
    if not path.is_file():
        return None
    minutes = (yaml.safe_load(path.read_text()) or {}).get("timeout_min")
    rel = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return None if minutes is None else TimeLimit(float(minutes), f"{rel} timeout_min: {minutes:g}")


def longest_first(hours: Sequence[float], gpus: int) -> float:
    """Wall hours of ``hours`` on ``gpus`` GPUs, longest job first onto the GPU that frees first."""
    free = [0.0] * gpus
    for h in sorted(hours, reverse=True):
        heapq.heapreplace(free, free[0] + h)
    return max(free)


def wall_hours(jobs: Sequence[JobCost], gpu: str, gpus: int) -> tuple[float, float, float]:
    """(wall, of which the untimed jobs together, of which the timed jobs alone) on ``gpus`` GPUs of kind ``gpu``."""
    together = longest_first([j.hours[gpu] for j in jobs if not j.timed], gpus)
    alone = sum(j.hours[gpu] for j in jobs if j.timed)
    return together + alone, together, alone

