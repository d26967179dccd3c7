"""The contamination check: no training prompt may share an 8-gram with a benchmark prompt.

n-grams are over lower-cased whitespace tokens; the benchmark side is every turn of every
record in ``data/benchmarks/*.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Set, Tuple

from rheo.paths import REPO_ROOT

__all__ = ["NGRAM", "ngrams", "benchmark_texts", "benchmark_ngrams", "shares_ngram"]

NGRAM = 8


def ngrams(text: str, n: int = NGRAM) -> Set[Tuple[str, ...]]:
    """Lower-cased whitespace-token n-grams of ``text``."""
    toks = text.lower().split()
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def benchmark_texts(benchmark_dir: str | Path | None = None) -> Iterable[str]:
    """Every turn of every benchmark record (``data/benchmarks/*.jsonl``)."""
    root = Path(benchmark_dir) if benchmark_dir else REPO_ROOT / "data" / "benchmarks"
    files = sorted(root.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no benchmark files in {root}: the contamination check needs them")
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                yield from json.loads(line)["turns"]


def benchmark_ngrams(benchmark_dir: str | Path | None = None) -> Set[Tuple[str, ...]]:
    out: Set[Tuple[str, ...]] = set()
    for t in benchmark_texts(benchmark_dir):
        out |= ngrams(t)
    return out


def shares_ngram(text: str, bench: Set[Tuple[str, ...]]) -> bool:
    return not ngrams(text).isdisjoint(bench)
