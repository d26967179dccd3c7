"""The protocol study's table (eval.report.protocol_study): paired per prompt, one unit per item (an item's
turns averaged first), checked on rows whose numbers are worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from eval.report import protocol_study as study


def _rows():
    base = dict(model="smollm2_135m", method="rheo", m=1, k=10, depth=8, tree_size=60, seed=0, max_new_tokens=16,
                dtype="float32", status="ok", device_name="cpu", temperature=1.0, accept_lengths=[[1]])
    taus = {  # (suite, item, turn): (template, eagle3)
        ("mt_bench", 81, 0): (2.0, 3.0), ("mt_bench", 81, 1): (2.0, 2.0),  # one cluster: diff (1 + 0) / 2 = 0.5
        ("gsm8k", 0, 0): (2.0, 2.5), ("gsm8k", 1, 0): (2.0, 2.0), ("gsm8k", 2, 0): (1.5, 2.5),
    }
    out = []
    for (suite, item, turn), pair in taus.items():
        for protocol, tau, tokens in zip(("template", "eagle3"), pair, (50, 140)):
            out.append({**base, "protocol": protocol, "dataset": suite, "item_id": item, "turn": turn, "tau": tau,
                        "prompt_tokens": tokens})
    return pd.DataFrame(out)


def test_items_are_the_units_and_the_differences_are_paired():
    stats = study.summary(study.item_clusters(study.paired_prompts(_rows()))).set_index("suite")
    assert stats.loc["mt_bench", "items"] == 1 and stats.loc["mt_bench", "prompts"] == 2
    assert stats.loc["mt_bench", "diff"] == pytest.approx(0.5)
    assert stats.loc["gsm8k", "diff"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    every = stats.loc[study.ALL]
    assert every["items"] == 4 and every["prompts"] == 5
    assert every["diff"] == pytest.approx((0.5 + 0.5 + 0.0 + 1.0) / 4)
    assert every["tau_template"][0] == pytest.approx((2.0 + 2.0 + 2.0 + 1.5) / 4)
    assert every["pct"] == pytest.approx(100 * 0.5 / 1.875)
    assert every["prompt_template"] == 50 and every["prompt_eagle3"] == 140


def test_the_table_and_a_row_without_its_pair():
    rows = _rows()
    text = study.table(rows)
    assert "| 1 | **all suites** | 4 (5) | 50 → 140 |" in text and "+26.7%" in text
    unpaired = rows[~((rows["protocol"] == "eagle3") & (rows["dataset"] == "gsm8k") & (rows["item_id"] == 2))]
    assert study.summary(study.item_clusters(study.paired_prompts(unpaired))).set_index("suite").loc[
        "gsm8k", "items"] == 2  # the item without its eagle3 row is left out, not compared unpaired
    with pytest.raises(ValueError, match="both template and eagle3 are needed"):
        study.paired_prompts(rows[rows["protocol"] == "template"])
