"""The learning-rate plan of draft-head training: warm-up + cosine, fitted once to a time budget."""

from __future__ import annotations

import json
import math
import time

__all__ = ["warm_cosine", "BudgetFit"]


def warm_cosine(warmup: int, plan: dict):
    """lr factor of step s: linear warm-up over ``warmup`` steps, then a cosine to 0 at ``plan["total"]``
    (read at each step: ``minutes`` may shorten the plan once)."""
    def factor(s: int) -> float:
        total = plan["total"]
        return min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
    return factor


class BudgetFit:
    """Shortens the cosine plan once so that the run ends within ``minutes`` of ``t_start``:
    steps 5..25 of this process are timed, +5% for the evaluations."""

    def __init__(self, minutes: float, t_start: float) -> None:
        self.minutes, self.t_start, self.t_fit = minutes, t_start, None

    def observe(self, done: int, step: int, plan: dict) -> bool:
        """Called after each step (``done`` steps by this process); True once the plan was fitted."""
        if done == 5:
            self.t_fit = time.time()
        elif done == 25:
            per_step = (time.time() - self.t_fit) / 20 * 1.05
            left = 60 * self.minutes - (time.time() - self.t_start)
            plan.update(total=max(step + 1, min(plan["total"], step + int(left / per_step))), fitted=True)
            print(json.dumps(dict(planned_steps=plan["total"], sec_per_step=round(per_step, 2))), flush=True)
            return True
        return False
