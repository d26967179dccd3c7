"""scripts/chain_over_drafts.py: per state, Traversal − RRS averaged over the drawn chains, with its standard error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SPEC = importlib.util.spec_from_file_location("chain_over_drafts", Path(__file__).resolve().parents[1] / "scripts" /
                                              "chain_over_drafts.py")
cod = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cod)


def _rows(diffs_by_state: dict[int, list[float]]) -> pd.DataFrame:
    rows = []
    for state, diffs in diffs_by_state.items():
        for draw, d in enumerate(diffs):
            rows += [dict(suite="gsm8k", item_id=0, turn=0, state=state, draw=draw, verifier="rrs", expected_emitted=2.0),
                     dict(suite="gsm8k", item_id=0, turn=0, state=state, draw=draw, verifier="traversal",
                          expected_emitted=2.0 + d)]
    return pd.DataFrame(rows)


def test_per_state_averages_the_draws_and_keeps_the_first():
    states = cod.per_state(_rows({0: [-0.3, 0.1, 0.5], 1: [0.2, 0.2, 0.2]})).set_index("state")
    assert states.loc[0, "mean"] == pytest.approx(0.1) and states.loc[0, "first"] == pytest.approx(-0.3)
    assert states.loc[0, "se"] == pytest.approx(0.4 / 3 ** 0.5) and states.loc[1, "se"] == pytest.approx(0.0)
    assert list(states["draws"]) == [3, 3]


def test_the_table_counts_states_below_zero_one_draw_and_over_the_draws():
    states = cod.per_state(_rows({0: [-0.3, 0.1, 0.5], 1: [-0.2, -0.2, -0.2], 2: [0.1, 0.2, 0.3]}))
    text = cod.markdown(states, 1.0, "head", 3)
    row = [line for line in text.splitlines() if line.startswith("| head")][0].split(" | ")
    assert row[2] == "3" and row[5:8] == ["2", "1", "1"]  # one draw: states 0, 1; over the draws: 1; clearly: 1
