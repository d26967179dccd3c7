"""Common random numbers for same-state trees (rheo.random.PathRandom): each tree built with them
is distributed exactly as with a generator of its own (the tree distribution enumerated by
rheo.exact against 4000 keyed trees, chi-square at a stated false-alarm rate), two methods draw
alike at a node they both expand (m=1 keeps m=0's draw unless it was the top token), and
repeated draws at one node are fresh."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from toys import chi_square_pvalue, draft_fn, toy_pair

from rheo.config import SpecConfig
from rheo.exact import enumerate_outcomes
from rheo.mechanism import DraftRecorder
from rheo.methods import get_method
from rheo.random import PathRandom

ALPHA = 1e-3  # chi-square false-alarm rate; the keys are fixed, so the outcome is deterministic
TREES = 4000


def _tree(cfg, rng, recorder_rng=None):
    """The tree of ``cfg`` at a fixed toy state; its (tokens, parents, kinds) as a hashable signature."""
    _, drafter, _ = toy_pair(5, salt=6)
    recorder = DraftRecorder(draft_fn(drafter, [0, 1]), on_frontier=None if recorder_rng is None else recorder_rng.at)
    built = get_method(cfg.method).build_tree(recorder, 1, cfg, rng)
    return (tuple(built.tree.tokens.tolist()), tuple(built.tree.parents.tolist()), tuple(built.kind.tolist()))


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
@pytest.mark.parametrize("cfg", [SpecConfig(method="rheo", k=3, m=1, depth=2, tree_size=4, sparse_top=None, temperature=0.7),
                                 SpecConfig(method="rheo", k=3, m=0, depth=2, tree_size=5, sparse_top=None, temperature=1.0),
                                 SpecConfig(method="static", branching=(2, 1), sparse_top=None, temperature=0.8)])
def test_each_tree_is_distributed_as_with_its_own_generator(cfg):
    exact = enumerate_outcomes(lambda scripted: _tree(cfg, scripted))
    assert abs(sum(exact.values()) - 1.0) < 1e-12 and len(exact) > 3
    counts = Counter()
    for i in range(TREES):
        rng = PathRandom(f"key{i}/0")
        counts[_tree(cfg, rng, rng)] += 1
    p, dof = chi_square_pvalue(counts, exact)
    assert dof >= 2 and p > ALPHA, f"keyed trees depart from the enumerated distribution: p = {p:.2e}"


def test_the_same_rule_draws_the_same_tree_and_a_shared_node_the_same_token():
    paper = SpecConfig(method="rheo", k=3, m=1, depth=3, tree_size=6, sparse_top=None, temperature=1.0)
    tempered = SpecConfig(**{**paper.__dict__, "proxy": "tempered"})
    cooler = [SpecConfig(**{**c.__dict__, "temperature": 0.5}) for c in (paper, tempered)]
    same_root = 0
    for i in range(50):
        a, b = PathRandom(f"k{i}"), PathRandom(f"k{i}")
        assert _tree(paper, a, a) == _tree(tempered, b, b)  # at T = 1 the tempered proxy is the paper's rule
        c, d = PathRandom(f"k{i}"), PathRandom(f"k{i}")
        one, two = _tree(cooler[0], c, c), _tree(cooler[1], d, d)
        root_sample = [(tok, kind) for tok, par, kind in zip(*one) if par == 0]
        same_root += root_sample == [(tok, kind) for tok, par, kind in zip(*two) if par == 0]
    assert same_root == 50  # the root's children: the same lead, the same sample, the same fills


def test_without_its_top_token_the_residual_keeps_the_full_draw():
    """Gumbel-max with noise indexed from the row's end: m=1 draws what m=0 drew unless m=0 drew the
    top token, and both keep their own distribution."""
    probs = torch.tensor([[0.45, 0.25, 0.2, 0.1, 0.0]], dtype=torch.float64)
    full, tail = Counter(), Counter()
    for i in range(TREES):
        a, b = PathRandom(f"k{i}"), PathRandom(f"k{i}")
        a.at([(7,)])
        b.at([(7,)])
        x, y = int(a.categorical(probs)), int(b.categorical(probs[:, 1:])) + 1
        full[x] += 1
        tail[y] += 1
        assert x == 0 or x == y
    p_full, _ = chi_square_pvalue(full, {i: float(v) for i, v in enumerate(probs[0])})
    rest = probs[0, 1:] / probs[0, 1:].sum()
    p_tail, _ = chi_square_pvalue(tail, {i + 1: float(v) for i, v in enumerate(rest)})
    assert p_full > ALPHA and p_tail > ALPHA and full[4] == tail[4] == 0


def test_draws_at_one_node_are_fresh_and_keys_differ():
    rng = PathRandom("k")
    rng.at([(1,), (1, 2)])
    first, second = rng._uniform(2, torch.device("cpu")), rng._uniform(2, torch.device("cpu"))
    assert not torch.equal(first, second) and bool(((first >= 0) & (first < 1)).all())
    other = PathRandom("k2")
    other.at([(1,), (1, 2)])
    assert not torch.equal(other._uniform(2, torch.device("cpu")), first)
    spare = rng._uniform(3, torch.device("cpu"))  # not one row per frontier node: the plain stream
    assert spare.shape == (3,) and not torch.equal(spare, rng._uniform(3, torch.device("cpu")))


class _SharedLayer(PathRandom):
    """A lossy twin: every row of a draw takes the first row's noise (siblings draw alike)."""

    def _generators(self, n):
        first = super()._generators(n)[:1]
        return [torch.Generator().set_state(first[0].get_state()) for _ in range(n)]


@pytest.mark.parametrize("source,lossy", [(PathRandom, False), (_SharedLayer, True)])
def test_sibling_nodes_draw_independently_and_a_shared_noise_twin_is_caught(source, lossy):
    """Context-free draft: the two depth-1 nodes draw their samples from the same residual, so they
    agree with probability sum q^2 when independent (always, for the twin). Binomial z-test, the
    false-alarm rate ALPHA (|z| > 3.3)."""
    from toys import constant_pair

    _, drafter = constant_pair(torch.zeros(5, dtype=torch.float64),
                               torch.tensor([1.0, 0.6, 0.3, 0.0, -0.5], dtype=torch.float64))
    cfg = SpecConfig(method="rheo", k=2, m=0, depth=2, tree_size=6, sparse_top=None, temperature=1.0)
    q = torch.softmax(torch.tensor([1.0, 0.6, 0.3, 0.0, -0.5], dtype=torch.float64), 0)
    p_same, n, same = float((q * q).sum()), 1500, 0
    for i in range(n):
        rng = source(f"sib{i}")
        built = get_method(cfg.method).build_tree(DraftRecorder(draft_fn(drafter, [0, 1]), on_frontier=rng.at), 1, cfg, rng)
        parents, kinds, tokens = built.tree.parents.tolist(), built.kind.tolist(), built.tree.tokens.tolist()
        samples = [t for t, p, k in zip(tokens, parents, kinds) if k == 1 and p > 0]  # depth-2 samples
        assert len(samples) == 2
        same += samples[0] == samples[1]
    z = (same - n * p_same) / (n * p_same * (1 - p_same)) ** 0.5
    assert (abs(z) > 3.3) == lossy, f"agreement {same / n:.3f} vs {p_same:.3f} (z = {z:.1f})"
