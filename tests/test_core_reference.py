"""Layer 2: optimised code == plain reference, under the same randomness."""

import pytest
import torch
from toys import assert_verify_matches_reference
from toys import draft_fn as _draft_fn
from toys import toy_pair

from rheo.decode import SpecConfig
from rheo.methods import build_tree, select_candidates
from rheo.random import TorchRandom
from rheo.reference import reference_build_tree, reference_select, reference_verify

CONFIGS = [
    SpecConfig(method="topk", k=4, depth=4, tree_size=12, sparse_top=None),
    SpecConfig(k=4, m=0, depth=4, tree_size=12, sparse_top=6),
    SpecConfig(k=4, m=1, depth=4, tree_size=12, sparse_top=None, temperature=0.7),
    SpecConfig(k=5, m=3, depth=3, tree_size=9, sparse_top=7),
    SpecConfig(k=3, m=1, depth=3, tree_size=5, proxy="fixed", proxy_value=0.1),
    # the temperature-aware ranking options (tests/test_core_ranking.py)
    SpecConfig(method="topk", k=4, depth=4, tree_size=12, sparse_top=None, rank="q_T", temperature=0.7),
    SpecConfig(method="topk", k=4, depth=3, tree_size=9, sparse_top=6, rank="q_T", temperature=0.0),
    SpecConfig(k=4, m=1, depth=4, tree_size=12, sparse_top=None, temperature=0.6, proxy="tempered"),
    SpecConfig(k=4, m=0, depth=4, tree_size=12, sparse_top=6, temperature=0.6, rank="q_T"),
    SpecConfig(k=5, m=2, depth=3, tree_size=9, sparse_top=7, temperature=0.0, rank="q_T"),
    SpecConfig(k=5, m=1, depth=3, tree_size=9, sparse_top=7, temperature=0.8, rank="q_T", proxy="tempered",
               probe_min=0.3),
    SpecConfig(k=4, m=1, depth=3, tree_size=9, sparse_top=None, temperature=0.0, proxy="tempered"),
    # the paper's rule at T = 0 (no draw: the sample is x_{m+1}); m = 4 leaves node 0 of the select test
    # (4 finite logits) without a tail, at T = 0 and above
    SpecConfig(k=4, m=1, depth=3, tree_size=9, sparse_top=6, temperature=0.0),
    SpecConfig(k=6, m=4, depth=3, tree_size=9, sparse_top=None, temperature=0.0),
    SpecConfig(k=6, m=4, depth=3, tree_size=9, sparse_top=None, temperature=0.9),
]


def _id(c: SpecConfig) -> str:
    return f"{c.method}-m{c.m}-s{c.sparse_top}-{c.rank}-{c.proxy}-T{c.temperature}-p{c.probe_min}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_select_matches_reference(cfg):
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    logits[0, 4:] = -torch.inf  # a node with little support
    d2t = torch.arange(10) * 3 + 1
    cand, _ = select_candidates(logits, cfg, TorchRandom(torch.Generator().manual_seed(5)), d2t)
    ref = reference_select(logits, cfg, TorchRandom(torch.Generator().manual_seed(5)), d2t)
    for row, slots in enumerate(ref):
        valid = torch.isfinite(cand.log_score[row])
        assert cand.tokens[row][valid].tolist() == [t for t, _, _, _ in slots]
        assert cand.kind[row][valid].tolist() == [kd for _, _, kd, _ in slots]
        torch.testing.assert_close(cand.log_score[row][valid], torch.tensor([s for _, s, _, _ in slots],
                                                                            dtype=torch.float64))


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_matches_reference(cfg, seed):
    _, drafter, _ = toy_pair(10, salt=seed)
    built = build_tree(_draft_fn(drafter, [1, 2]), 2, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
    ref = reference_build_tree(_draft_fn(drafter, [1, 2]), 2, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
    assert built.tree.tokens.tolist() == ref["tokens"]
    assert built.tree.parents.tolist() == ref["parents"]
    assert built.tree.depths.tolist() == ref["depths"]
    assert built.kind.tolist() == ref["kinds"]
    torch.testing.assert_close(built.sample_prob, torch.tensor(ref["sample_prob"], dtype=torch.float64))


@pytest.mark.parametrize("cfg", [
    SpecConfig(method="topk", k=3, depth=2, tree_size=5, sparse_top=None),
    SpecConfig(k=3, m=1, depth=2, tree_size=5, sparse_top=None),
    SpecConfig(k=3, m=0, depth=2, tree_size=4, sparse_top=None, temperature=0.6),
    SpecConfig(k=3, m=1, depth=2, tree_size=5, sparse_top=None, verify_order="deterministic_first"),
], ids=["topk", "rheo-m1", "rheo-m0", "detfirst"])
def test_verify_matches_reference_exactly(cfg):
    """Same output distribution of verification on every random tree, to float64 precision."""
    assert_verify_matches_reference(cfg, reference_verify, vocab=5)


class _OneDrawAtATime:
    """A TorchRandom without bernoulli_else_categorical: the verifier draws and reads each in turn."""

    def __init__(self, generator: torch.Generator) -> None:
        self.inner = TorchRandom(generator)

    def categorical(self, probs):
        return self.inner.categorical(probs)

    def bernoulli(self, probs):
        return self.inner.bernoulli(probs)


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_one_read_per_sampled_node_keeps_the_random_stream(temperature):
    """The verifier's accept/reject draw and the draw after a rejection, read together (the generator set
    back when the second was not needed), give the tokens and leave the generator exactly as drawing
    them one at a time does: on many trees and seeds, with both outcomes of the sampled child."""
    from rheo.methods import verify_tree

    target, drafter, _ = toy_pair(12, salt=4)
    t_sess = target.new_session()
    t_sess.prefill([0])
    cfg = SpecConfig(k=3, m=1, depth=3, tree_size=8, sparse_top=None, temperature=temperature)
    accepted_sample = rejected_sample = 0
    for seed in range(60):
        built = build_tree(_draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
        logits = t_sess.score_tree(built.tree).logits
        t_sess.discard()
        one, two = torch.Generator().manual_seed(1000 + seed), torch.Generator().manual_seed(1000 + seed)
        fast = verify_tree(built, logits, cfg, TorchRandom(one))
        slow = verify_tree(built, logits, cfg, _OneDrawAtATime(two))
        assert (fast.tokens, fast.path) == (slow.tokens, slow.path)
        assert torch.equal(torch.rand(4, generator=one), torch.rand(4, generator=two))  # the same stream after
        accepted_sample += fast.sample_accepted > 0
        rejected_sample += fast.sample_accepted == 0
    assert accepted_sample > 0 and rejected_sample > 0  # the restoring branch ran, and the other


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.method == "rheo"], ids=_id)
@pytest.mark.parametrize("seed", [0, 1])
def test_deferred_layers_build_the_tree_of_layer_by_layer_candidates(cfg, seed):
    """The builder's Rheo rule leaves q~ and each slot's sample probability to after the layer loop
    (rheo.candidates.Deferred); the kept tree, its kinds, sample probabilities and residuals are bit for
    bit those of candidates made whole at every layer, on nodes with a tail and without one (every
    other node here has two finite logits)."""
    from rheo.candidates import select_rheo
    from rheo.methods.rheo import rheo_candidates
    from rheo.tree import build_dynamic_tree

    _, drafter, _ = toy_pair(10, salt=seed)

    def thin(view, frontier):
        logits = _draft_fn(drafter, [1, 2])(view, frontier).clone()  # [f, V]
        logits[::2, 2:] = -torch.inf
        return logits

    def whole(dist, c, rng, layer):
        return select_rheo(dist, c.k, c.m, c.temperature, rng, c.proxy, c.proxy_value, c.proxy_eps, c.rank, c.probe_min)

    lean, eager = (build_dynamic_tree(rule, thin, 2, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
                   for rule in (rheo_candidates, whole))
    for name in ("tokens", "parents", "depths", "ancestor_mask"):
        assert torch.equal(getattr(lean.tree, name), getattr(eager.tree, name)), name
    for name in ("kind", "sample_prob", "exp_row", "resid_ids", "resid_probs"):
        assert torch.equal(getattr(lean, name), getattr(eager, name)), name
    assert (lean.host_kind, lean.host_exp_row, lean.drafted) == (eager.host_kind, eager.host_exp_row, eager.drafted)
