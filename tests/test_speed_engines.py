"""The speed tables compare each engine's methods with Top-K on their own engine, never with eager Top-K
(rows of two engines in one folder: the committed Xeon rows, copied as engine=static with a Top-K twice
as fast)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from eval.report.analysis import add_speedup, add_variant
from eval.report.speed import paired_cost_table, speed_table
from eval.store.storage import load_results

ROOT = Path(__file__).resolve().parents[1]
PAPER_TREE = "K=10 d=8 R=60 top-128"
VS = "vs Top-K, same tree and engine"


def _two_engines():
    eager = load_results(ROOT / "results" / "speed_xeon.parquet")
    eager["run_id"] = eager["temperature"].map(lambda t: f"eager-T{t:g}")  # one job per engine and T
    static = eager.assign(engine="static", run_id=eager["temperature"].map(lambda t: f"static-T{t:g}"))
    fast = static["method"] == "topk"
    static.loc[fast, "wall_s"] /= 2
    static.loc[fast, "tokens_per_s"] *= 2
    static.loc[fast, [f"phase_{p}_ms" for p in ("draft", "build", "score", "verify", "commit", "other")]] /= 2
    both = pd.concat([eager, static[static["method"] != "hf_generate"]], ignore_index=True)
    return add_speedup(add_variant(both))


def _cells(text: str, temperature: str, method: str, tree: str) -> dict:
    block = text.split(f"T={temperature}\n", 1)[1].split("###", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]
    return next(r for r in rows if r["method"] == method and r["tree"] == tree)


def test_each_engine_is_compared_with_its_own_top_k():
    text = speed_table(_two_engines())
    eager = float(_cells(text, "0", "Rheo m=1", PAPER_TREE)[VS].split()[0])
    static = float(_cells(text, "0", "Rheo m=1 engine=static", PAPER_TREE)[VS].split()[0])
    assert static == pytest.approx(eager / 2, rel=1e-3)  # against the static Top-K, twice as fast
    assert _cells(text, "0", "Top-K engine=static", PAPER_TREE)[VS] == "-"  # Top-K is the reference of its engine


def test_the_cost_table_pairs_within_an_engine():
    text = paired_cost_table(_two_engines())
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines() if ln.startswith("| ")]
    static = [r for r in rows if r[0] == "Rheo m=1 engine=static" and r[1] == PAPER_TREE]
    eager = [r for r in rows if r[0] == "Rheo m=1" and r[1] == PAPER_TREE]
    assert static and eager and not [r for r in rows if r[0] == "Top-K engine=static"]
    for s, e in zip(static, eager):  # the last column: tok/s ratio against the Top-K of the row's own engine
        assert float(s[-1].split()[0]) == pytest.approx(float(e[-1].split()[0]) / 2, rel=1e-3)
