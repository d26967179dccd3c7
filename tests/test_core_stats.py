"""Monte-Carlo checks where enumeration is too large, and acceptance vs theory.

Chi-square tests use fixed seeds (so they are deterministic in CI) and the
threshold p < 1e-4: with a correct decoder a fresh seed would fail one such test
once in 10,000. A lossy decoder (deterministic-first with fills) is detected by the
same test.
"""

from collections import Counter

import pytest
import torch
from toys import chi_square_pvalue, constant_pair, toy_pair

from baselines.autoregressive import autoregressive_generate
from rheo.decode import SpecConfig, speculative_generate
from rheo.exact import cycle_distribution, target_distribution
from rheo.models.toy import PrefixLM
from rheo.probs import tempered
from rheo.theory import node_acceptance, ot_bound

ALPHA = 1e-4


def _sample_prefixes(target, drafter, cfg, n_runs, n_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    return Counter(tuple(speculative_generate(target, drafter, [0, 1], n_tokens, cfg, g).tokens)
                   for _ in range(n_runs))


# Rheo m=1 in the default suite; every configuration in make test-slow (test_core_exact enumerates each exactly)
@pytest.mark.parametrize("cfg", [
    SpecConfig(k=4, m=1, depth=3, tree_size=8, sparse_top=5, temperature=1.0),
    pytest.param(SpecConfig(k=4, m=2, depth=3, tree_size=8, sparse_top=None, temperature=0.5), marks=pytest.mark.slow),
    pytest.param(SpecConfig(k=4, m=0, depth=3, tree_size=6, sparse_top=None, temperature=1.0), marks=pytest.mark.slow),
    pytest.param(SpecConfig(method="topk", k=4, depth=3, tree_size=8, sparse_top=5, temperature=1.0),
                 marks=pytest.mark.slow),
], ids=["m1-sparse", "m2-T0.5", "m0", "topk"])
def test_chi_square_first_two_tokens(cfg):
    target, drafter, t_fn = toy_pair(6, salt=21)
    counts = _sample_prefixes(target, drafter, cfg, 3000, 2, seed=1)
    p, dof = chi_square_pvalue(counts, target_distribution(t_fn, [0, 1], 2, cfg.temperature))
    assert dof >= 10 and p > ALPHA


@pytest.mark.slow  # the exact negative control: test_core_exact.py::test_deterministic_first_lossy_with_fills
def test_chi_square_detects_deterministic_first():
    target, drafter, t_fn = toy_pair(6, salt=21)
    cfg = SpecConfig(k=4, m=1, depth=1, tree_size=4, sparse_top=None, verify_order="deterministic_first")
    counts = _sample_prefixes(target, drafter, cfg, 3000, 1, seed=1)
    p, _ = chi_square_pvalue(counts, target_distribution(t_fn, [0, 1], 1, 1.0))
    assert p < ALPHA


def test_autoregressive_baseline_matches_target():
    target, _, t_fn = toy_pair(6, salt=21)
    g = torch.Generator().manual_seed(2)
    counts = Counter(tuple(autoregressive_generate(target, [0, 1], 2, 1.0, g).tokens) for _ in range(3000))
    p, _ = chi_square_pvalue(counts, target_distribution(t_fn, [0, 1], 2, 1.0))
    assert p > ALPHA


def _acceptance_mc(p_logits, q_logits, cfg, n_runs, seed):
    """One cycle per run: accept length 2 = a child accepted, 1 = bonus only."""
    target, drafter = constant_pair(p_logits, q_logits)
    g = torch.Generator().manual_seed(seed)
    hits = sum(speculative_generate(target, drafter, [0], 2, cfg, g).accept_lengths[0] == 2
               for _ in range(n_runs))
    return hits / n_runs, n_runs


@pytest.mark.parametrize("method,m", [pytest.param("topk", 0, marks=pytest.mark.slow),
                                      pytest.param("rheo", 0, marks=pytest.mark.slow), ("rheo", 1),
                                      pytest.param("rheo", 2, marks=pytest.mark.slow)])
def test_closed_form_matches_monte_carlo(method, m):
    g = torch.Generator().manual_seed(4)
    p_logits = torch.randn(8, generator=g, dtype=torch.float64) * 1.5
    q_logits = torch.randn(8, generator=g, dtype=torch.float64) * 1.5
    k, temperature = 4, 0.8
    cfg = SpecConfig.for_method(method=method, k=k, m=m, depth=1, tree_size=k, temperature=temperature, sparse_top=6)
    closed = node_acceptance(tempered(p_logits, temperature), q_logits, method, k, m, temperature, 6)
    rate, n = _acceptance_mc(p_logits, q_logits, cfg, 4000, seed=5)
    sigma = (closed * (1 - closed) / n) ** 0.5
    assert abs(rate - closed) < 5 * sigma + 1e-3  # 5 sigma: false alarm < 1e-6


@pytest.mark.parametrize("k,m,sparse_top", [(3, 0, None), (3, 1, None), (3, 2, None), (4, 1, 4), (2, 1, None)])
@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_closed_form_matches_exact_verifier(k, m, sparse_top, temperature):
    """The verifier's exact acceptance (enumerated) equals the closed form to 1e-12."""
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        p_logits = torch.randn(6, generator=g, dtype=torch.float64) * 2
        q_logits = torch.randn(6, generator=g, dtype=torch.float64) * 2
        target, drafter = constant_pair(p_logits, q_logits)
        cfg = SpecConfig(k=k, m=m, depth=1, tree_size=k, temperature=temperature, sparse_top=sparse_top)
        exact = sum(w for emitted, w in cycle_distribution(target, drafter, [0], cfg).items() if len(emitted) == 2)
        closed = node_acceptance(tempered(p_logits, temperature), q_logits, "rheo", k, m, temperature, sparse_top)
        assert abs(exact - closed) < 1e-12


def test_stochastic_first_attains_ot_bound():
    """No fills (k = m + 1): D = leads is fixed and Rheo's acceptance is the OT bound."""
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        p = torch.softmax(torch.randn(12, generator=g, dtype=torch.float64) * 2, -1)
        q_logits = torch.randn(12, generator=g, dtype=torch.float64) * 2
        for m in (0, 1, 2):
            leads = torch.argsort(q_logits, descending=True, stable=True)[:m].tolist()
            q_tilde = torch.softmax(q_logits, -1)
            q_tilde[leads] = 0
            q_tilde = q_tilde / q_tilde.sum()
            closed = node_acceptance(p, q_logits, "rheo", k=m + 1, m=m, temperature=1.0)
            assert abs(closed - ot_bound(p, q_tilde, leads)) < 1e-12


def test_rheo_vs_topk_acceptance_report(capsys):
    """What the maths guarantees at one node, on 200 random nodes (V = 64), plus a report of how
    often Rheo (m=1) out-accepts Top-K (reported, not assumed):

    * no fills (k = m + 1): Rheo's acceptance is the OT bound of D = leads (to 1e-12);
    * fills only add chances: Rheo(k=4) >= Rheo(k=2), and Top-K(4) >= Top-K(2);
    * every token in the tree (k = V, no truncation): both accept with probability 1 (to 1e-12).
    """
    wins, diffs = 0, []
    for seed in range(200):
        g = torch.Generator().manual_seed(seed)
        q_logits = torch.randn(64, generator=g, dtype=torch.float64) * 2
        p_logits = q_logits + torch.randn(64, generator=g, dtype=torch.float64)  # a related target
        p = torch.softmax(p_logits, -1)
        rheo = node_acceptance(p, q_logits, "rheo", k=4, m=1, sparse_top=None)
        topk = node_acceptance(p, q_logits, "topk", k=4, sparse_top=None)
        no_fill = node_acceptance(p, q_logits, "rheo", k=2, m=1, sparse_top=None)
        lead = [int(q_logits.argmax())]
        q_tilde = torch.softmax(q_logits, -1)
        q_tilde[lead] = 0
        assert abs(no_fill - ot_bound(p, q_tilde / q_tilde.sum(), lead)) < 1e-12
        assert rheo >= no_fill - 1e-12
        assert topk >= node_acceptance(p, q_logits, "topk", k=2, sparse_top=None) - 1e-12
        for method in ("rheo", "topk"):
            assert abs(node_acceptance(p, q_logits, method, k=64, m=1, sparse_top=None) - 1.0) < 1e-12
        wins += rheo > topk
        diffs.append(rheo - topk)
    with capsys.disabled():
        print(f"\n[report] k=4 V=64 T=1: Rheo(m=1) > Top-K at {wins}/200 random nodes, "
              f"mean gain {sum(diffs) / len(diffs):+.4f}")


def test_closed_forms_stay_probabilities_under_rounding():
    """A target whose float64 sum is 1 + 2.2e-16 (as a softmax can be): the closed forms are
    clamped to [0, 1] (the maths says they are probabilities) instead of returning 1.0000000000000002."""
    p = torch.tensor([0.5, 0.5000000000000002], dtype=torch.float64)
    assert float(p.sum()) > 1.0
    q_logits = torch.tensor([1.0, 0.0], dtype=torch.float64)
    assert node_acceptance(p, q_logits, "topk", k=2, sparse_top=None) == 1.0
    assert node_acceptance(p, q_logits, "rheo", k=2, m=1, sparse_top=None) <= 1.0
    assert ot_bound(p, torch.tensor([0.0, 1.0], dtype=torch.float64), [0]) == 1.0
