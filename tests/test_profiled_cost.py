"""The profiler's cycle cost (eval.device.profiled_cost, ``make cycle-cost ENGINE=...``): what counts as a
kernel, a graph launch and a sync, per phase, and that on the eager engine it agrees with the op
counter that the committed cycle-cost tables use."""

from __future__ import annotations

import pytest
import torch
from static_pair import eager_compiler, eagle_pair, fresh_dynamo
from torch.profiler import profile

from eval.device.cycle_cost import count_run
from eval.device.cycle_shapes import CostPair
from eval.device.profiled_cost import MarkTimer, classify, profile_row, profile_tables

#: the constant tables of rheo.candidates are built in the graph when traced, not through an lru_cache Dynamo warns about
pytestmark = pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")


def test_kernels_are_ops_that_do_work_charged_to_their_phase_and_compiled_calls_are_graph_launches():
    fresh_dynamo()
    x = torch.arange(6.0)
    compiled = eager_compiler(lambda t: (t * 2).sum())
    compiled(x)
    timer = MarkTimer()
    with timer.reads_counted(), profile() as prof:
        with timer.phase("score"):
            y = x + 1  # one kernel
            y.view(2, 3).t().view(3, 2)  # metadata only
            y.view(2, 3).reshape(6)  # a reshape that is a view: no kernel
            y.tolist()  # one sync
        with timer.phase("tree"):
            with timer.phase("draft"):  # nested: charged to the outer phase
                compiled(x)  # one graph launch (its ops run inside it)
                x.sum().item()  # one kernel and one sync (the aten op the read makes)
    counts = classify(prof.events())
    counts["syncs"].update(timer.syncs)
    assert counts["kernels"]["score"] == 1 and counts["syncs"]["score"] == 1
    assert counts["graphs"] == {"tree": 1} and counts["syncs"]["tree"] == 1
    assert counts["kernels"]["tree"] >= 1 and "other" not in counts["kernels"]


@pytest.fixture(scope="module")
def pair():
    target, drafter = eagle_pair(vocab=16, seed=4)
    return CostPair("tiny4", target, drafter, target.vocab_size)


@pytest.mark.parametrize("label,fields,temperature", [("AR", None, 0.0), ("Top-K", {"method": "topk"}, 1.0),
                                                      ("Rheo m=1", {"method": "rheo", "m": 1}, 1.0)])
def test_on_the_eager_engine_the_profiler_agrees_with_the_op_counter(pair, label, fields, temperature):
    prompt = list(range(3, 15))
    row = profile_row(pair, label, fields, temperature, "eager", prompt, 6)
    ops, syncs, calls, _ = count_run(pair, fields if fields is None else
                                     {**fields, "k": 10, "depth": 8, "tree_size": 60, "sparse_top": 128},
                                     temperature, prompt, 6)
    assert row["target_calls"] == calls
    assert row["syncs"] == pytest.approx(sum(syncs.values()) / calls)
    assert row["kernels"] == pytest.approx(sum(ops.values()) / calls, rel=0.05)
    assert row["graphs"] == 0


@pytest.mark.slow  # profiles the static engine beside eager: make test-slow
def test_the_static_engine_row_has_the_same_reads_and_the_table_checks_rheo_against_topk(pair):
    prompt = list(range(3, 15))
    rows = [profile_row(pair, label, fields, 1.0, engine, prompt, 6) for engine in ("eager", "static")
            for label, fields in (("Top-K", {"method": "topk"}), ("Rheo m=1", {"method": "rheo", "m": 1}))]
    by = {(r["engine"], r["method"]): r for r in rows}
    for method in ("Top-K", "Rheo m=1"):
        # the static build reads once, as the eager one; the static sessions read nothing more
        assert by[("static", method)]["syncs_tree"] == by[("eager", method)]["syncs_tree"] == 1
        assert by[("static", method)]["kernels_tree"] > 0 and by[("static", method)]["kernels_score"] > 0
    text = profile_tables(rows)
    assert "| Rheo m=1 | static |" in text and "static, T = 1: Rheo m=1 launches" in text
