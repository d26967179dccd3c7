"""The whole cycle under engine=static|graphs (rheo.engine, rheo.captured_build): the static target session
scores and commits, the draft loop and the tree build run as one captured function over the static head
session, the head's draft extend commits. On the tiny random pair in fp32:

* engine=static gives the eager engine's greedy tokens for AR, Top-K, Rheo m=0 and m=1, rheo_auto and
  rheo_adaptive (whose rule reads the root's draft row the captured build returns);
* compiled (Dynamo with backend "eager", so the counts are Dynamo's own) 24 tokens make a bounded set
  of graphs with no graph break, and a second generation (a new head session) at other lengths makes no new graph.
"""

from __future__ import annotations

import pytest
import torch
from static_pair import eager_compiler, eagle_pair, fresh_dynamo, graph_counts

from baselines.autoregressive import autoregressive_generate
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.engine import engine_target

#: the constant tables of rheo.candidates are built in the graph when traced, not through an lru_cache Dynamo warns about
pytestmark = pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")

SHAPE = dict(k=3, depth=4, tree_size=8, sparse_top=None)
SETTINGS = {"Top-K": SpecConfig.for_method(method="topk", **SHAPE), "Rheo m=1": SpecConfig(m=1, **SHAPE),
            "Rheo m=0": SpecConfig(m=0, **SHAPE), "rheo_auto": SpecConfig.preset("rheo_auto", **SHAPE),
            "rheo_adaptive": SpecConfig.preset("rheo_adaptive", **SHAPE)}
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
#: a pair whose random head's greedy drafts are accepted past the root in a few cycles
PAIR = dict(vocab=16, seed=4)


@pytest.fixture(autouse=True)
def _fresh():
    fresh_dynamo()
    yield
    fresh_dynamo()


def _config(label: str, engine: str, temperature: float) -> SpecConfig:
    import dataclasses
    return dataclasses.replace(SETTINGS[label], engine=engine, temperature=temperature)


def test_autoregressive_decoding_on_the_static_target_is_the_eager_one():
    target, _ = eagle_pair(**PAIR)
    want = autoregressive_generate(target, PROMPT, 24, temperature=0.0).tokens
    assert autoregressive_generate(engine_target(target, "static"), PROMPT, 24, temperature=0.0).tokens == want


@pytest.mark.parametrize("label", list(SETTINGS))
def test_the_static_engine_gives_the_eager_greedy_tokens(label):
    target, drafter = eagle_pair(**PAIR)
    ar = autoregressive_generate(target, PROMPT, 24, temperature=0.0).tokens
    eager = speculative_generate(target, drafter, PROMPT, 24, _config(label, "eager", 0.0))
    static = speculative_generate(target, drafter, PROMPT, 24, _config(label, "static", 0.0))
    assert eager.tokens == ar and static.tokens == ar
    assert static.accept_lengths == eager.accept_lengths and static.target_calls < 24  # trees accepted past the root
    assert static.cycle_m == eager.cycle_m and static.root_accept == pytest.approx(eager.root_accept, abs=1e-6)


@pytest.mark.parametrize("label,temperature", [("Top-K", 0.0), ("Rheo m=1", 1.0),
                                               pytest.param("rheo_auto", 1.0, marks=pytest.mark.slow)])  # test-slow
def test_the_compiled_cycle_makes_a_bounded_set_of_graphs_and_no_break(monkeypatch, label, temperature):
    """engine=graphs with Dynamo's eager backend: the target's scoring (one tree bucket) and commit, the
    head's extend and step, and the captured draft-and-build compile once each; a new head session and a
    third generation at other cache lengths compile nothing new."""
    monkeypatch.setattr("rheo.engine.graphs_compiler", lambda device: eager_compiler)
    target, drafter = eagle_pair(**PAIR)
    cfg = _config(label, "graphs", temperature)
    counts, outs = [], []
    for i, prompt in enumerate([PROMPT, PROMPT[:5] + [7, 7, 2, 2, 2], PROMPT + [1, 2, 3]]):
        outs.append(speculative_generate(target, drafter, prompt, 24, cfg, generator=torch.Generator().manual_seed(i)))
        counts.append(graph_counts())
    assert all(len(o.tokens) == 24 for o in outs) and outs[0].target_calls > 2
    assert [breaks for _, breaks in counts] == [0, 0, 0]
    assert counts[0][0] <= 5 and counts[1] == counts[0] and counts[2] == counts[1], counts
    if temperature == 0.0:
        assert outs[0].tokens == autoregressive_generate(target, PROMPT, 24, temperature=0.0).tokens


@pytest.mark.parametrize("name,m,temperature", [("topk", 0, 0.0), ("rheo", 1, 1.0), ("rheo", 0, 1.0),
                                                *[pytest.param(*c, marks=pytest.mark.slow)  # the rest: make test-slow
                                                  for c in [("topk", 0, 1.0), ("rheo", 0, 0.0), ("rheo", 1, 0.0)]]])
def test_the_draft_and_build_over_the_static_head_is_one_graph_over_20_committed_lengths(name, m, temperature):
    """rheo.captured_build's function with the static head session's draft traced inside (every layer,
    so every depth of the head's step): after the session's first, eager, tree, 20 trees at growing
    committed lengths make one graph, with no break, and the same trees as run uncompiled."""
    from rheo.captured_build import draft_and_build, finish, predrawn_build, root_tensor
    from rheo.methods import get_method
    from rheo.models.static_eagle3 import StaticEagle3Drafter
    from rheo.random import PredrawnRandom

    target, drafter = eagle_pair(**PAIR)
    session = StaticEagle3Drafter(drafter, min_capacity=128).new_session()
    session.prefill(PROMPT, torch.randn(len(PROMPT) - 1, 3 * target.hidden_size))
    cfg = SpecConfig.for_method(method=name, m=m, temperature=temperature, **{**SHAPE, "depth": 5})
    method, n = get_method(name), 0 if name == "topk" or temperature == 0 else 1 + 4 * 3
    g = torch.Generator().manual_seed(0)
    finish(draft_and_build(method.candidates, session.draft, root_tensor(1, "cpu"), cfg,
                           PredrawnRandom(torch.rand(n, generator=g, dtype=torch.float64))), cfg)
    fn = predrawn_build(method.candidates, cfg, None, "cpu")
    compiled = eager_compiler(fn)
    fresh_dynamo()
    for call in range(20):
        root, uniforms = torch.tensor([call % 16]), torch.rand(n, generator=g, dtype=torch.float64)
        got = finish(compiled(session.draft, root, uniforms), cfg)
        want = finish(fn(session.draft, root, uniforms), cfg)
        assert got.tree.host == want.tree.host and torch.equal(got.sample_prob, want.sample_prob)
        accepted = 1 + call % 4
        session.commit(torch.randint(0, 16, (accepted,), generator=g), torch.randn(accepted, 3 * target.hidden_size))
    assert graph_counts() == (1, 0)
