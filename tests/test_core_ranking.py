"""The temperature-aware ranking options (rank="q_T", proxy="tempered", probe_min), every layer:
exact output distribution on toy pairs at T = 0, 0.5, 1 with and without a sparse draft, the
expected acceptance against the enumerated verifier (the vectorised rules against their reference
twins: tests/test_core_reference.py), the limits that define them (T = 1, T = 0), and a deliberately lossy twin that the same
exact test catches."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from toys import constant_pair, draft_fn, toy_pair

from rheo.candidates import SAMPLE, Candidates, select_rheo
from rheo.decode import SpecConfig
from rheo.exact import decoder_distribution, target_distribution, total_variation, verifier_path_probs
from rheo.methods import build_tree, get_method, register, unregister
from rheo.probs import draft_distribution
from rheo.random import TorchRandom
from rheo.reference import reference_path_probs

EXACT = 1e-9

#: every new option, alone and combined, with m = 0, 1, 2 (name -> SpecConfig keywords)
OPTIONS = {
    "topk q_T": dict(method="topk", k=2, depth=2, tree_size=4, rank="q_T"),
    "rheo m=0 q_T": dict(method="rheo", k=2, m=0, depth=2, tree_size=4, rank="q_T"),
    "rheo m=1 tempered": dict(method="rheo", k=3, m=1, depth=2, tree_size=4, proxy="tempered"),
    "rheo m=2 tempered": dict(method="rheo", k=3, m=2, depth=2, tree_size=4, proxy="tempered"),
    "rheo m=1 q_T": dict(method="rheo", k=3, m=1, depth=2, tree_size=4, rank="q_T"),
    "rheo m=1 q_T tempered": dict(method="rheo", k=3, m=1, depth=2, tree_size=4, rank="q_T", proxy="tempered"),
    "rheo m=1 probe_min": dict(method="rheo", k=3, m=1, depth=2, tree_size=4, proxy="tempered", probe_min=0.4),
    "rheo m=2 probe_min q_T": dict(method="rheo", k=3, m=2, depth=2, tree_size=4, rank="q_T", probe_min=0.2),
}
TEMPERATURES = [0.0, 0.5, 1.0]


def _tv(cfg: SpecConfig, vocab: int = 4, n_tokens: int = 2, salt: int = 0) -> float:
    target, drafter, t_fn = toy_pair(vocab, salt)
    got = decoder_distribution(target, drafter, [1, 2], n_tokens, cfg)
    assert abs(sum(got.values()) - 1.0) < EXACT
    return total_variation(got, target_distribution(t_fn, [1, 2], n_tokens, cfg.temperature))


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("sparse_top", [None, 3])
def test_every_option_is_lossless_by_enumeration(name, temperature, sparse_top):
    cfg = SpecConfig(**OPTIONS[name], temperature=temperature, sparse_top=sparse_top)
    assert _tv(cfg) < EXACT


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("sparse_top", [None, 3])
def test_expected_acceptance_equals_the_enumerated_verifier(name, temperature, sparse_top):
    cfg = SpecConfig(**OPTIONS[name], temperature=temperature, sparse_top=sparse_top)
    method = get_method(cfg.method)
    target, drafter, _ = toy_pair(5, salt=4)
    session = target.new_session()
    session.prefill([0])
    seen = set()
    for seed in range(10):
        built = method.build_tree(draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
        key = (tuple(built.tree.tokens.tolist()), tuple(built.kind.tolist()))
        if key in seen:
            continue
        seen.add(key)
        logits = session.score_tree(built.tree).logits
        fast = method.node_path_probs(built, logits, cfg).tolist()
        exact = verifier_path_probs(method.verify, built, logits, cfg)
        ref = reference_path_probs(built, logits, cfg, False)
        assert max(abs(a - b) for a, b in zip(fast, exact)) < EXACT
        assert max(abs(a - b) for a, b in zip(fast, ref)) < 1e-12
    assert seen


# ------------------------------------------------------------------ the definitions' limits
def _dist(seed: int = 0, n: int = 5, vocab: int = 12):
    logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return draft_distribution(logits, None)


def test_tempered_proxy_is_the_papers_at_t1_where_it_is_above_the_next_token():
    dist = _dist()
    rng = TorchRandom(torch.Generator().manual_seed(0))
    paper = select_rheo(dist, 4, 1, 1.0, rng, proxy="rheo")
    rng = TorchRandom(torch.Generator().manual_seed(0))
    tempered = select_rheo(dist, 4, 1, 1.0, rng, proxy="tempered")
    q = dist.q
    above = torch.minimum(q[:, 0], q[:, 1:].sum(-1)) > q[:, 1] + 1e-6  # [n]
    assert above.any()
    torch.testing.assert_close(paper.log_score[above], tempered.log_score[above])
    assert torch.equal(paper.tokens, tempered.tokens)


def test_rank_q_t_is_rank_q_at_t1():
    dist = _dist(1)
    for m in (0, 1, 2):
        a = select_rheo(dist, 5, m, 1.0, TorchRandom(torch.Generator().manual_seed(2)), rank="q")
        b = select_rheo(dist, 5, m, 1.0, TorchRandom(torch.Generator().manual_seed(2)), rank="q_T")
        torch.testing.assert_close(a.log_score, b.log_score)


@pytest.mark.parametrize("kwargs", [dict(proxy="tempered"), dict(rank="q_T"), dict(rank="q_T", proxy="tempered"),
                                    dict(proxy="tempered", probe_min=0.2)])
def test_at_t0_every_option_builds_the_top_k_tree(kwargs):
    """At T = 0 the sample is x_{m+1}, ranked where Top-K ranks it: the tree is Top-K's (with the
    same ranking), so no option can lose to Top-K there."""
    _, drafter, _ = toy_pair(10, salt=1)
    rank = kwargs.get("rank", "q")
    topk = SpecConfig(method="topk", k=4, depth=4, tree_size=10, sparse_top=None, temperature=0.0, rank=rank)
    want = build_tree(draft_fn(drafter, [1, 2]), 2, topk, TorchRandom(torch.Generator().manual_seed(0)))
    for m in (1, 2):
        cfg = SpecConfig(k=4, m=m, depth=4, tree_size=10, sparse_top=None, temperature=0.0, **kwargs)
        got = build_tree(draft_fn(drafter, [1, 2]), 2, cfg, TorchRandom(torch.Generator().manual_seed(0)))
        assert got.tree.tokens.tolist() == want.tree.tokens.tolist()
        assert got.tree.parents.tolist() == want.tree.parents.tolist()


def test_the_papers_proxy_at_t0_over_ranks_the_sample():
    """The mechanism the tempered proxy removes: at T = 0 the paper's proxy ranks x_{m+1} at
    min(q(x_m), z) > q(x_{m+1}), so its tree differs from Top-K's."""
    dist = _dist(4)
    got = select_rheo(dist, 4, 1, 0.0, TorchRandom(torch.Generator().manual_seed(0)), proxy="rheo")
    assert (got.log_score[:, 1] > dist.log_q[:, 1] + 1e-9).all()


def test_probe_min_makes_low_mass_nodes_top_k_nodes():
    dist = _dist(2)
    z_t = torch.softmax(dist.logits / 0.5, -1)[:, 1:].sum(-1)  # [n] non-lead mass at T=0.5, m=1
    cut = float(z_t.median())
    got = select_rheo(dist, 4, 1, 0.5, TorchRandom(torch.Generator().manual_seed(0)), proxy="tempered",
                      probe_min=cut)
    draws = (got.kind == SAMPLE).any(-1)
    assert torch.equal(draws, z_t >= cut)
    assert (got.sample_prob[~draws] == 0).all()
    assert torch.equal(got.tokens[~draws], dist.ids[~draws, :4])


def test_every_sample_is_ranked_at_or_above_every_fill():
    """The condition the losslessness argument needs, over many random nodes and temperatures."""
    dist = _dist(3, n=200, vocab=30)
    for t in (0.0, 0.25, 0.5, 0.7, 1.0, 1.5):
        for kwargs in (dict(proxy="tempered"), dict(rank="q_T"), dict(rank="q_T", proxy="tempered")):
            for m in (0, 1, 3):
                c = select_rheo(dist, 6, m, t, TorchRandom(torch.Generator().manual_seed(1)), **kwargs)
                assert (c.log_score[:, m:m + 1] >= c.log_score[:, m + 1:]).all()
                assert (c.log_score <= 0).all()  # never above its parent


def test_options_keep_old_config_hashes():
    """Options left at their defaults stay out of the config key: rows keyed before they existed
    keep their hashes; set, they enter it."""
    from eval.store.keys import config_hash, method_key

    def h(**kw):
        spec = SpecConfig(**kw)
        return config_hash(method_key(spec, model="tiny_random", device="cpu", dtype=None, seed=0, max_new_tokens=8))

    assert h(method="rheo") == h(method="rheo", rank="q", probe_min=0.0)
    assert h(method="topk") == h(method="topk", rank="q")
    assert len({h(method="rheo"), h(method="rheo", rank="q_T"), h(method="rheo", probe_min=0.1),
                h(method="rheo", proxy="tempered")}) == 4


def test_labels_name_the_options():
    assert get_method("rheo").variant(SpecConfig(method="rheo", m=1)) == "rheo m=1"
    assert get_method("rheo").variant(SpecConfig(method="rheo", m=2, rank="q_T", proxy="tempered",
                                                 probe_min=0.1)) == "rheo m=2 proxy=tempered rank=q_T probe_min=0.1"
    assert get_method("topk").variant(SpecConfig(method="topk", rank="q_T")) == "topk rank=q_T"
    assert get_method("topk").variant(SpecConfig(method="topk")) == "topk"


@pytest.mark.parametrize("bad", [dict(rank="p"), dict(probe_min=-0.1), dict(probe_min=1.5), dict(proxy="hot")])
def test_bad_option_values_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SpecConfig(**bad)


# ------------------------------------------------------------------ a lossy twin is caught
def _lossy_candidates(dist, cfg, rng, layer) -> Candidates:
    """The tempered proxy *without* its floor: min(q(x_m), z_T) can rank the sample below a fill,
    so whether the sample survives pruning depends on which token was drawn."""
    cand = select_rheo(dist, cfg.k, cfg.m, cfg.temperature, rng, "rheo", rank=cfg.rank)
    z_t = torch.softmax(dist.logits / cfg.temperature, -1)[:, cfg.m:].sum(-1)
    score = cand.log_score.clone()
    score[:, cfg.m] = torch.minimum(dist.q[:, cfg.m - 1], z_t).log()
    return dataclasses.replace(cand, log_score=score)


def _lemma_case(temperature: float, candidates=None) -> float:
    """Vocabulary {A, B, C}; draft (0.5, 0.3, 0.2); k=3, m=1, two children kept, depth 1. At T = 0.4
    z_T = 0.275 lies between q(C) and q(B)."""
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    target, drafter = constant_pair(p.log(), q.log())
    name = "rheo"
    if candidates is not None:
        name = register(dataclasses.replace(get_method("rheo"), name="lossy_tempered", candidates=candidates),
                        replace=True).name
    try:
        cfg = SpecConfig.for_method(method=name, k=3, m=1, depth=1, tree_size=2, temperature=temperature, sparse_top=None,
                         proxy="tempered")
        got = decoder_distribution(target, drafter, [0], 1, cfg)
    finally:
        if candidates is not None:
            unregister(name)
    want = {(i,): float(v) for i, v in enumerate(torch.softmax(p.log() / temperature, -1))}
    return total_variation(got, want)


def test_lossy_twin_without_the_floor_is_caught_and_the_option_is_not():
    assert _lemma_case(0.4, _lossy_candidates) > 1e-3
    assert _lemma_case(0.4) < EXACT
