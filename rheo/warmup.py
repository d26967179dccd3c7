"""Compiles out of timed generations (``engine="graphs"``, :mod:`rheo.engine`).

The compiled engine makes a graph per cache bucket (capacities double from
:data:`rheo.models.static_target.MIN_CAPACITY`) and per tree bucket, the first time a call needs it. A
generation whose prompt and new tokens reach a bucket no earlier call reached compiles it in the middle
of its own time. :func:`warm` runs, untimed, one short generation inside each bucket that a set of
prompts can reach with ``max_new_tokens`` new tokens (:func:`reached`), so that the timed generations
after it compile nothing; :func:`rheo.engine.compile_count` before and after a timed generation says
whether that held (the harness stores it in each row, ``compiles``).

A warm-up generation of a bucket runs enough cycles for every compiled function to be called (the
captured build compiles at a configuration's second tree, :class:`rheo.captured_build.CapturedBuilder`),
and the target's commit is called once more on its own (a cycle commits through it only when the
accepted path is not already in place). Not warmed: a tree pruned below its size bucket when fewer slots
were drafted than ``tree_size`` (rare), and the other setting of an adaptive preset that the warm-up's
cycles did not choose; a row that compiles says so in its ``compiles``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence

import torch

from rheo.config import SpecConfig
from rheo.engine import compile_count, engine_target
from rheo.methods import get_method
from rheo.models.static_target import MIN_CAPACITY, capacity_bucket, tree_bucket

__all__ = ["reached", "warm", "warm_prompt"]

#: the attribute of a graphs target twin that keeps the (spec, capacity) pairs already warmed
_WARMED = "_rheo_warmed"


def _tree_rows(spec: SpecConfig) -> int:
    """Rows of the target's scoring call: the padded tree, 1 for a method without a tree (AR)."""
    return 1 if get_method(spec.method).is_reference else tree_bucket(spec.tree_size + 1)


def _room(spec: SpecConfig) -> int:
    """Rows past the committed ones that a call may need: the padded tree (target) or a padded extend (head)."""
    return max(_tree_rows(spec), spec.depth + 1)


def _cycles_tokens(spec: SpecConfig) -> int:
    """New tokens of a warm-up generation: at least three cycles even when every tree is accepted whole."""
    return 3 if get_method(spec.method).is_reference else 3 * (spec.depth + 1) + 1


def reached(prompt_len: int, max_new_tokens: int, spec: SpecConfig, smallest: int = MIN_CAPACITY) -> list[int]:
    """The cache capacities (target's and head's) a generation of ``max_new_tokens`` after a
    ``prompt_len``-token prompt can use: from the prompt's bucket to that of its last call."""
    first = capacity_bucket(max(prompt_len - 1, 1), smallest)
    last = capacity_bucket(prompt_len - 1 + max_new_tokens + _room(spec), smallest)
    out, c = [], first
    while c <= last:
        out.append(c)
        c *= 2
    return out


def warm_prompt(capacity: int, spec: SpecConfig, filler: Sequence[int], context: Optional[int] = None) -> list[int]:
    """A prompt (``filler`` repeated) whose warm-up generation runs inside bucket ``capacity``: as long as
    the bucket holds it with the warm-up's tokens and the padded calls (and the model's ``context`` length,
    when given, holds it with those tokens)."""
    length = capacity - _cycles_tokens(spec) - _room(spec)
    if context is not None:
        length = min(length, int(context) - _cycles_tokens(spec))
    length = max(2, length)
    reps = -(-length // max(1, len(filler)))
    return (list(filler) * reps)[:length]


def warm(run: Callable[[list[int], int], Any], spec: SpecConfig, target: Any, prompt_lengths: Iterable[int],
         max_new_tokens: int, filler: Sequence[int]) -> int:
    """Under ``spec.engine == "graphs"``, one untimed generation ``run(prompt, new_tokens)`` (no EOS: it
    must run its cycles) inside each bucket that ``prompt_lengths`` and ``max_new_tokens`` reach and no
    earlier call warmed for ``spec`` on ``target`` (the eager target; its graphs twin keeps what was
    warmed), plus the target's commit at that bucket. Returns the graphs compiled (0 for other engines).
    Call it in the grad mode the timed generations run in (``torch.inference_mode()`` in the harness): a
    graph compiled in another mode does not serve them."""
    if spec.engine != "graphs":
        return 0
    twin = engine_target(target, spec.engine)
    done = twin.__dict__.setdefault(_WARMED, set())
    smallest = getattr(twin, "min_capacity", MIN_CAPACITY)
    need = sorted({c for n in prompt_lengths for c in reached(int(n), max_new_tokens, spec, smallest)})
    before = compile_count()
    for capacity in need:
        if (spec, capacity) in done:
            continue
        run(warm_prompt(capacity, spec, filler, getattr(target, "context_length", None)), _cycles_tokens(spec))
        rows = _tree_rows(spec)
        if rows > 1:
            with torch.no_grad():  # the commit that moves rows, on scratch rows (a session's prefill writes what it reads)
                twin.commit_fn(twin.buffers(capacity), torch.zeros((), dtype=torch.long, device=twin.device),
                               torch.zeros(rows, dtype=torch.long, device=twin.device))
        done.add((spec, capacity))
    return compile_count() - before
