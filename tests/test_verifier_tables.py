"""The verifier study's tables (eval.states.verifiers): combinations, budgets, winners and paired differences."""

from __future__ import annotations

import pandas as pd
import pytest

from eval.states.verifiers import beyond_table, cell_table, combination, compare_set_methods, markdown, traversal_vs_rrs


@pytest.mark.parametrize("row,want", [
    (dict(method="topk", tree_size=24), ("Top-K", "one-hot walk", 24)),
    (dict(method="rheo", m=1, tree_size=8), ("Rheo m=1", "stochastic-first", 8)),
    (dict(method="static", branching=[4, 2, 1, 1, 1, 1, 1, 1], replacement=True, verifier="traversal"),
     ("SpecInfer", "Traversal", 60)),
    (dict(method="static", branching=[2, 1, 1, 1], replacement=False, verifier=None), ("RSD", "RRS", 8)),
    (dict(method="chain", depth=8, verifier="hsd"), ("Chain", "HSD", 8)),
    (dict(method="rheo_seq", branching=[2, 1, 1, 1]), ("Rheo-Seq 2,1,1,1", "Traversal", 8)),
    (dict(method="hsd_chain", depth=8), ("Chain", "HSD", 8)),
    (dict(method="hsd", branching=[3, 1, 1, 1, 1, 1, 1, 1], replacement=True), ("SpecInfer", "HSD", 24)),
    (dict(method="rheo_hsd", m=1, tree_size=60), ("Rheo m=1", "HSD", 60)),
])
def test_combination(row, want):
    assert combination(row) == want


def _keys():
    rows = []
    for item in range(4):
        for combo, rule, verifier, tau in (("Rheo m=1 + stochastic-first", "Rheo m=1", "stochastic-first", 2.0),
                                           ("SpecInfer + RRS", "SpecInfer", "RRS", 1.8),
                                           ("SpecInfer + Traversal", "SpecInfer", "Traversal", 1.9)):
            rows.append(dict(drafter="head", temperature=1.0, budget=8, combo=combo, rule=rule, verifier_name=verifier,
                             dataset="gsm8k", item_id=item, turn=0, seed=0, expected_emitted=tau + 0.01 * item))
    return pd.DataFrame(rows)


def test_winner_and_paired_differences():
    cells = cell_table(_keys()).set_index("combo")
    assert cells.loc["Rheo m=1 + stochastic-first", "winner"] and cells["winner"].sum() == 1
    assert cells.loc["SpecInfer + RRS", "vs_rheo"] == pytest.approx(-0.2)
    assert cells.loc["SpecInfer + Traversal", "vs_best"] == pytest.approx(-0.1)
    tvr = traversal_vs_rrs(_keys())
    assert tvr["diff"].tolist() == pytest.approx([0.1]) and tvr["keys"].tolist() == [4]
    assert "| head | 1 | 8 | Rheo m=1 + stochastic-first |" in markdown(_keys())


def test_the_compare_set_reads_as_combinations():
    labels = [label for label, _ in compare_set_methods()]
    assert "SpecInfer + Traversal (60)" in labels and "Chain + Traversal (8)" in labels
    assert "Chain + HSD (8)" in labels and "Rheo m=1 + HSD (24)" in labels and "SpecInfer + HSD (60)" in labels
    assert len(labels) == len(set(labels))


def test_rheo_under_hsd_is_not_the_reference_and_counts_as_new():
    keys = _keys()
    extra = keys[keys["combo"] == "Rheo m=1 + stochastic-first"].assign(
        combo="Rheo m=1 + HSD", verifier_name="HSD", expected_emitted=lambda d: d["expected_emitted"] + 0.5)
    keys = pd.concat([extra, keys], ignore_index=True)  # listed first: a prefix match would take it as Rheo m=1
    cells = cell_table(keys).set_index("combo")
    assert cells.loc["Rheo m=1 + HSD", "vs_rheo"] == pytest.approx(0.5)
    assert cells.loc["SpecInfer + RRS", "vs_rheo"] == pytest.approx(-0.2)
    beyond = beyond_table(keys)
    assert list(beyond["combo"]) == ["Rheo m=1 + HSD"] and beyond["best"].iloc[0] == "Rheo m=1 + stochastic-first"
