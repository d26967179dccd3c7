"""``rheo generate --compare-ar``: the speedup over plain decoding, with its uncertainty.

One timed run says little on a shared CPU (the same command has printed 0.14x, 0.65x and 0.78x).
Here both decoders are warmed up, then timed ``repeats`` times in alternating order (speculative
first on even repetitions, plain first on odd ones, so a slow drift of the machine falls on both);
every plain run decodes as many tokens as the first speculative run emitted (rates are per token). The speedup is the
geometric mean of the per-repetition ratios with a 95% Student-t interval on their logarithms; an
interval that holds 1 is reported as "within noise". A caller may report each repetition as it ends
(``on_repeat``; the command line prints :func:`repeat_line`), so a long comparison shows progress.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from scipy import stats


@dataclass(frozen=True)
class Speedup:
    """Geometric-mean ratio (speculative tokens/s over plain tokens/s) and its 95% interval."""

    ratio: float
    low: float
    high: float
    runs: int
    spec_tps: float  # mean tokens/s of the speculative runs
    plain_tps: float  # mean tokens/s of the plain runs

    @property
    def within_noise(self) -> bool:
        return self.low <= 1.0 <= self.high

    def describe(self) -> str:
        """'speedup 0.93x [0.85, 1.02] over 5 runs (within noise)'."""
        if self.runs < 2:
            return f"speedup {self.ratio:.2f}x (1 run: no interval; use --repeats 5)"
        flag = " (within noise)" if self.within_noise else ""
        return f"speedup {self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}] over {self.runs} runs{flag}"


def speedup(ratios: Sequence[float], spec_tps: Sequence[float], plain_tps: Sequence[float]) -> Speedup:
    """:class:`Speedup` of per-repetition ratios (each > 0)."""
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    if n < 2:
        low = high = mean
    else:
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    return Speedup(math.exp(mean), math.exp(low), math.exp(high), n,
                   sum(spec_tps) / n, sum(plain_tps) / n)


def time_pair(spec: Callable[[int], int], plain: Callable[[int], int], repeats: int,
              clock: Callable[[], float] = time.perf_counter,
              on_repeat: Optional[Callable[[int, float, float], None]] = None) -> Speedup:
    """Time ``spec(repetition)`` and ``plain(repetition)`` (each returns the tokens it decoded)
    ``repeats`` times, speculative first on even repetitions and plain first on odd ones; both are
    assumed warmed up. ``on_repeat(i, spec tokens/s, plain tokens/s)`` is called after repetition i."""
    ratios, spec_tps, plain_tps = [], [], []
    for i in range(repeats):
        runs = [("spec", spec), ("plain", plain)]
        rates = dict((name, _rate(lambda: work(i), clock)) for name, work in (runs if i % 2 == 0 else runs[::-1]))
        ratios.append(rates["spec"] / rates["plain"])
        spec_tps.append(rates["spec"])
        plain_tps.append(rates["plain"])
        if on_repeat is not None:
            on_repeat(i, rates["spec"], rates["plain"])
    return speedup(ratios, spec_tps, plain_tps)


def repeat_line(i: int, repeats: int, name: str, spec_tps: float, plain_tps: float) -> str:
    """'repeat 2/5: rheo_auto 12.3 tokens/s, plain 10.1 tokens/s (1.22x)' (repetition ``i`` counts from 0)."""
    return (f"repeat {i + 1}/{repeats}: {name} {spec_tps:.1f} tokens/s, plain {plain_tps:.1f} tokens/s "
            f"({spec_tps / plain_tps:.2f}x)")


def _rate(work: Callable[[], int], clock: Callable[[], float]) -> float:
    """Tokens per second of one call of ``work``."""
    start = clock()
    tokens = work()
    return tokens / max(clock() - start, 1e-9)
