"""Traversal Verification (rheo.traversal), proved by test.

Exact enumeration of every random choice (drafts and verification) on tiny vocabularies:
each output sequence of one cycle, completed by the target, has the target's probability to
1e-9, on chains and on i.i.d. trees of depth >= 3 (the full decode loop on small ones); the
path probabilities equal the enumerated verifier and a Monte-Carlo on larger trees; a seeded
chi-square (p < 1e-4: a correct decoder fails one such test in 10,000 fresh seeds); greedy
identity at T = 0; Traversal's exact expected tokens on a chain, over the drafts, are never
below recursive rejection sampling's (its optimality). A deliberately wrong variant -
Traversal on siblings drawn without replacement, verified as if they were i.i.d. - is caught
by the same tests, and the configuration refuses it in one line.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch
from test_core_greedy import VOCAB, drafters, greedy_reference, greedy_run
from toys import chi_square_pvalue, draft_fn, toy_pair

from rheo.candidates import LEAD, SAMPLE
from rheo.decode import SpecConfig, speculative_generate
from rheo.exact import (cycle_distribution, decoder_distribution, target_distribution, total_variation,
                        verifier_path_probs)
from rheo.methods import get_method, register, unregister
from rheo.random import TorchRandom
from rheo.traversal import verify_traversal

EXACT = 1e-9
ALPHA = 1e-4


def chain(depth, temperature=1.0, sparse_top=None, verifier="traversal"):
    return SpecConfig(method="chain", depth=depth, temperature=temperature, sparse_top=sparse_top, verifier=verifier)


def iid(branching, temperature=1.0, sparse_top=None, verifier="traversal"):
    return SpecConfig(method="static", branching=branching, replacement=True, temperature=temperature,
                      sparse_top=sparse_top, verifier=verifier)


@pytest.fixture
def traversal_on_rsd():
    """Traversal on a tree drawn without replacement, as if its siblings were i.i.d.: lossy on purpose
    (the configuration refuses it, so the throw-away method skips the check)."""
    base = get_method("static")
    register(dataclasses.replace(base, name="traversal_rsd", verify=verify_traversal, validate=lambda cfg: None))
    yield "traversal_rsd"
    unregister("traversal_rsd")


def _rsd(name, branching, temperature=1.0):
    cfg = SpecConfig(method="static", branching=branching, replacement=False, temperature=temperature)
    return dataclasses.replace(cfg, method=name)


def cycle_tv(cfg: SpecConfig, vocab: int, salt: int, prompt=(1, 2)) -> float:
    """Total variation between the target's first ``depth + 1`` tokens and one cycle's emitted tokens
    completed by the target (every outcome of the drafts and of verification enumerated)."""
    target, drafter, t_fn = toy_pair(vocab, salt)
    length = (len(cfg.branching) if cfg.branching is not None else cfg.depth) + 1
    got: dict = {}
    emitted = cycle_distribution(target, drafter, list(prompt), cfg)
    assert abs(sum(emitted.values()) - 1.0) < EXACT
    for seq, w in emitted.items():
        for tail, v in target_distribution(t_fn, list(prompt) + list(seq), length - len(seq), cfg.temperature).items():
            got[seq + tail] = got.get(seq + tail, 0.0) + w * v
    return total_variation(got, target_distribution(t_fn, list(prompt), length, cfg.temperature))


# ------------------------------------------------------------------ exact enumeration
@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_chain_cycle_lossless(temperature):
    assert cycle_tv(chain(3, temperature), vocab=3, salt=5) < EXACT


def test_chain_decode_loop_lossless():
    target, drafter, t_fn = toy_pair(3, 5)
    got = decoder_distribution(target, drafter, [1, 2], 3, chain(2))
    assert total_variation(got, target_distribution(t_fn, [1, 2], 3, 1.0)) < EXACT


@pytest.mark.slow
def test_iid_tree_cycle_lossless_small():
    assert cycle_tv(iid((2, 1)), vocab=3, salt=2) < EXACT


@pytest.mark.slow
@pytest.mark.parametrize("branching,temperature,sparse_top", [((2, 1, 1), 1.0, None), ((2, 2, 1), 0.6, None),
                                                              ((3, 1, 1), 0.8, 3), ((1, 2, 1), 1.0, None)])
def test_iid_tree_depth3_cycle_lossless(branching, temperature, sparse_top):
    assert cycle_tv(iid(branching, temperature, sparse_top), vocab=3, salt=7) < EXACT


@pytest.mark.slow
def test_chain_depth4_cycle_lossless():
    assert cycle_tv(chain(4, 0.8), vocab=3, salt=9) < EXACT


@pytest.mark.slow
def test_iid_tree_decode_loop_lossless():
    target, drafter, t_fn = toy_pair(3, 5)
    got = decoder_distribution(target, drafter, [1, 2], 2, iid((2, 1, 1)))
    assert total_variation(got, target_distribution(t_fn, [1, 2], 2, 1.0)) < EXACT


@pytest.mark.parametrize("branching", [(3,), pytest.param((2, 1), marks=pytest.mark.slow)])
def test_traversal_on_rsd_is_detected_lossy(traversal_on_rsd, branching):
    assert cycle_tv(_rsd(traversal_on_rsd, branching), vocab=4, salt=1) > 1e-2
    assert cycle_tv(iid(branching), vocab=4, salt=1) < EXACT  # the same verifier on i.i.d. siblings


# ------------------------------------------------------------------ refusals (one line, with the reason)
@pytest.mark.parametrize("kwargs,needle", [
    (dict(method="static", branching=(2, 1), replacement=False, verifier="traversal"), "replacement=true"),
    (dict(method="topk", verifier="traversal"), "chooses its children by rank"),
    (dict(method="rheo", verifier="traversal"), "chooses its children by rank"),
    (dict(method="chain", verifier="bogus"), "verifier must be one of"),
])
def test_refused_in_one_line(kwargs, needle):
    with pytest.raises(ValueError) as err:
        SpecConfig(**kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_rsd_chain_shape_is_allowed():
    """Without replacement but one child per node is a chain: nothing to refuse."""
    SpecConfig(method="static", branching=(1, 1, 1), replacement=False, verifier="traversal")


def test_labels_name_the_verifier():
    static, ch = get_method("static"), get_method("chain")
    assert static.variant(iid((2, 1))) == "static specinfer (2,1) traversal"
    assert static.variant(iid((2, 1), verifier="rrs")) == "static specinfer (2,1)"
    assert static.display_variant("static specinfer (2,1) traversal") == "SpecInfer (2,1) + Traversal"
    assert ch.variant(chain(8)) == "chain d=8 traversal"
    assert ch.display_variant("chain d=8 traversal") == "Chain d=8 + Traversal"


# ------------------------------------------------------------------ path probabilities
def _trees(vocab, cfg, limit, salt=4):
    target, drafter, _ = toy_pair(vocab, salt=salt)
    t_sess = target.new_session()
    t_sess.prefill([0])
    method = get_method(cfg.method)
    for seed in range(limit):
        built = method.build_tree(draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
        yield built, t_sess.score_tree(built.tree).logits


@pytest.mark.parametrize("cfg", [chain(3), chain(3, 0.5, 4), iid((2, 2)), iid((3, 1, 1), 0.7), iid((2, 1), 0.0)],
                         ids=lambda c: get_method(c.method).variant(c) + f" T={c.temperature}")
def test_path_probs_equal_the_enumerated_verifier(cfg):
    method = get_method(cfg.method)
    for built, logits in _trees(5, cfg, limit=4):
        fast = method.node_path_probs(built, logits, cfg)
        exact = verifier_path_probs(method.verify, built, logits, cfg)
        assert fast.dtype == torch.float64 and fast[0] == 1.0
        assert max(abs(a - b) for a, b in zip(fast.tolist(), exact)) < EXACT


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [chain(6, 1.0, 16), iid((3, 2, 1), 1.0, 16)], ids=["chain", "iid"])
def test_monte_carlo_on_larger_trees(cfg):
    """Mean emitted tokens of 1500 seeded verifier runs per tree (vocabulary 40) within 4.4 standard
    errors of the expectation: a correct expectation fails one seed in ~10^5 per tree."""
    method = get_method(cfg.method)
    for built, logits in _trees(40, cfg, limit=2, salt=9):
        expected = method.expected_emitted(built, logits, cfg)
        rng = TorchRandom(torch.Generator().manual_seed(100))
        runs = [len(method.verify(built, logits, cfg, rng).tokens) for _ in range(1500)]
        mean = sum(runs) / len(runs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in runs) / (len(runs) - 1))
        assert abs(mean - expected) <= 4.4 * sd / math.sqrt(len(runs)) + 1e-12


# ------------------------------------------------------------------ optimality on a chain
def _mean_emitted(cfg, vocab, salt):
    target, drafter, _ = toy_pair(vocab, salt)
    return sum(len(e) * w for e, w in cycle_distribution(target, drafter, [1, 2], cfg).items())


@pytest.mark.parametrize("salt,temperature", [(0, 1.0), (1, 0.6),
                                              pytest.param(2, 1.0, marks=pytest.mark.slow),
                                              pytest.param(3, 0.6, marks=pytest.mark.slow)])
def test_chain_never_below_rrs_over_the_drafts(salt, temperature):
    """Exact E[tau] over every drafted chain and every verification outcome: Traversal (block
    verification) >= recursive rejection sampling on the same chain."""
    trav = _mean_emitted(chain(3, temperature), 3, salt)
    rrs = _mean_emitted(chain(3, temperature, verifier="rrs"), 3, salt)
    assert trav >= rrs - 1e-12


def test_chain_can_be_below_rrs_on_one_draft():
    """The optimality is over the drafts, not draft by draft: on some drawn chains RRS emits more
    in expectation (so a per-state comparison of single draws is not the claim)."""
    below = 0
    for built, logits in _trees(6, chain(3), limit=6):
        trav = get_method("chain").expected_emitted(built, logits, chain(3))
        rrs = get_method("chain").expected_emitted(built, logits, chain(3, verifier="rrs"))
        below += trav < rrs - 1e-9
    assert below >= 1


# ------------------------------------------------------------------ chi-square and greedy identity
def _counts(cfg, n_runs, n_tokens, seed=1):
    target, drafter, _ = toy_pair(6, salt=21)
    g = torch.Generator().manual_seed(seed)
    return Counter(tuple(speculative_generate(target, drafter, [0, 1], n_tokens, cfg, g).tokens)
                   for _ in range(n_runs))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [iid((3, 2, 1), 1.0, 5), chain(4, 0.8)], ids=["iid", "chain"])
def test_chi_square_first_two_tokens(cfg):
    t_fn = toy_pair(6, salt=21)[2]
    p, dof = chi_square_pvalue(_counts(cfg, 2000, 2), target_distribution(t_fn, [0, 1], 2, cfg.temperature))
    assert dof >= 10 and p > ALPHA


@pytest.mark.slow
def test_chi_square_detects_traversal_on_rsd(traversal_on_rsd):
    t_fn = toy_pair(6, salt=21)[2]
    p, _ = chi_square_pvalue(_counts(_rsd(traversal_on_rsd, (4,)), 2000, 1), target_distribution(t_fn, [0, 1], 1, 1.0))
    assert p < ALPHA


@pytest.mark.parametrize("cfg", [iid((3, 2, 1), 0.0, 5), chain(4, 0.0)], ids=["iid", "chain"])
@pytest.mark.parametrize("kind", ["right", "wrong", "partly"])
def test_greedy_equals_target_greedy(cfg, kind):
    out, reference = greedy_run(cfg, kind)
    assert out.tokens == reference


# ------------------------------------------------------------------ Rheo-Seq: leads + a sample, verified by Traversal
def rheo_seq(branching, temperature=1.0, sparse_top=None):
    return SpecConfig(method="rheo_seq", branching=branching, temperature=temperature, sparse_top=sparse_top)


@pytest.mark.parametrize("branching,temperature", [((2, 1), 1.0), ((1, 2), 0.6)])
def test_rheo_seq_cycle_lossless(branching, temperature):
    assert cycle_tv(rheo_seq(branching, temperature), vocab=3, salt=3) < EXACT


@pytest.mark.slow
@pytest.mark.parametrize("branching,temperature,vocab", [((2, 2, 1), 0.7, 3), ((3, 1, 1), 1.0, 4), ((2, 1, 1), 0.8, 4)])
def test_rheo_seq_depth3_cycle_lossless(branching, temperature, vocab):
    assert cycle_tv(rheo_seq(branching, temperature), vocab=vocab, salt=8) < EXACT


@pytest.mark.parametrize("cfg", [rheo_seq((2, 2)), rheo_seq((3, 1), 0.7, 4), rheo_seq((2, 1), 0.0)],
                         ids=lambda c: f"{c.branching} T={c.temperature}")
def test_rheo_seq_path_probs_equal_the_enumerated_verifier(cfg):
    method = get_method(cfg.method)
    for built, logits in _trees(5, cfg, limit=4):
        fast = method.node_path_probs(built, logits, cfg)
        exact = verifier_path_probs(method.verify, built, logits, cfg)
        assert max(abs(a - b) for a, b in zip(fast.tolist(), exact)) < EXACT


def test_rheo_seq_children_are_a_sample_then_the_leads():
    cfg = rheo_seq((3,))
    built, _ = next(_trees(6, cfg, limit=1))
    kinds, probs = built.kind.tolist(), built.sample_prob.tolist()
    assert kinds[1:] == [SAMPLE, LEAD, LEAD]  # slot order: the sample, then the leads
    assert probs[1] > 0 and probs[2] == probs[3] == 0.0
    assert built.tree.tokens[1] not in built.tree.tokens[2:].tolist()  # drawn off the leads


@pytest.mark.parametrize("kind", ["right", "wrong", "partly"])
def test_rheo_seq_greedy_equals_target_greedy(kind):
    target, _, t_fn = toy_pair(VOCAB, salt=11)
    drafter = drafters(t_fn, toy_pair(VOCAB, salt=12)[2])[kind]
    out = speculative_generate(target, drafter, [1, 2, 3], 30, rheo_seq((2, 1, 1), 0.0), torch.Generator().manual_seed(0))
    assert out.tokens == greedy_reference(t_fn, [1, 2, 3], 30)
