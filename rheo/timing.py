"""Where a generation's time goes: per-phase wall time of decoding cycles (a profiler switch).

Phases of one speculative cycle (:func:`rheo.decode.speculative_generate`):

* ``draft``  - the drafter's tree layers (``DraftSession.draft`` calls: the head);
* ``build``  - the rest of ``build_tree``: candidate selection, tree growth, pruning, mask
  (under ``engine=graphs`` the draft loop and the build are one compiled call: build holds both,
  draft is None);
* ``score``  - the target's forward over the pruned tree (``TargetSession.score_tree``;
  for a Llama target: the decoder and the output rows of the first-ranked chain);
* ``verify`` - ``verify_tree``, including the target's output rows (``lm_head``) of the
  visited nodes off that chain (``rheo.models.base.LazyLogits``);
* ``commit`` - KV compaction of the target plus the drafter's pass over the accepted
  tokens (``TargetSession.commit`` + ``DraftSession.commit``);
* ``other``  - what the cycle spends outside those (loop bookkeeping, list appends).

``prefill`` (once per generation, both models) is kept apart from the per-cycle means.
Autoregressive decoding has ``score``, ``verify`` (picking the token) and ``commit``.

CPU: ``time.perf_counter`` around each phase (CPU torch ops are synchronous). CUDA:
two CUDA events per phase, recorded on the current stream without a host sync and
read once, when the summary is taken (one ``torch.cuda.synchronize`` per
generation): each phase is the GPU-timeline time between its two marks.

Off (the default), the loop holds :data:`NULL_TIMER`: ``phase`` returns one shared
``nullcontext`` and ``wrap`` returns the function itself, so no clock is read and
nothing is recorded.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, Optional, TypeVar

import torch

__all__ = ["PHASES", "PhaseTimer", "NullTimer", "NULL_TIMER", "phase_columns", "device_name"]

PHASES = ("draft", "build", "score", "verify", "commit", "other")
F = TypeVar("F", bound=Callable)


def phase_columns() -> list[str]:
    """Row columns: mean ms per cycle of each phase, then the prefill total (ms)."""
    return [f"phase_{p}_ms" for p in PHASES] + ["phase_prefill_ms"]


def device_name(device: torch.device | str = "cpu") -> str:
    """What a timing ran on: the GPU's name, or the CPU model (with its core count)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


class NullTimer:
    """The switched-off timer: no clock reads, no records."""

    enabled = False
    _null = nullcontext()

    def phase(self, name: str):
        return self._null

    def wrap(self, name: str, fn: F) -> F:
        return fn


NULL_TIMER = NullTimer()


class PhaseTimer:
    """Records (phase, start, end) marks; :meth:`summary` turns them into ms per cycle.

    ``tree`` marks (the whole ``build_tree`` call) contain the ``draft`` marks:
    ``build`` is their difference. A timer serves one generation.
    """

    enabled = True

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._marks: list[tuple[str, object, object]] = []

    def _now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self._now()
        try:
            yield
        finally:
            self._marks.append((name, start, self._now()))

    def wrap(self, name: str, fn: F) -> F:
        """``fn`` with every call timed as phase ``name``."""
        def timed(*args, **kwargs):
            with self.phase(name):
                return fn(*args, **kwargs)
        return timed  # type: ignore[return-value]

    def totals_ms(self) -> dict[str, float]:
        """Total ms per recorded mark name (one synchronize on CUDA)."""
        if self.cuda and self._marks:
            torch.cuda.synchronize()
        out: dict[str, float] = {}
        for name, start, end in self._marks:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3  # type: ignore[union-attr]
            out[name] = out.get(name, 0.0) + ms
        return out

    def summary(self, cycles: int, total_ms: Optional[float] = None) -> dict[str, Optional[float]]:
        """{phase_<p>_ms: mean ms per cycle} for PHASES, plus phase_prefill_ms (total).

        cycles: target calls of the generation; total_ms: its wall time (the caller
        times it), from which ``other`` = (total - prefill - phases) / cycles (None
        when total_ms is not given). Phases a generation never entered are 0.0 (draft,
        build, verify for AR); with no cycle every per-cycle value is None. Trees built with no draft
        call timed (engine=graphs: the draft loop runs inside the compiled build) have draft None and
        the whole tree in build.
        """
        tot = self.totals_ms()
        prefill = tot.get("prefill")
        out: dict[str, Optional[float]] = {"phase_prefill_ms": prefill}
        if cycles < 1:
            return {**{f"phase_{p}_ms": None for p in PHASES}, **out}
        draft = tot.get("draft", 0.0)
        parts = {"draft": draft, "build": tot.get("tree", 0.0) - draft, "score": tot.get("score", 0.0),
                 "verify": tot.get("verify", 0.0), "commit": tot.get("commit", 0.0)}
        per_cycle: dict[str, Optional[float]] = {p: v / cycles for p, v in parts.items()}
        per_cycle["other"] = (None if total_ms is None
                              else (total_ms - (prefill or 0.0) - sum(parts.values())) / cycles)
        if "tree" in tot and "draft" not in tot:  # drafted inside a compiled build: build holds both
            per_cycle["draft"] = None
        return {**{f"phase_{p}_ms": per_cycle[p] for p in PHASES}, **out}
