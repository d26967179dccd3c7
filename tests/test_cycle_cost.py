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
    ("Top-K", 0.0): {"calls": 2, "ops": {"build": 296, "commit": 68, "draft": 849, "other": 23, "score": 2478, "verify": 10},
                     "syncs": {"build": 2, "other": 1, "verify": 2}},
    ("Rheo m=1", 0.0): {"calls": 2, "ops": {"build": 750, "commit": 68, "draft": 849, "other": 23, "score": 2478,
                                            "verify": 10},
                        "syncs": {"build": 2, "other": 1, "verify": 2}},
    ("Top-K", 1.0): {"calls": 2, "ops": {"build": 296, "commit": 68, "draft": 849, "other": 23, "score": 2478, "verify": 22},
                     "syncs": {"build": 2, "other": 1, "verify": 4}},
    ("Rheo m=1", 1.0): {"calls": 2, "ops": {"build": 734, "commit": 68, "draft": 849, "other": 23, "score": 2478,
                                            "verify": 50},
                        "syncs": {"build": 2, "other": 1, "verify": 4}},
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
