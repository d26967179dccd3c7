"""The cycle-cost counter (eval.device.op_counter) and the pinned op and sync counts of one target
call on the tiny 32-layer pair: a change that adds launches or host reads to the loop changes
these numbers, and the diff of this file shows it in review."""

from __future__ import annotations

import pytest
import torch

from eval.device.cycle_cost import METHODS, count_run
from eval.device.cycle_shapes import load_cost_pair
from eval.device.op_counter import OpCounter


def test_the_counter_counts_kernels_and_host_reads_only():
    x = torch.arange(6.0)
    with OpCounter() as counter:
        y = x + 1  # one op
        y.view(2, 3).t()  # metadata only
        float(y.sum())  # sum (op) + one sync
        y[y > 2]  # gt, index (ops); a boolean mask: one sync
        y.tolist()  # one sync, no op
    assert counter.ops["other"] == 5
    assert counter.syncs["other"] == 3
    assert torch.Tensor.tolist is not None and "read" not in torch.Tensor.tolist.__name__


#: (method label, T) -> ops and syncs per phase, summed over the calls of 2 new tokens after a 64-token
#: prompt (prefill excluded)
PINNED = {
    ("Top-K", 0.0): {"calls": 2, "ops": {"build": 216, "commit": 68, "draft": 782, "other": 20, "score": 2478, "verify": 10},
                     "syncs": {"build": 2, "other": 1, "verify": 2}},
    ("Rheo m=1", 0.0): {"calls": 2, "ops": {"build": 326, "commit": 68, "draft": 782, "other": 20, "score": 2478,
                                            "verify": 10},
                        "syncs": {"build": 2, "other": 1, "verify": 2}},
    ("Top-K", 1.0): {"calls": 2, "ops": {"build": 216, "commit": 68, "draft": 782, "other": 20, "score": 2478, "verify": 18},
                     "syncs": {"build": 2, "other": 1, "verify": 2}},
    ("Rheo m=1", 1.0): {"calls": 2, "ops": {"build": 492, "commit": 68, "draft": 782, "other": 20, "score": 2478,
                                            "verify": 46},
                        "syncs": {"build": 2, "other": 1, "verify": 2}},
}


@pytest.fixture(scope="module")
def tiny32():
    """The pair, after one short run of every counted method (tables made once per process, such as
    Rheo's slot table, are then made: the counts do not depend on which test ran first)."""
    pair = load_cost_pair("tiny32")
    prompt = torch.randint(10, 500, (8,), generator=torch.Generator().manual_seed(1)).tolist()
    for _, fields in METHODS:
        for temperature in (0.0, 1.0):
            count_run(pair, fields, temperature, prompt, 2)
    return pair


@pytest.mark.parametrize("label,temperature", [("Top-K", 0.0), ("Rheo m=1", 0.0), ("Top-K", 1.0), ("Rheo m=1", 1.0)])
def test_op_and_sync_counts_of_the_tiny_32_layer_pair_are_pinned(tiny32, label, temperature):
    prompt = torch.randint(10, 500, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    ops, syncs, calls, _ = count_run(tiny32, dict(METHODS)[label], temperature, prompt, 2)
    got = {"calls": calls, "ops": dict(sorted(ops.items())), "syncs": dict(sorted(syncs.items()))}
    assert got == PINNED.get((label, temperature)), f"{label} T={temperature}: {got}"


def test_the_launch_table_counts_each_measured_configuration_and_predicts_from_its_own_tau(tiny32):
    """eval.device.row_cost on the committed speed rows at T = 1 (their small trees only): each tree
    configuration is counted once, AR at the rows' temperature, and the predicted GPU speedup is the
    rows' mean tau times AR's ops over the configuration's."""
    from pathlib import Path

    from eval.device.row_cost import configs_of, row_costs
    from eval.measure.expected_replay import row_spec
    from eval.report.analysis import load
    from eval.store.storage import rows_or_archive

    rows = load(rows_or_archive(Path(__file__).resolve().parents[1] / "results" / "speed.parquet"))
    rows = rows[(rows["temperature"] == 1.0) & ((rows["tree_size"] <= 8) | rows["k"].isna())]
    counts, frame, text = row_costs(tiny32, rows, new_tokens=2, prompt_len=8)
    assert sorted(counts["config_hash"]) == sorted(["AR@1"] + list(configs_of(rows).query("method != 'ar'")["config_hash"]))
    assert len(frame) == 2 and set(frame["variant"]) == {"topk", "rheo m=1"}
    prompt = torch.randint(10, max(11, tiny32.vocab_size // 4), (8,), generator=torch.Generator().manual_seed(0)).tolist()
    for _, r in frame.iterrows():
        config = rows[rows["variant"] == r["variant"]].iloc[0]
        ops, _, calls, _ = count_run(tiny32, row_spec(config), 1.0, prompt, 2)
        assert r["ops"] == sum(ops.values()) / calls
        assert r["gpu_speedup"] == pytest.approx(rows[rows["variant"] == r["variant"]]["tau"].mean() * r["ar_ops"] / r["ops"])
    assert "### T = 1" in text and "predicted GPU speedup" in text
