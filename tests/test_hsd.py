"""HSD (Hierarchical Speculative Decoding) on chains and static trees, proved by test.

* **Exact enumeration.** One cycle's emitted tokens are lossless iff, for every prefix ``s``,
  the probability that the output runs through ``s y`` is ``p(y | s)`` times the probability
  that it runs through ``s`` and goes on (the next cycle then starts afresh at the new
  context). Every random choice of drafting and verifying is enumerated on tiny vocabularies,
  and that holds to 1e-9 at every depth of chains and trees of depth 3 and 4; the whole
  decoder's first tokens are compared with the target's as well.
* **Chi-square** on larger vocabularies: p < 1e-4 fails, so a correct decoder fails one such
  test in 10,000 fresh seeds.
* **Greedy identity** at T = 0.
* **Negative control** the same tests catch: HSD without its cap (the whole chain accepted with
  ``min(1, rho_L)``).
* **Rheo's tree** (``rheo_hsd``): enumerated with leads, samples, fills and pruning.
* **Path probabilities**: exactly the enumerated verifier's on random trees; on average over the
  drafted chain never below token-wise speculative sampling's at any depth; exactly Top-K's on Top-K's tree; and the
  expected emitted tokens agree with Monte Carlo on 24 states.
"""

import dataclasses
import itertools
from collections import Counter, defaultdict

import pytest
import torch
from test_core_greedy import VOCAB, drafters, greedy_reference, greedy_run
from toys import chi_square_pvalue, toy_pair
from toys import draft_fn as _draft_fn

from rheo.decode import SpecConfig, speculative_generate
from rheo.exact import (cycle_distribution, decoder_distribution, enumerate_runs, target_distribution,
                        total_variation, verifier_path_probs)
from rheo.expected import dynamic_path_probs, static_path_probs
from rheo.hsd import REFUSED, hsd_path_probs, refusal, verify_hsd
from rheo.methods import build_tree, get_method, register, unregister
from rheo.probs import target_probs
from rheo.random import TorchRandom

EXACT = 1e-9
ALPHA = 1e-4


def hsd(branching, replacement=True, temperature=1.0, sparse_top=None):
    return SpecConfig.for_method(method="hsd", branching=branching, replacement=replacement,
                                 temperature=temperature, sparse_top=sparse_top)


def hsd_chain(depth, temperature=1.0, sparse_top=None, method="hsd_chain"):
    return SpecConfig(method=method, depth=depth, temperature=temperature, sparse_top=sparse_top)


def rheo(method="rheo", **kw):
    return SpecConfig(method=method, **kw)


@pytest.fixture
def uncapped():
    """HSD without the cap: lossy on purpose."""
    def verify(built, logits, cfg, rng):
        return verify_hsd(built, logits, cfg, rng, cap=False)

    def probs(built, logits, cfg):
        return hsd_path_probs(built, logits, cfg, cap=False)

    register(dataclasses.replace(get_method("hsd_chain"), name="hsd_uncapped", verify=verify, path_probs=probs))
    yield "hsd_uncapped"
    unregister("hsd_uncapped")


@pytest.fixture
def on_topk():
    """HSD's verifier on Top-K's tree (no method registered: it is Top-K's own verifier)."""
    register(dataclasses.replace(get_method("topk"), name="topk_hsd", verify=verify_hsd, path_probs=hsd_path_probs))
    yield
    unregister("topk_hsd")


def cycle_violation(cfg, vocab, salt=0, context=(1, 2), pair=None):
    """Largest breach of the one-cycle lossless condition (module docstring), over every prefix."""
    target, drafter, t_fn = pair if pair is not None else toy_pair(vocab, salt)
    dist = cycle_distribution(target, drafter, list(context), cfg)
    through = defaultdict(float)  # prefix -> probability that the emitted tokens run through it
    for emitted, w in dist.items():
        for j in range(1, len(emitted) + 1):
            through[emitted[:j]] += w
    worst = abs(sum(dist.values()) - 1.0)
    for length in range(max(len(e) for e in dist)):
        for s in itertools.product(range(vocab), repeat=length):
            goes_on = sum(through[s + (y,)] for y in range(vocab))
            if goes_on > 0:
                p = target_probs(t_fn(tuple(context) + s).to(torch.float64), cfg.temperature)
                worst = max(worst, max(abs(through[s + (y,)] - float(p[y]) * goes_on) for y in range(vocab)))
    return worst


# ------------------------------------------------------------------ exact enumeration
@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_chain_depth3_lossless(temperature):
    assert cycle_violation(hsd_chain(3, temperature), vocab=3, salt=5) < EXACT


@pytest.mark.parametrize("replacement", [True, False], ids=["specinfer", "rsd"])
def test_tree_depth2_lossless(replacement):
    assert cycle_violation(hsd((2, 1), replacement, 0.8), vocab=3, salt=2) < EXACT


def test_whole_decoder_lossless():
    target, drafter, t_fn = toy_pair(3, salt=3)
    got = decoder_distribution(target, drafter, [1, 2], 3, hsd_chain(2, 0.7))
    assert total_variation(got, target_distribution(t_fn, [1, 2], 3, 0.7)) < EXACT


@pytest.mark.slow
@pytest.mark.parametrize("cfg,vocab", [
    (hsd_chain(4, 0.6), 3), (hsd_chain(3, 1.0, sparse_top=2), 4),
    (hsd((2, 1, 1), True), 3),  # the paper's multi-draft: chains drawn independently below the root
    (hsd((2, 1, 1), False, 0.7), 3), (hsd((2, 2, 1), False, 0.7), 3), (hsd((2, 2, 1), True, 1.0, 2), 3),
], ids=lambda v: f"{v.method}-{v.branching or v.depth}-{v.replacement}-T{v.temperature}-s{v.sparse_top}"
   if isinstance(v, SpecConfig) else str(v))
def test_depth3_and_4_lossless(cfg, vocab):
    assert cycle_violation(cfg, vocab) < EXACT


def test_uncapped_is_caught(uncapped):
    assert cycle_violation(hsd_chain(3, 1.0, method=uncapped), vocab=3, salt=5) > 1e-3
    assert cycle_violation(hsd_chain(3, 1.0), vocab=3, salt=5) < EXACT


# ------------------------------------------------------------------ chi-square (vocabulary 6)
def _counts(cfg, n_runs, n_tokens, seed=1):
    target, drafter, _ = toy_pair(6, salt=21)
    g = torch.Generator().manual_seed(seed)
    return Counter(tuple(speculative_generate(target, drafter, [0, 1], n_tokens, cfg, g).tokens)
                   for _ in range(n_runs))


def _chi_square(cfg, n_runs=3000, n_tokens=2):
    t_fn = toy_pair(6, salt=21)[2]
    return chi_square_pvalue(_counts(cfg, n_runs, n_tokens), target_distribution(t_fn, [0, 1], n_tokens,
                                                                                cfg.temperature))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [hsd_chain(4, 1.0, 5), hsd((3, 1, 1), True, 0.7), hsd((2, 2, 1), False)],
                         ids=["chain4", "specinfer311", "rsd221"])
def test_chi_square_first_two_tokens(cfg):
    p, dof = _chi_square(cfg)
    assert dof >= 10 and p > ALPHA


@pytest.mark.slow
def test_chi_square_detects_uncapped(uncapped):
    p, _ = _chi_square(hsd_chain(4, 1.0, method=uncapped), n_runs=6000, n_tokens=3)
    assert p < ALPHA


# ------------------------------------------------------------------ greedy identity (T = 0)
@pytest.mark.parametrize("cfg", [hsd_chain(4, 0.0, 5), hsd((3, 2, 1), True, 0.0), hsd((2, 2, 1), False, 0.0)],
                         ids=["chain", "specinfer", "rsd"])
@pytest.mark.parametrize("kind", ["right", "wrong", "partly"])
def test_greedy_equals_target_greedy(cfg, kind):
    out, reference = greedy_run(cfg, kind)
    assert out.tokens == reference
    if kind == "wrong":
        assert set(out.accept_lengths) == {1}


# ------------------------------------------------------------------ path probabilities
def _trees(cfg, vocab=4, salt=8, limit=30):
    """(built, target logits) of up to ``limit`` enumerated random trees of ``cfg``."""
    target, drafter, _ = toy_pair(vocab, salt=salt)
    t_sess = target.new_session()
    t_sess.prefill([0])
    for i, (built, _) in enumerate(enumerate_runs(lambda rng: build_tree(_draft_fn(drafter, [0, 1]), 1, cfg, rng))):
        if i == limit:
            return
        yield built, t_sess.score_tree(built.tree).logits


@pytest.mark.parametrize("cfg", [pytest.param(hsd_chain(3, 0.8), marks=pytest.mark.slow), hsd((2, 2), True),
                                 hsd((2, 1, 1), False, 0.6, 3), hsd((2, 1), True, 0.0)],
                         ids=["chain", "specinfer", "rsd", "greedy"])
def test_path_probs_equal_the_enumerated_verifier(cfg):
    for built, logits in _trees(cfg, limit=8):
        exact = torch.tensor(verifier_path_probs(verify_hsd, built, logits, cfg), dtype=torch.float64)
        torch.testing.assert_close(hsd_path_probs(built, logits, cfg), exact, rtol=0, atol=EXACT)


@pytest.mark.slow
def test_never_below_token_wise_on_average_over_the_chains():
    """Averaged over the drafted chain, HSD accepts at least i tokens with probability
    E[T_i / Q_i] = E[rho_i / M_i] >= E[prod min(1, ratio)], token-wise speculative sampling's, at every
    depth i (on one fixed chain either can be ahead)."""
    for temperature, salt in ((0.6, 0), (1.0, 1), (1.0, 2)):
        cfg, depth = hsd_chain(4, temperature), 4
        target, drafter, _ = toy_pair(3, salt=salt)
        t_sess = target.new_session()
        t_sess.prefill([0])
        ours, theirs = torch.zeros(depth + 1, dtype=torch.float64), torch.zeros(depth + 1, dtype=torch.float64)
        for built, w in enumerate_runs(lambda rng: build_tree(_draft_fn(drafter, [0, 1]), 1, cfg, rng)):
            logits = t_sess.score_tree(built.tree).logits
            depths = built.tree.depths
            ours.index_add_(0, depths, w * hsd_path_probs(built, logits, cfg))
            theirs.index_add_(0, depths, w * static_path_probs(built, logits, cfg))
        assert bool((ours >= theirs - 1e-12).all()) and float(ours.sum()) > float(theirs.sum()) + 1e-3


def test_on_topk_tree_hsd_is_topk(on_topk):
    """Point masses: HSD walks Top-K's tree exactly as Top-K's verifier does (the reach of every
    node is its target probability, the most any lossless verifier can give it)."""
    cfg = rheo("topk_hsd", k=3, depth=3, tree_size=8, temperature=0.8)
    for built, logits in _trees(cfg, vocab=5, limit=1):
        ours = hsd_path_probs(built, logits, cfg)
        torch.testing.assert_close(ours, dynamic_path_probs(built, logits, cfg), rtol=0, atol=EXACT)
        exact = torch.tensor(verifier_path_probs(verify_hsd, built, logits, cfg), dtype=torch.float64)
        torch.testing.assert_close(ours, exact, rtol=0, atol=EXACT)


@pytest.mark.slow
def test_monte_carlo_matches_exact_on_24_states():
    """24 states (toy contexts x 3 tree rules): the mean emitted tokens of the verifier over 1000
    seeded runs on each state's tree lies within 4.5 standard errors of the exact expectation
    (false alarm over the 24 states < 2e-4), plus 3 x (most tokens) / runs for outcomes too rare
    to show up in the runs (an outcome of probability 3 / runs is missed with probability 5%)."""
    cfgs = [hsd_chain(6, 0.8), hsd((3, 1, 1, 1), True, 1.0), hsd((2, 2, 1), False, 0.6)]
    g, n = torch.Generator().manual_seed(3), 1000
    states = 0
    for cfg in cfgs:
        target, drafter, _ = toy_pair(12, salt=30)
        for context in range(8):
            prompt = [context, (3 * context + 1) % 12]
            t_sess = target.new_session()
            t_sess.prefill(prompt[:-1])
            built = build_tree(_draft_fn(drafter, prompt), prompt[-1], cfg, TorchRandom(g))
            logits = t_sess.score_tree(built.tree).logits
            exact = get_method(cfg.method).expected_emitted(built, logits, cfg)
            runs = torch.tensor([len(verify_hsd(built, logits, cfg, TorchRandom(g)).tokens) for _ in range(n)],
                                dtype=torch.float64)
            bound = 4.5 * float(runs.std()) / n ** 0.5 + 3 * int(built.tree.depths.max() + 1) / n
            assert abs(float(runs.mean()) - exact) < bound, (cfg.method, context, float(runs.mean()), exact)
            states += 1
    assert states == 24


# ------------------------------------------------------------------ Rheo's tree (rheo_hsd)
@pytest.mark.slow
@pytest.mark.parametrize("kw,vocab", [(dict(k=2, m=1, depth=3, tree_size=4), 3),
                                      (dict(k=3, m=1, depth=3, tree_size=5), 4)], ids=["no-fills", "fills"])
def test_rheo_tree_lossless(kw, vocab):
    """Leads, one sample and fills, pruned; depth 3 (the fills case takes minutes)."""
    target, drafter, t_fn = toy_pair(vocab, 0, 0.5)  # flat drafts: samples tie with leads, pruning bites
    assert cycle_violation(rheo("rheo_hsd", temperature=1.0, **kw), vocab, pair=(target, drafter, t_fn)) < EXACT


def test_rheo_tree_path_probs_equal_the_enumerated_verifier():
    cfg = rheo("rheo_hsd", k=3, m=1, depth=3, tree_size=6, temperature=0.8)
    for built, logits in _trees(cfg, vocab=5, limit=3):
        exact = torch.tensor(verifier_path_probs(verify_hsd, built, logits, cfg), dtype=torch.float64)
        torch.testing.assert_close(hsd_path_probs(built, logits, cfg), exact, rtol=0, atol=EXACT)


def test_rheo_tree_greedy_equals_target_greedy():
    target, _, t_fn = toy_pair(VOCAB, salt=11)
    drafter = drafters(t_fn, toy_pair(VOCAB, salt=12)[2])["partly"]
    cfg = rheo("rheo_hsd", k=3, m=1, depth=3, tree_size=8, temperature=0.0)
    out = speculative_generate(target, drafter, [1, 2, 3], 30, cfg, torch.Generator().manual_seed(0))
    assert out.tokens == greedy_reference(t_fn, [1, 2, 3], 30)


def test_refusals_are_one_line():
    assert refusal("proxy=fixed") == REFUSED["proxy=fixed"] and all("\n" not in r for r in REFUSED.values())
    assert refusal("topk") is None and refusal("rheo") is None and refusal("static") is None
    with pytest.raises(ValueError, match="proxy='fixed'"):
        rheo("rheo_hsd", proxy="fixed")
