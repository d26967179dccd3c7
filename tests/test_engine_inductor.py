"""``engine="graphs"`` compiled for real (Inductor; on a CPU without CUDA graphs): on the smallest pair the
head can read (3 decoder layers) a greedy Top-K generation emits the eager engine's tokens, Dynamo
reports no graph break, later generations (new head sessions) at other cache lengths add no graph, and nothing
warns (a UserWarning fails the test)."""

from __future__ import annotations

import pytest
from static_pair import eagle_pair, fresh_dynamo, graph_counts

from rheo.config import SpecConfig
from rheo.decode import speculative_generate


@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.slow  # Inductor compiles five graphs (scoring, commit, draft step, draft extend, draft-and-build)
def test_graphs_engine_under_inductor_emits_the_eager_tokens_without_a_break():
    fresh_dynamo()
    target, drafter = eagle_pair(layers=3)
    cfg = dict(method="topk", temperature=0.0, k=4, depth=3, tree_size=8, sparse_top=None)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    want = speculative_generate(target, drafter, prompt, 12, SpecConfig(**cfg)).tokens
    got = speculative_generate(target, drafter, prompt, 12, SpecConfig(**cfg, engine="graphs"))
    graphs, breaks = graph_counts()
    assert got.tokens == want and max(got.accept_lengths) >= 2  # rows were committed past the root
    assert breaks == 0 and 1 <= graphs <= 5
    again = speculative_generate(target, drafter, prompt + want[:5], 12, SpecConfig(**cfg, engine="graphs"))
    assert again.tokens == speculative_generate(target, drafter, prompt + want[:5], 12, SpecConfig(**cfg)).tokens
    graphs_after, breaks = graph_counts()  # a new head session, other lengths: no new graph
    assert breaks == 0 and graphs_after == graphs
    third = speculative_generate(target, drafter, prompt + want[:9], 12, SpecConfig(**cfg, engine="graphs"))
    assert graph_counts() == (graphs_after, 0)
    assert third.tokens == speculative_generate(target, drafter, prompt + want[:9], 12, SpecConfig(**cfg)).tokens
    fresh_dynamo()
