"""The speed table says when a speed difference is within noise: a speedup per item whose 95% CI
covers 1, and each method's per-prompt speedup over Top-K's on the same tree (committed speed rows)."""

from __future__ import annotations

from pathlib import Path

from eval.report.analysis import load
from eval.report.speed import speed_table

ROOT = Path(__file__).resolve().parents[1]
PAPER_TREE = "K=10 d=8 R=60 top-128"


def _rows(text: str, temperature: str) -> dict[tuple[str, str], dict]:
    block = text.split(f"T={temperature}\n", 1)[1].split("###", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {(r["method"], r["tree"]): r for r in rows}


def test_rheo_against_top_k_on_the_paper_tree_is_marked_when_within_noise():
    text = speed_table(load(ROOT / "results" / "speed_xeon.parquet"))  # the Intel Xeon VM's rows (docs/results.md)
    greedy, sampled = _rows(text, "0"), _rows(text, "1")
    # T=0: 1.02x vs 0.97x over AR, and paired per prompt the ratio's CI covers 1
    assert greedy[("Rheo m=1", PAPER_TREE)]["vs Top-K, same tree"].endswith("(within noise)")
    assert greedy[("Top-K", PAPER_TREE)]["speedup per item"].endswith("(within noise)")  # ~ AR
    assert greedy[("Top-K", PAPER_TREE)]["vs Top-K, same tree"] == "-"
    # T=1: the ratio's CI lies above 1; the paper tree is slower than AR (CI below 1)
    assert "within noise" not in sampled[("Rheo m=1", PAPER_TREE)]["vs Top-K, same tree"]
    assert "within noise" not in sampled[("Top-K", PAPER_TREE)]["speedup per item"]
    assert "K=4 d=4 R=8 top-128" in {tree for _, tree in greedy}  # no Top-K on that tree: nothing to pair
    assert greedy[("Rheo m=1", "K=4 d=4 R=8 top-128")]["vs Top-K, same tree"] == "-"
