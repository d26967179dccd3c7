"""make gpu-check's engine section (eval.device.engine_check), rehearsed on the tiny pair with the static
engine: logits within fp32 tolerance of eager, no graph over growing cache lengths, the eager tokens per
cycle, and marks that say met or not met on the 8B shape on a GPU, and that they are not read elsewhere."""

from __future__ import annotations

import pytest
from static_pair import eagle_pair, fresh_dynamo

from eval.device.cycle_shapes import CostPair
from eval.device.engine_check import marks, per_call, per_cycle, random_tree

#: the constant tables of rheo.candidates are built in the graph when traced, not through an lru_cache Dynamo warns about
pytestmark = pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")


def test_a_random_tree_keeps_parents_first_and_its_depth():
    tree = random_tree(30, 3, 50, "cpu", seed=1)
    parents = tree.host[0]
    assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)
    assert int(tree.depths.max()) <= 3 and tree.ancestor_mask[29, 0]


def test_the_static_engine_passes_the_engine_section_on_the_tiny_pair():
    fresh_dynamo()
    target, drafter = eagle_pair(vocab=16, seed=4)
    pair = CostPair("tiny4", target, drafter, target.vocab_size)
    calls = per_call(pair, "static", "float32", prompt_len=12, tree_nodes=9, lengths=4, repeats=1)
    assert [r["case"] for r in calls] == ["target call, 1 token", "target call, tree of 9"]
    assert all(r["ok"] and r["logit_diff"] < 1e-5 and r["new_graphs"] == 0 and r["kernels"] > 0 for r in calls)
    cycles = per_cycle(pair, "static", "float32", new_tokens=8, prompt_len=12)
    assert {(r["method"], r["engine"]) for r in cycles} == {(m, e) for m in ("AR", "Top-K", "Rheo m=1")
                                                           for e in ("eager", "static")}
    assert all(r["same_tokens"] and r["ok"] and r["compiles"] == 0 and r["runs"] == 1 for r in cycles)
    lines = marks(calls, cycles, "static")  # the 8B shape on CUDA: read as met or not met
    assert len(lines) == 4 and all(line.endswith(("met", "not met")) for line in lines)
    rehearsal = marks(calls, cycles, "static", "tiny4", "cpu")  # a tiny pair on a CPU: the marks are not read
    assert len(rehearsal) == 1 and "not evaluated" in rehearsal[0] and "not met" not in rehearsal[0]
