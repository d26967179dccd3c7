"""Rows of different keys never share a label or a group in the tables: a label is one-to-one with
the values a method reads (``probe_min=0.1`` and ``0.1000001`` are two labels), and same-state rows of
different draft-quality dial values (``draft_mix``) are tabled apart."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from eval.report.analysis import variant_of
from eval.states.labels import with_labels
from eval.states.tables import paired_markdown
from eval.store.state_archive import load_rows
from rheo.config import method_parameters
from rheo.methods import method_names, reads
from test_same_state_tables import synthetic

ROOT = Path(__file__).resolve().parents[1]


def test_a_label_tells_apart_values_that_print_alike():
    assert variant_of("rheo", probe_min=0.1) != variant_of("rheo", probe_min=0.1000001)
    assert variant_of("rheo", probe_min=0.1) == "rheo m=1 probe_min=0.1"  # short where it is exact
    floats = [f.name for f in method_parameters() if f.type in ("float", float)]  # every float a method may read
    checked = 0
    for name in method_names():
        for field in (f for f in floats if reads(name, f)):
            assert variant_of(name, **{field: 0.1}) != variant_of(name, **{field: 0.1000001}), (name, field)
            checked += 1
    assert checked >= 1


def test_same_state_rows_of_two_dial_values_are_tabled_apart():
    low = synthetic(temps=(1.0,), configs=("h_topk", "h_m1")).assign(draft_mix=0.0)
    high = low.assign(draft_mix=0.5, expected_emitted=low["expected_emitted"] + 1.0)
    text = paired_markdown(pd.concat([low, high], ignore_index=True))
    titles = re.findall(r"^### .*$", text, flags=re.M)
    assert len(titles) == 2 and "draft_mix a = 0," in titles[0] and "draft_mix a = 0.5," in titles[1]
    assert "| Top-K | 4 |" in text and "| Top-K | 8 |" not in text  # 4 keys each, never 8 pooled
    assert set(with_labels(low.assign(draft_mix=None))["dial"]) == {"none"}
    assert "draft_mix" not in paired_markdown(low.assign(draft_mix=None))  # rows off the dial: titles as before


def test_the_committed_dial_archive_gives_one_table_per_dial_value():
    rows = load_rows(ROOT / "results" / "same_state_dial.parquet")
    text = paired_markdown(rows)
    for t in sorted(rows["temperature"].unique()):
        titles = re.findall(rf"^### .*, T = {t:g}$", text, flags=re.M)
        values = rows.loc[rows["temperature"] == t, "draft_mix"].nunique()
        assert values >= 2 and len(titles) == values, titles


def test_labels_name_the_budgets_when_the_compared_trees_differ_in_them():
    rows = synthetic(temps=(1.0,), configs=("h_topk", "h_m1"))
    small = rows["config_hash"] == "h_m1"
    rows.loc[small, "tree_size"] = 6  # Rheo on 6 nodes against Top-K on 8
    labels = set(with_labels(rows)["label"])
    assert labels == {"Top-K tree_size=8", "Rheo m=1 tree_size=6"}
    assert set(with_labels(synthetic(temps=(1.0,), configs=("h_topk", "h_m1")))["label"]) == {"Top-K", "Rheo m=1"}
