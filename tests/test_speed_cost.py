"""eval.report.speed.paired_cost_table: per-phase cost and tau / speed ratios of a method next to Top-K,
paired over prompts, on hand-made rows whose answers are known."""

import math

import numpy as np
import pandas as pd
import pytest

from eval.report.speed import paired_cost_table
from rheo.timing import PHASES

BASE_PHASES = {"draft": 30.0, "build": 8.0, "score": 130.0, "verify": 2.0, "commit": 6.0, "other": 20.0}


def _row(variant: str, item: int, *, build: float, tau: float, tree: int = 60, score_shift: float = 0.0) -> dict:
    phases = dict(BASE_PHASES, build=build, score=BASE_PHASES["score"] + score_shift)
    cycle = sum(phases.values())
    calls = 20
    new = tau * calls
    return {"model": "toy", "device": "cpu", "dtype": "float32", "max_new_tokens": 64, "temperature": 1.0,
            "method": variant.split()[0], "variant": variant, "k": 10, "depth": 8, "tree_size": tree,
            "sparse_top": 128, "dataset": "gsm8k", "item_id": str(item), "turn": 0, "seed": 0,
            "target_calls": calls, "new_tokens": new, "tau": tau, "wall_s": calls * cycle / 1000.0,
            "tokens_per_s": new / (calls * cycle / 1000.0), "device_name": "test CPU", "num_threads": 1,
            "run_id": "job-1",  # every row timed in one job, item by item
            **{f"phase_{p}_ms": phases[p] for p in PHASES}}


def _cells(text: str, method: str) -> dict[str, str]:
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells[0] == method:
            return dict(zip(header, cells))
    raise AssertionError(f"no row {method!r} in\n{text}")


def test_phase_deltas_and_ratios_are_paired_over_prompts():
    rng = np.random.default_rng(0)
    rows = []
    for item in range(8):
        shift = float(rng.normal(0, 5))  # prompt-level noise shared by both methods: paired out
        rows.append(_row("topk", item, build=8.0, tau=1.8, score_shift=shift))
        rows.append(_row("rheo m=1", item, build=10.5, tau=1.8 * 1.1, score_shift=shift))
    rows.append(_row("rheo m=1", 99, build=50.0, tau=9.0))  # no Top-K row of this prompt: left out
    rows.append(_row("topk", 5, build=1.0, tau=1.0, tree=30))  # another tree: a group of its own
    got = _cells(paired_cost_table(pd.DataFrame(rows)), "Rheo m=1")
    assert got["prompts"] == "8" and got["tree"] == "K=10 d=8 R=60 top-128"
    assert got["Δ build ms"] == "2.50 ± 0.00" and got["Δ score ms"] == "0.00 ± 0.00"
    assert got["Δ cycle ms"] == "2.50 ± 0.00"
    tau_ratio = float(got["τ ratio"].split()[0])
    assert tau_ratio == pytest.approx(1.1, abs=1e-3)
    cycle_ratio, speed_ratio = (float(got[c].split()[0]) for c in ("cycle ratio", "tok/s ratio"))
    assert cycle_ratio > 1.0 and speed_ratio < tau_ratio  # it costs more per cycle: gains less in speed
    assert speed_ratio == pytest.approx(tau_ratio / cycle_ratio, rel=1e-2)  # geometric means of per-prompt ratios
    # the same rows timed in separate jobs: the timings are labelled and claim no interval; tau keeps its own
    apart = pd.DataFrame(rows).assign(run_id=lambda f: f["variant"])
    got = _cells(paired_cost_table(apart), "Rheo m=1")
    assert got["Δ build ms"] == "2.50 (separate jobs)" and got["tok/s ratio"].endswith("(separate jobs)")
    assert "[" not in got["tok/s ratio"] and "[" in got["τ ratio"]


def test_no_table_without_top_k_rows_or_timings():
    rows = [_row("rheo m=1", i, build=10.0, tau=2.0) for i in range(3)]
    assert paired_cost_table(pd.DataFrame(rows)) is None
    untimed = pd.DataFrame([_row(v, i, build=8.0, tau=2.0) for v in ("topk", "rheo m=1") for i in range(3)])
    untimed["phase_score_ms"] = math.nan
    assert paired_cost_table(untimed) is None
