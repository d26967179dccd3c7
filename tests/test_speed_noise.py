"""The speed table says when a speed difference is within noise: a speedup per item whose 95% CI
covers 1, and each method's per-prompt speed over Top-K's on the same tree, timed in one job; rows of
separate jobs are labelled so, with no interval (committed speed rows)."""

from __future__ import annotations

from pathlib import Path

from eval.report.analysis import load
from eval.report.speed import speed_table

ROOT = Path(__file__).resolve().parents[1]
PAPER_TREE = "K=10 d=8 R=60 top-128"
VS = "vs Top-K, same tree and engine"


def _rows(text: str, temperature: str) -> dict[tuple[str, str], dict]:
    block = text.split(f"T={temperature}\n", 1)[1].split("###", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {(r["method"], r["tree"]): r for r in rows}


def test_rheo_against_top_k_on_the_paper_tree_is_marked_when_within_noise():
    rows = load(ROOT / "results" / "speed_xeon.parquet")  # the Intel Xeon VM's rows (docs/results.md)
    # timed as one job per temperature (experiment=speed runs every method item by item in one job)
    text = speed_table(rows.assign(run_id=rows["temperature"].map(lambda t: f"job-T{t:g}")))
    greedy = _rows(text, "0")
    # T=0: paired per prompt, Rheo's tok/s over Top-K's has a CI that covers 1
    assert greedy[("Rheo m=1", PAPER_TREE)][VS].endswith("(within noise)") and "[" in greedy[("Rheo m=1", PAPER_TREE)][VS]
    assert greedy[("Top-K", PAPER_TREE)]["speedup per item"].endswith("(within noise)")  # ~ AR
    assert greedy[("Top-K", PAPER_TREE)][VS] == "-"
    assert "K=4 d=4 R=8 top-128" in {tree for _, tree in greedy}  # no Top-K on that tree: nothing to pair
    assert greedy[("Rheo m=1", "K=4 d=4 R=8 top-128")][VS] == "-"


def test_a_comparison_of_rows_of_separate_jobs_is_labelled_and_claims_no_interval():
    text = speed_table(load(ROOT / "results" / "speed_xeon.parquet"))  # each method in its own job (no run_id)
    for temperature in ("0", "1"):
        cell = _rows(text, temperature)[("Rheo m=1", PAPER_TREE)][VS]
        assert cell.endswith("(separate jobs)") and "[" not in cell and "±" not in cell, cell
        # a speedup over the AR rows timed next to it (paired_baseline) keeps its interval
        assert "[" in _rows(text, temperature)[("Top-K", PAPER_TREE)]["speedup"]
