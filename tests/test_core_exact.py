"""Layer 3: the decoder's output distribution equals the target's, by exact enumeration.

Every random choice (the samples drawn while drafting, every accept/reject and
bonus draw) is enumerated with rheo.exact; probabilities are float64, so a lossless
decoder matches the target to ~1e-12 and a lossy one misses by orders more.
"""

import pytest
import torch
from toys import toy_pair

from rheo.decode import SpecConfig, generate_with_source
from rheo.exact import decoder_distribution, enumerate_outcomes, target_distribution, total_variation

EXACT = 1e-9


def _tv(cfg: SpecConfig, vocab: int, n_tokens: int, salt: int = 0, prompt=(1, 2)) -> float:
    target, drafter, t_fn = toy_pair(vocab, salt)
    got = decoder_distribution(target, drafter, list(prompt), n_tokens, cfg)
    want = target_distribution(t_fn, list(prompt), n_tokens, cfg.temperature)
    assert abs(sum(got.values()) - 1.0) < EXACT
    return total_variation(got, want)


GRID = [("topk", 0), ("rheo", 0), ("rheo", 1), ("rheo", 2)]


@pytest.mark.parametrize("method,m", GRID)
@pytest.mark.parametrize("temperature", [0.5, 1.0])
@pytest.mark.parametrize("sparse_top", [None, 3])
def test_lossless_depth2_two_tokens(method, m, temperature, sparse_top):
    k = 3 if m == 2 else 2
    cfg = SpecConfig.for_method(method=method, k=k, m=m, depth=2, tree_size=4, temperature=temperature,
                     sparse_top=sparse_top)
    assert _tv(cfg, vocab=4, n_tokens=2) < EXACT


@pytest.mark.parametrize("method,m", [("topk", 0), ("rheo", 1)])
def test_lossless_depth3_three_tokens(method, m):
    cfg = SpecConfig.for_method(method=method, k=2, m=m, depth=3, tree_size=4, temperature=1.0, sparse_top=None)
    assert _tv(cfg, vocab=3, n_tokens=3, salt=5) < EXACT


@pytest.mark.parametrize("vocab,tree_size", [(5, 1), (6, 2)])
def test_lossless_depth1_pruned(vocab, tree_size):
    """Pruning below k: the sample is sometimes cut, yet the output stays exact."""
    cfg = SpecConfig(k=3, m=1, depth=1, tree_size=tree_size, temperature=1.0, sparse_top=None)
    assert _tv(cfg, vocab=vocab, n_tokens=2, salt=3) < EXACT


def test_whole_decode_loop_enumerated():
    """Enumerate speculative decoding end to end (session commits included)."""
    target, drafter, t_fn = toy_pair(4, salt=7)
    cfg = SpecConfig(k=2, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None)
    got = enumerate_outcomes(lambda rng: tuple(generate_with_source(target, drafter, [0, 1], 2, cfg, rng).tokens))
    want = target_distribution(t_fn, [0, 1], 2, 1.0)
    assert total_variation(got, want) < EXACT


def test_deterministic_first_lossless_without_fills():
    cfg = SpecConfig(k=2, m=1, depth=2, tree_size=4, temperature=1.0, sparse_top=None,
                     verify_order="deterministic_first")
    assert _tv(cfg, vocab=4, n_tokens=2) < EXACT


def test_deterministic_first_lossy_with_fills():
    cfg = SpecConfig(k=3, m=1, depth=1, tree_size=3, temperature=1.0, sparse_top=None,
                     verify_order="deterministic_first")
    assert _tv(cfg, vocab=5, n_tokens=1, salt=1) > 1e-3
    stoch = SpecConfig(k=3, m=1, depth=1, tree_size=3, temperature=1.0, sparse_top=None)
    assert _tv(stoch, vocab=5, n_tokens=1, salt=1) < EXACT


def _lemma1(proxy: str) -> dict:
    """Vocabulary {A, B, C}; draft (0.5, 0.3, 0.2); k=3, m=1, keep 2 children, depth 1."""
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    from toys import constant_pair
    target, drafter = constant_pair(p.log(), q.log())
    cfg = SpecConfig(k=3, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None, proxy=proxy,
                     proxy_value=0.25)
    return decoder_distribution(target, drafter, [0], 1, cfg), {(i,): float(p[i]) for i in range(3)}


def test_lemma1_rheo_proxy_lossless():
    got, want = _lemma1("rheo")
    assert total_variation(got, want) < EXACT


def test_lemma1_fixed_proxy_detected_lossy():
    got, want = _lemma1("fixed")
    assert total_variation(got, want) > 1e-2

