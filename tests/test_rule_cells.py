"""eval.states.rule_cells: each adaptive rule against every fixed setting per cell, from synthetic
same-state rows whose answers are known (per-key values chosen, so every difference is exact)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from eval.states.rule_cells import cell_frame, cells_markdown, main, rules_of, verdict_table

RULE = "rheo m=1 proxy=tempered adapt=root"
LEVEL = "rheo m=1 proxy=tempered adapt=level"
VARIANTS = {"topk": ("topk", None, "rheo", None), "rheo m=0": ("rheo", 0, "rheo", None),
            "rheo m=1": ("rheo", 1, "rheo", None), "rheo m=1 proxy=tempered": ("rheo", 1, "tempered", None),
            RULE: ("rheo", 1, "tempered", "root"), LEVEL: ("rheo", 1, "tempered", "level")}


def _rows(values: dict, t: float, mix, n_keys: int = 12) -> pd.DataFrame:
    """values: variant -> offset on a per-key base shared by every variant (half-widths 0)."""
    rng = np.random.default_rng(1)
    out = []
    for key in range(n_keys):
        base = 2.0 + rng.normal(0, 0.3)
        for variant, offset in values.items():
            method, m, proxy, adapt = VARIANTS[variant]
            out.append({"method": method, "variant": variant, "m": m, "proxy": proxy, "adapt": adapt,
                        "head_sha": "h", "dtype": "float32", "model": "x", "driver": "topk", "temperature": t,
                        "dataset": "gsm8k", "item_id": key, "turn": 0, "seed": 0, "draft_mix": mix, "state": 0,
                        "expected_emitted": base + offset})
    return pd.DataFrame(out)


FIXED_GOOD = {"topk": 0.0, "rheo m=0": 0.3, "rheo m=1": 0.1, "rheo m=1 proxy=tempered": 0.12}


def test_a_rule_at_the_best_setting_meets_and_one_below_does_not():
    dial = pd.concat([_rows({**FIXED_GOOD, RULE: 0.295}, 0.7, 1.0), _rows({**FIXED_GOOD, RULE: 0.2}, 1.0, 1.0)])
    serving = _rows({**FIXED_GOOD, RULE: 0.5}, 0.7, None)
    frame = cell_frame(dial, serving)
    assert rules_of(dial) == ["rheo_adaptive"]  # rows stored with the rule's settings carry the preset's name
    table = verdict_table(frame, "rheo_adaptive").set_index("cell")
    assert table.loc["dial: T = 0.7, a = 1", "verdict"] == "meets"  # 0.005 below m=0: within 0.01
    assert table.loc["dial: T = 1, a = 1", "verdict"] == "does not meet"  # 0.1 below m=0
    assert table.loc["dial: T = 1, a = 1", "worst lower bound"] == "-0.100"
    assert table.loc["serving: T = 0.7, a = 0", "verdict"] == "meets, beats"  # 0.2 above the best (m=0)
    assert table.loc["serving: T = 0.7, a = 0", "best fixed"] == "m=0"
    assert table.loc["dial: T = 0.7, a = 1", "− m=0"] == "-0.005 ± 0.000"
    text = cells_markdown(frame)
    assert "meets every fixed setting in 2 of 3 cells" in text and "serving: T = 0.7, a = 0." in text


def test_a_cell_missing_a_fixed_setting_does_not_meet():
    rows = _rows({"topk": 0.0, "rheo m=0": 0.1, "rheo m=1": 0.1, RULE: 0.2}, 0.7, 0.5)
    frame = cell_frame(rows, rows.iloc[:0])
    assert not frame["meets"].any()


def test_the_command_refuses_rows_without_rules_or_rows(tmp_path, capsys):
    empty = tmp_path / "none.parquet"
    with pytest.raises((FileNotFoundError, SystemExit)):
        main([str(empty), str(empty)])


def test_the_readme_rule_rows_are_the_committed_table():
    """The README's rheo_level rows, rebuilt from results/tables/every_drafter.md: each measured dial
    cell (42 prompts) as 'rule − the best fixed setting (which)', '-' where the cell was not measured."""
    from pathlib import Path

    from result_tables import tables

    root = Path(__file__).resolve().parents[1]
    (_, rows), = [(h, r) for h, r in tables(root / "results" / "tables" / "every_drafter.md") if "rheo_level" in h]
    cells = {r["cell"]: r for r in rows if int(r["prompts"]) >= 42}
    want = []
    for t in ("0.7", "1"):
        line = [f"T = {t} (dial, 42 prompts)"]
        for a in ("0", "0.5", "1"):
            r = cells.get(f"dial: T = {t}, a = {a}")
            line.append("-" if r is None else f"{r['− ' + r['best fixed']]} ({r['best fixed']})")
        want.append("| " + " | ".join(line) + " |")
    readme = (root / "README.md").read_text()
    block = readme.split("<!-- row: every_drafter -->\n")[1].split("<!-- /row -->")[0]
    assert block.strip().splitlines() == want


def test_what_the_bar_asks_names_cells_where_even_the_best_fixed_setting_fails():
    from eval.states.rule_cells import reach_frame, reach_markdown

    clear = _rows(FIXED_GOOD, 0.7, 1.0)  # m=0 best by 0.18 over the next, exactly
    tied = _rows({**FIXED_GOOD, "rheo m=1 proxy=tempered": 0.3}, 1.0, 1.0)
    noise = np.random.default_rng(3).normal(0, 0.05, (tied["variant"] == "rheo m=0").sum())
    tied.loc[tied["variant"] == "rheo m=0", "expected_emitted"] += noise  # m=0 and rheo_auto tied, in noise
    reach = reach_frame(pd.concat([clear, tied]), clear.iloc[:0]).set_index("cell")
    assert reach.loc["dial: T = 0.7, a = 1", "best fixed"] == "m=0"
    assert reach.loc["dial: T = 0.7, a = 1", "best's worst lower bound"] == "+0.180"
    assert reach.loc["dial: T = 0.7, a = 1", "best meets"] == "yes"
    assert reach.loc["dial: T = 1, a = 1", "best meets"] == "no"
    tied_cell = reach.loc["dial: T = 1, a = 1"]  # the per-prompt best is at or above each setting on every prompt
    assert float(tied_cell["per-prompt best's worst lower bound"]) > float(tied_cell["best's worst lower bound"])
    assert "meets the bar in 1 of 2 cells; where it does not (dial: T = 1, a = 1)" in reach_markdown(reach.reset_index())


def test_follow_the_leader_replays_the_setting_ahead_at_the_earlier_states():
    from eval.states.options import AUTO, M0
    from eval.states.rule_cells import leader_replay, reach_frame
    from eval.states.stats import labelled

    # one prompt, three states: rheo_auto leads at the first (by rule), m=0 after state 0 (4 > 3), rheo_auto
    # after state 1 (3 + 5 > 4 + 1)
    values = {"rheo m=1 proxy=tempered": [3.0, 5.0, 2.0], "rheo m=0": [4.0, 1.0, 7.0]}
    rows = pd.concat([_rows({v: 0.0}, 1.0, 1.0, n_keys=1).assign(state=s, expected_emitted=x)
                      for v, xs in values.items() for s, x in enumerate(xs)], ignore_index=True)
    got = leader_replay(labelled(rows), (AUTO, M0))
    assert got.tolist() == [pytest.approx((3.0 + 1.0 + 2.0) / 3)]
    one = _rows(FIXED_GOOD, 0.7, 1.0)
    reach = reach_frame(one, one.iloc[:0])
    # one state a prompt: the leader is rheo_auto (0.12), 0.18 below m=0 on every prompt
    assert reach["follow the leader's worst lower bound"].tolist() == ["-0.180"]
    assert reach["states a prompt"].tolist() == ["1.0"]


def test_opening_with_m0_replays_m0_at_the_first_state_and_the_rule_after_it():
    from eval.states.options import M0
    from eval.states.rule_cells import OPENING, opening_replay, reach_frame, reach_markdown
    from eval.states.stats import labelled

    # one prompt, three states: the rule drafts 1, 5, 6; m=0 drafts 4 at the first state
    values = {LEVEL: [1.0, 5.0, 6.0], "rheo m=0": [4.0, 2.0, 2.0]}
    rows = pd.concat([_rows({v: 0.0}, 1.0, 1.0, n_keys=1).assign(state=s, expected_emitted=x)
                      for v, xs in values.items() for s, x in enumerate(xs)], ignore_index=True)
    assert opening_replay(labelled(rows)).tolist() == [pytest.approx((4.0 + 5.0 + 6.0) / 3)]
    assert opening_replay(labelled(rows[rows["variant"] != LEVEL]), opening=M0).empty
    # one state a prompt: the opening is m=0 itself (the best, 0.18 above the next), so its worst lower bound is
    # 0 against m=0, whatever the rule drafts later; a cell without the rule: "-"
    with_rule = _rows({**FIXED_GOOD, LEVEL: -1.0}, 0.7, 1.0)
    reach = reach_frame(pd.concat([with_rule, _rows(FIXED_GOOD, 1.0, 1.0)]), with_rule.iloc[:0]).set_index("cell")
    assert reach[OPENING].tolist() == ["+0.000", "-"]
    assert "rheo_level opening with m=0" in reach_markdown(reach.reset_index())
    assert "meets it in 1 of 1." in reach_markdown(reach.reset_index())
