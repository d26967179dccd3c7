"""The draft loop and the tree build in one capturable function (rheo.captured_build).

* One ``torch.rand(N)`` on a CPU generator equals the separate draws of the same total length, so
  the pre-drawn build is the eager build, seed for seed, for every method, option and preset.
* The exact enumeration of the decoder's output runs through the captured function (the methods'
  candidate rules are the same code; the enumerating source is handed to it directly).
* ``torch.compile(fullgraph=True, dynamic=False)`` (backend ``eager``) of the whole function: no graph
  break, and one graph over 20 builds at growing committed lengths (every layer inside it).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from capturable import StaticToyDrafter, dynamo_counts
from toys import constant_pair, toy_pair

from rheo.captured_build import CapturedBuilder, build_captured, draft_and_build, finish, predrawn_build, root_tensor
from rheo.config import SpecConfig
from rheo.exact import decoder_distribution, target_distribution, total_variation
from rheo.methods import get_method, register, unregister
from rheo.random import CountingRandom, PredrawnRandom, TorchRandom
from rheo.tree import build_dynamic_tree, grow_tree

#: the constant tables of rheo.candidates are built in the graph when traced, not through an lru_cache Dynamo warns about
pytestmark = pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")
EXACT = 1e-9
SHAPE = dict(k=4, depth=4, tree_size=10, sparse_top=16)

#: every dynamic method, option and preset (name, SpecConfig fields)
SETTINGS = [
    ("topk", {}), ("topk", dict(rank="q_T")),
    ("rheo", dict(m=0)), ("rheo", dict(m=1)), ("rheo", dict(m=3)),
    ("rheo", dict(m=1, proxy="tempered")), ("rheo", dict(m=1, proxy="fixed", proxy_value=0.2)),
    ("rheo", dict(m=1, rank="q_T")), ("rheo", dict(m=2, probe_min=0.3)),
    ("rheo", dict(m=1, verify_order="deterministic_first")),
]
PRESETS = ["rheo_auto", "rheo_adaptive", "rheo_level"]


def _cfg(name: str, fields: dict, temperature: float, **shape) -> SpecConfig:
    return SpecConfig.for_method(method=name, temperature=temperature, **{**SHAPE, **shape, **fields})


def _as_lists(built) -> dict:
    t = built.tree
    out = {"tokens": t.tokens, "parents": t.parents, "depths": t.depths, "mask": t.ancestor_mask, "kind": built.kind,
           "sample_prob": built.sample_prob, "exp_row": built.exp_row, "resid_ids": built.resid_ids,
           "resid_probs": built.resid_probs}
    out = {k: None if v is None else v.tolist() for k, v in out.items()}
    return {**out, "drafted": built.drafted, "host": t.host, "host_kind": built.host_kind,
            "host_exp_row": built.host_exp_row}


def test_one_draw_of_n_uniforms_is_the_separate_draws_on_a_cpu_generator():
    sizes = [1, 10, 10, 10, 3, 1]
    g = torch.Generator().manual_seed(11)
    parts = torch.cat([torch.rand(n, generator=g, dtype=torch.float64) for n in sizes])
    after = torch.rand(4, generator=g, dtype=torch.float64)
    g = torch.Generator().manual_seed(11)
    whole = torch.rand(sum(sizes), generator=g, dtype=torch.float64)
    assert torch.equal(parts, whole) and torch.equal(after, torch.rand(4, generator=g, dtype=torch.float64))


def _draft(seed: int = 0, committed=(1, 2, 3)) -> StaticToyDrafter:
    drafter = StaticToyDrafter(40, seed=seed)
    drafter.extend(torch.tensor(committed))
    return drafter


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("name,fields", SETTINGS + [(p, None) for p in PRESETS])
def test_the_predrawn_build_is_the_eager_build_seed_for_seed(name, fields, temperature):
    if fields is None:  # a preset; its adaptive rules choose between Rheo m=0 and this setting per cycle
        cfg = SpecConfig.preset(name, temperature=temperature, **SHAPE)
        cfgs = [dataclasses.replace(cfg, adapt="none"), dataclasses.replace(cfg, adapt="none", m=0, proxy="rheo")]
    else:
        cfgs = [_cfg(name, fields, temperature)]
    for cfg in cfgs:
        method, drafter = get_method(cfg.method), _draft()
        eager_g, pre_g = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        counting = CountingRandom(TorchRandom(torch.Generator().manual_seed(5)))
        build_dynamic_tree(method.candidates, drafter.draft, 7, cfg, counting)
        want = build_dynamic_tree(method.candidates, drafter.draft, 7, cfg, TorchRandom(eager_g))
        uniforms = torch.rand(counting.used, generator=pre_g, dtype=torch.float64)
        rng = PredrawnRandom(uniforms)
        captured = draft_and_build(method.candidates, drafter.draft, root_tensor(7, "cpu"), cfg, rng)
        assert rng.used == counting.used == (0 if cfg.method == "topk" or temperature == 0 else 1 + 3 * 4)
        assert _as_lists(finish(captured, cfg)) == _as_lists(want)
        eager_scores = grow_tree(method.candidates, drafter.draft, captured.grown.nodes.clone(), cfg,
                                 PredrawnRandom(uniforms), None, "cpu").scores
        assert torch.equal(captured.grown.scores, eager_scores)
        assert torch.equal(eager_g.get_state(), pre_g.get_state())  # the verifier's draws follow unchanged


def test_a_predrawn_categorical_draws_the_index_torch_random_searches_for():
    """Zero-probability entries, ties at the CDF and rows of one entry included."""
    g = torch.Generator().manual_seed(4)
    probs = torch.rand(400, 9, generator=g, dtype=torch.float64) * (torch.rand(400, 9, generator=g) > 0.4)
    probs[:, 0] += 1e-3  # every row has mass
    probs[:50, 1:] = 0  # rows of one entry
    uniforms = torch.rand(400, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    uniforms[50:60] = 0.0  # u at the bottom of the CDF
    want = TorchRandom(torch.Generator().manual_seed(5)).categorical(probs)
    assert torch.equal(PredrawnRandom(torch.rand(400, generator=torch.Generator().manual_seed(5),
                                                 dtype=torch.float64)).categorical(probs), want)
    scaled = uniforms * probs.cumsum(-1)[:, -1]
    searched = torch.searchsorted(probs.cumsum(-1), scaled[:, None], right=True).squeeze(-1).clamp(max=8)
    assert torch.equal(PredrawnRandom(uniforms).categorical(probs), searched)


def test_a_predrawn_source_refuses_to_read_past_its_uniforms():
    rng = PredrawnRandom(torch.rand(3, dtype=torch.float64))
    rng.bernoulli(torch.full((2,), 0.5))
    with pytest.raises(ValueError, match="a draw of 2 uniforms after 2 of 3 pre-drawn ones"):
        rng.categorical(torch.ones(2, 4))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name,fields", [("topk", {}), ("rheo", dict(m=1)), ("rheo", dict(m=1, proxy="tempered"))])
def test_the_captured_builder_makes_the_eager_trees_over_cycles(name, fields, temperature):
    """Cycles of build + a verifier-like draw + commit: the builder's first build counts, the later ones
    pre-draw and run compiled; trees and the generator's stream are the eager engine's."""
    cfg = _cfg(name, fields, temperature)
    method = get_method(name)
    builder = CapturedBuilder(method, compiler=lambda fn: torch.compile(fn, backend="eager", fullgraph=True,
                                                                        dynamic=False))
    runs = {}
    for engine in ("eager", "captured"):
        drafter, g = _draft(), torch.Generator().manual_seed(3)
        rng, trees, root = TorchRandom(g), [], 7
        for cycle in range(4):
            build = builder.build if engine == "captured" else method.build_tree
            built = build(drafter.draft, root, cfg, rng)
            trees.append(_as_lists(built))
            root = int(built.tree.tokens[1 + int(rng.categorical(torch.ones(1, built.tree.num_nodes - 1)))])
            drafter.extend(torch.tensor([root]))
        runs[engine] = trees, g.get_state()
    assert runs["captured"][0] == runs["eager"][0]
    assert torch.equal(runs["captured"][1], runs["eager"][1])


def _captured_method(name: str) -> str:
    """A throw-away method: ``name``'s plug-ins, built through build_captured."""
    register(dataclasses.replace(get_method(name), name=f"{name}_captured", build=build_captured))
    return f"{name}_captured"


@pytest.fixture
def captured_methods():
    names = [_captured_method("topk"), _captured_method("rheo")]
    yield dict(zip(("topk", "rheo"), names))
    for n in names:
        unregister(n)


@pytest.mark.parametrize("name,m,proxy", [("topk", 0, "rheo"), ("rheo", 0, "rheo"), ("rheo", 1, "rheo"),
                                          ("rheo", 2, "rheo"), ("rheo", 1, "tempered")])
@pytest.mark.parametrize("temperature", [0.5, 1.0])
@pytest.mark.parametrize("sparse_top", [None, 3])
def test_the_decoder_through_the_captured_build_is_exactly_the_target(captured_methods, name, m, proxy, temperature,
                                                                     sparse_top):
    """tests/test_core_exact.py's grid, by enumeration, with every tree built by draft_and_build + finish."""
    cfg = SpecConfig.for_method(method=captured_methods[name], k=3 if m == 2 else 2, m=m, proxy=proxy, depth=2,
                                tree_size=4, temperature=temperature, sparse_top=sparse_top)
    target, drafter, t_fn = toy_pair(4, 0)
    got = decoder_distribution(target, drafter, [1, 2], 2, cfg)
    assert abs(sum(got.values()) - 1.0) < EXACT
    assert total_variation(got, target_distribution(t_fn, [1, 2], 2, temperature)) < EXACT


@pytest.mark.parametrize("name,m", [("topk", 0), ("rheo", 1)])
def test_fewer_drafted_slots_than_tree_size_prune_again_as_the_eager_build_does(captured_methods, name, m):
    """A draft with two tokens of positive mass: two of Top-K's three slots per node are drafted, so the
    graph's kept set holds empty slots and the host prunes again; the tree is the eager one, and the
    decoder's output is still exactly the target's."""
    p = torch.tensor([0.1, 0.5, 0.3, 0.1], dtype=torch.float64)
    q = torch.tensor([0.6, 0.4, 0.0, 0.0], dtype=torch.float64)
    target, drafter = constant_pair(p.log(), q.log())
    cfg = SpecConfig.for_method(method=name, k=3, m=m, depth=2, tree_size=7, temperature=1.0, sparse_top=None)
    t_sess, d_sess = target.new_session(), drafter.new_session()
    d_sess.prefill([0], t_sess.prefill([]))
    rng = PredrawnRandom(torch.rand(4, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    captured = draft_and_build(get_method(name).candidates, d_sess.draft, root_tensor(0, "cpu"), cfg, rng)
    assert int(captured.read[0]) < captured.ranked.shape[0]  # the retry is taken
    rng2 = PredrawnRandom(rng.uniforms)
    want = build_dynamic_tree(get_method(name).candidates, d_sess.draft, 0, cfg, rng2)
    assert _as_lists(finish(captured, cfg)) == _as_lists(want) and want.drafted < cfg.tree_size
    exact_cfg = dataclasses.replace(cfg, method=captured_methods[name])
    got = decoder_distribution(target, drafter, [0], 2, exact_cfg)
    assert total_variation(got, target_distribution(lambda s: p.log(), [0], 2, 1.0)) < EXACT


def _compiled(fn):
    return torch.compile(fn, backend="eager", fullgraph=True, dynamic=False)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name,fields", [("topk", {}), ("rheo", dict(m=0)), ("rheo", dict(m=1)),
                                         ("rheo", dict(m=1, proxy="tempered"))])
def test_the_whole_draft_and_build_compiles_to_one_graph_over_20_committed_lengths(name, fields, temperature):
    cfg = _cfg(name, fields, temperature)
    method, drafter = get_method(name), _draft(seed=1)
    n = 0 if name == "topk" or temperature == 0 else 1 + (cfg.depth - 1) * cfg.k
    fn = predrawn_build(method.candidates, cfg, None, "cpu")
    compiled, g = _compiled(fn), torch.Generator().manual_seed(0)
    torch._dynamo.reset()
    with dynamo_counts() as counts:
        for call in range(20):
            root, uniforms = torch.tensor([call % 40]), torch.rand(n, generator=g, dtype=torch.float64)
            got = finish(compiled(drafter.draft, root, uniforms), cfg)
            assert _as_lists(got) == _as_lists(finish(fn(drafter.draft, root, uniforms), cfg))
            drafter.extend(torch.tensor([call % 40, (call + 3) % 40]))  # the committed length grows by 2
    assert counts == {"graphs": 1, "breaks": 0}


@pytest.mark.parametrize("depth", [1, 2, 6])
def test_each_depth_compiles_to_one_graph(depth):
    cfg = _cfg("rheo", dict(m=1), 1.0, depth=depth, tree_size=min(10, 4 * depth))
    drafter = _draft(seed=2)
    compiled = _compiled(predrawn_build(get_method("rheo").candidates, cfg, None, "cpu"))
    torch._dynamo.reset()
    with dynamo_counts() as counts:
        for call in range(3):
            finish(compiled(drafter.draft, torch.tensor([call]), torch.rand(1 + (depth - 1) * 4, dtype=torch.float64)),
                   cfg)
            drafter.extend(torch.tensor([call]))
    assert counts == {"graphs": 1, "breaks": 0}
