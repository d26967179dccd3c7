"""Expected acceptance per cycle (rheo.expected, ``record_expected``): the vectorised path
probabilities equal their recursive reference twin and the exact enumeration of each
method's own verifier on the same tree; the recorded per-cycle expectation equals the
enumeration for the trees a run actually drew; a Monte-Carlo on larger trees; and it is
free when off (no extra target logit rows, same tokens)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from toys import draft_fn, toy_pair

from rheo.decode import SpecConfig, speculative_generate
from rheo.exact import verifier_path_probs
from rheo.methods import get_method, register, unregister
from rheo.models.base import LazyLogits, TargetOutput, first_child_chain
from rheo.random import TorchRandom
from rheo.reference import reference_path_probs

EXACT = 1e-9

#: every registered method and its ablations, on toy-sized trees (vocabulary, config)
CASES = {
    "topk": (4, dict(method="topk", k=2, depth=2, tree_size=4)),
    "rheo m=0": (4, dict(method="rheo", k=2, m=0, depth=2, tree_size=4)),
    "rheo m=1": (5, dict(method="rheo", k=3, m=1, depth=2, tree_size=5)),
    "rheo m=1 pruned": (5, dict(method="rheo", k=3, m=1, depth=1, tree_size=1)),
    "rheo m=2 depth 3": (4, dict(method="rheo", k=3, m=2, depth=3, tree_size=5)),
    "rheo deterministic_first": (5, dict(method="rheo", k=3, m=1, depth=2, tree_size=5,
                                         verify_order="deterministic_first")),
    "rheo proxy=fixed": (4, dict(method="rheo", k=2, m=0, depth=2, tree_size=4, proxy="fixed", proxy_value=0.9)),
    "static rsd": (5, dict(method="static", branching=(2, 2))),
    "static specinfer": (5, dict(method="static", branching=(2, 2), replacement=True)),
    "static rsd short support": (3, dict(method="static", branching=(3, 1))),
    "chain": (6, dict(method="chain", depth=3)),
}


def _trees(vocab: int, cfg: SpecConfig, limit: int):
    """Distinct random trees of ``cfg`` on a toy pair from ``limit`` seeds (typical draws, as a
    run makes them), with their target logits."""
    target, drafter, _ = toy_pair(vocab, salt=4)
    t_sess = target.new_session()
    t_sess.prefill([0])
    method = get_method(cfg.method)
    seen = set()
    for seed in range(limit):
        built = method.build_tree(draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
        key = (tuple(built.tree.tokens.tolist()), tuple(built.tree.parents.tolist()), tuple(built.kind.tolist()))
        if key not in seen:
            seen.add(key)
            yield built, t_sess.score_tree(built.tree).logits


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("sparse_top", [None, 3])
def test_path_probs_equal_the_enumerated_verifier_and_the_reference(case, temperature, sparse_top):
    vocab, kwargs = CASES[case]
    cfg = SpecConfig(**kwargs, temperature=temperature, sparse_top=sparse_top)
    method = get_method(cfg.method)
    static = method.kind == "static"
    checked = 0
    for built, logits in _trees(vocab, cfg, limit=12):
        fast = method.node_path_probs(built, logits, cfg)
        exact = verifier_path_probs(method.verify, built, logits, cfg)
        ref = reference_path_probs(built, logits, cfg, static)
        assert fast.dtype == torch.float64 and fast[0] == 1.0
        assert max(abs(a - b) for a, b in zip(fast.tolist(), exact)) < EXACT, (fast, exact)
        assert max(abs(a - b) for a, b in zip(fast.tolist(), ref)) < 1e-12
        assert abs(method.expected_emitted(built, logits, cfg) - sum(exact)) < EXACT
        checked += 1
    assert checked >= 1


def _recording(name: str):
    """A copy of method ``name`` whose verifier keeps every (tree, logits) it verifies."""
    seen = []
    base = get_method(name)

    def verify(built, logits, cfg, rng):
        seen.append((built, logits))
        return base.verify(built, logits, cfg, rng)
    return register(dataclasses.replace(base, name=f"recording_{name}", verify=verify), replace=True), seen


@pytest.mark.parametrize("case", ["topk", "rheo m=1", "rheo deterministic_first", "static rsd", "static specinfer",
                                  "chain"])
@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
def test_recorded_expectation_is_exact_for_every_cycle(case, temperature):
    vocab, kwargs = CASES[case]
    rec, seen = _recording(kwargs["method"])
    try:
        cfg = SpecConfig(**{**kwargs, "method": rec.name}, temperature=temperature, sparse_top=None)
        target, drafter, _ = toy_pair(vocab, salt=6)
        out = speculative_generate(target, drafter, [1, 2], 12, cfg, torch.Generator().manual_seed(3),
                                   record_expected=True)
        plain = speculative_generate(target, drafter, [1, 2], 12, dataclasses.replace(cfg, method=kwargs["method"]),
                                     torch.Generator().manual_seed(3))
    finally:
        unregister(rec.name)
    assert out.tokens == plain.tokens and out.accept_lengths == plain.accept_lengths
    assert not plain.expected_accept_lengths
    assert len(out.expected_accept_lengths) == out.target_calls == len(seen)
    for got, (built, logits) in zip(out.expected_accept_lengths, seen):
        assert abs(got - sum(verifier_path_probs(get_method(kwargs["method"]).verify, built, logits, cfg))) < EXACT
    assert out.last_cycle_verified >= out.accept_lengths[-1] >= 1
    if temperature == 0.0:  # no randomness left: expected == realized, the last cycle counted uncut
        uncut = out.accept_lengths[:-1] + [out.last_cycle_verified]
        assert out.expected_accept_lengths == pytest.approx(uncut, abs=1e-12)


@pytest.mark.parametrize("kwargs", [dict(method="topk", k=4, depth=4, tree_size=20),
                                    dict(method="rheo", k=4, m=1, depth=4, tree_size=20),
                                    pytest.param(dict(method="static", branching=(3, 2, 1)), marks=pytest.mark.slow),
                                    pytest.param(dict(method="static", branching=(3, 2, 1), replacement=True),
                                                 marks=pytest.mark.slow)])  # static trees: make test-slow
def test_monte_carlo_on_larger_trees(kwargs):
    """Mean emitted tokens of 3000 seeded verifier runs per tree (vocabulary 40, up to 20 nodes)
    within 4.4 standard errors of the expectation: a correct expectation fails one seed in
    ~10^5 per tree (two-sided normal tail), three trees per case."""
    cfg = SpecConfig(**kwargs, temperature=1.0, sparse_top=16)
    method = get_method(cfg.method)
    target, drafter, _ = toy_pair(40, salt=9, scale=2.0)
    t_sess = target.new_session()
    t_sess.prefill([0])
    for seed in range(3):
        built = method.build_tree(draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(seed)))
        logits = t_sess.score_tree(built.tree).logits
        expected = method.expected_emitted(built, logits, cfg)
        rng = TorchRandom(torch.Generator().manual_seed(100 + seed))
        runs = [len(method.verify(built, logits, cfg, rng).tokens) for _ in range(3000)]
        mean = sum(runs) / len(runs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in runs) / (len(runs) - 1))
        assert built.tree.num_nodes > 8 and abs(mean - expected) <= 4.4 * sd / math.sqrt(len(runs)) + 1e-12


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
@pytest.mark.parametrize("kwargs", [dict(method="rheo", k=3, m=1, depth=2, tree_size=5),
                                    dict(method="static", branching=(2, 2))])
def test_sum_over_cycles_with_the_last_uncut_has_mean_zero(kwargs):
    """Per generation, sum over cycles of realized (last cycle uncut) minus expected emitted tokens:
    mean 0 over seeds (optional stopping; the budget cuts most last cycles). 1500 seeded
    generations within 4.4 standard errors: a correct recording fails one run in ~10^5."""
    cfg = SpecConfig(**kwargs, temperature=1.0)
    target, drafter, _ = toy_pair(5, salt=6)
    sums, cut = [], 0
    for seed in range(1500):
        out = speculative_generate(target, drafter, [1, 2], 5, cfg, torch.Generator().manual_seed(seed),
                                   record_expected=True)
        cut += out.last_cycle_verified > out.accept_lengths[-1]
        sums.append(sum(out.accept_lengths[:-1]) + out.last_cycle_verified - sum(out.expected_accept_lengths))
    mean = sum(sums) / len(sums)
    sd = math.sqrt(sum((x - mean) ** 2 for x in sums) / (len(sums) - 1))
    assert cut > 100 and abs(mean) <= 4.4 * sd / math.sqrt(len(sums))


class _LazyTarget:
    """A toy target whose scored logits are LazyLogits (rows counted), like HFTarget's."""

    def __init__(self, model) -> None:
        self.model, self.vocab_size, self.scored, self.paths = model, model.vocab_size, [], []

    def new_session(self):
        inner, outer = self.model.new_session(), self

        class Session:
            def prefill(self, ids):
                return inner.prefill(ids)

            def score_tree(self, tree):
                dense = inner.score_tree(tree).logits
                lazy = LazyLogits(tree.num_nodes, dense.shape[1], lambda idx: dense[idx], torch.device("cpu"),
                                  prefetch=first_child_chain(tree.parents))
                outer.scored.append((tree, lazy))
                return TargetOutput(logits=lazy, features=None)

            def commit(self, path):
                outer.paths.append(list(path) if isinstance(path, list) else path.tolist())
                inner.commit(path)
        return Session()


@pytest.mark.parametrize("method", ["rheo", "static"])
def test_free_when_off_lazy_rows(method):
    cfg = SpecConfig.for_method(method=method, k=3, m=1, depth=3, tree_size=8, branching=(2, 2, 1), temperature=1.0,
                     sparse_top=None)
    base, drafter, _ = toy_pair(6, salt=2)
    runs = {}
    for on in (False, True):
        target = _LazyTarget(base)
        out = speculative_generate(target, drafter, [1, 2], 16, cfg, torch.Generator().manual_seed(1),
                                   record_expected=on)
        runs[on] = (out, target)
    (off, t_off), (on, t_on) = runs[False], runs[True]
    assert off.tokens == on.tokens and len(on.expected_accept_lengths) == on.target_calls
    for (tree, lazy), path in zip(t_off.scored, t_off.paths):  # off: the chain and the path, nothing else
        assert set(lazy._rows) == set(first_child_chain(tree.parents)) | set(path)
    for tree, lazy in t_on.scored:  # on: every node with children, in one batch besides the prefetch
        assert set(tree.parents[1:].tolist()) <= set(lazy._rows) and len(lazy.computed_in_batches) <= 3
    assert sum(len(x._rows) for _, x in t_on.scored) > sum(len(x._rows) for _, x in t_off.scored)


def test_a_method_without_path_probs_is_refused_up_front():
    plain = register(dataclasses.replace(get_method("topk"), name="no_expectation", path_probs=None))
    try:
        target, drafter, _ = toy_pair(4)
        cfg = SpecConfig.for_method(method=plain.name, k=2, depth=1, tree_size=2)
        with pytest.raises(ValueError, match="record_expected needs the method's path_probs"):
            speculative_generate(target, drafter, [1], 4, cfg, record_expected=True)
        assert speculative_generate(target, drafter, [1], 4, cfg).tokens  # off: fine
    finally:
        unregister(plain.name)
