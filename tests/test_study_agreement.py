"""The two studies near T = 0.75 (docs/results.md): the paired comparison of the float32 m ablation
with the serving study over their shared prompts, and its T = 1 control, as the page states them,
recomputed from the committed archives (eval.report.study_agreement)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from eval.report.study_agreement import compare

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"


@pytest.fixture(scope="module")
def archives():
    columns = ["dataset", "item_id", "turn", "state", "variant", "temperature", "expected_emitted"]
    return (pd.read_parquet(ROOT / "results" / "same_state_fp32.parquet", columns=columns),
            pd.read_parquet(ROOT / "results" / "same_state_serving.parquet", columns=columns))


def _cell(p) -> str:
    return f"{p.mean:+.3f} ± {p.half:.3f}".replace("-", "−")


def test_the_pages_agreement_table_is_the_archives(archives):
    a, b = archives
    text = PAGE.read_text()
    block = text[text.index("<!-- agreement: 0.75 vs 0.7 0.8 -->"):text.index("<!-- /agreement -->")]
    names = {"rheo m=0": "Rheo m=0 − Top-K", "rheo m=1": "Rheo m=1 − Top-K", "rheo m=1 - rheo m=0": "Rheo m=1 − m=0"}
    for variant, row in compare(a, 0.75, b, [0.7, 0.8]).items():
        assert row["a"].n == 84
        line = (f"| {names[variant]} | {_cell(row['a'])} | {_cell(row['b'])} | {_cell(row['a - b'])} "
                f"(p {row['a - b'].p:.3f}) |")
        assert line in block, line


def test_the_control_at_t1_is_as_stated(archives):
    a, b = archives
    control = compare(a, 1.0, b, [1.0])
    text = " ".join(PAGE.read_text().split())
    m1, m0 = control["rheo m=1"]["a - b"], control["rheo m=0"]["a - b"]
    assert f"m=1 − Top-K {_cell(m1)} (p {m1.p:.3f}) and m=0 − Top-K {_cell(m0)} apart" in text
    assert m1.p > 0.05 and m0.p > 0.05  # the control agrees
