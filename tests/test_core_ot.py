"""The optimal-transport bound (rheo.ot): the LP equals its min-cut twin, the known closed forms
(a fixed set: p(D); one sample: sum min(p, q); leads + one sample: rheo.theory.ot_bound), and no
method's own acceptance exceeds the bound of its candidate sets."""

from __future__ import annotations

import pytest
import torch

from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.ot import coupling_bound, min_cut_bound
from rheo.probs import draft_distribution, tempered
from rheo.theory import ot_bound

CASES = [dict(method="topk", k=3), dict(method="rheo", k=3, m=0), dict(method="rheo", k=3, m=1),
         dict(method="rheo", k=4, m=2), dict(method="static", branching=(2,)),
         dict(method="static", branching=(3,), replacement=True), dict(method="chain", depth=1)]


def _node(vocab: int, seed: int, temperature: float):
    g = torch.Generator().manual_seed(seed)
    p_logits = torch.randn(vocab, generator=g, dtype=torch.float64)
    q_logits = p_logits + 1.5 * torch.randn(vocab, generator=g, dtype=torch.float64)
    return tempered(p_logits, temperature), q_logits


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_lp_equals_min_cut_and_bounds_the_method(case, temperature):
    cfg = SpecConfig(**case, temperature=temperature, sparse_top=None)
    method = get_method(cfg.method)
    for seed in range(4):
        p, q_logits = _node(6, seed, temperature)
        sets = method.candidate_sets(draft_distribution(q_logits[None], None), cfg)
        assert abs(sum(w for _, w in sets) - 1.0) < 1e-12
        bound = coupling_bound(sets, p)
        assert abs(bound - min_cut_bound(sets, p.tolist())) < 1e-9
        own = method.acceptance(p, q_logits, cfg)
        assert own <= bound + 1e-9
        if cfg.method in ("topk", "chain"):  # a fixed set, or one sample: the method reaches the bound
            assert abs(own - bound) < 1e-9


def test_closed_forms():
    p, q_logits = _node(8, 3, 1.0)
    q = torch.softmax(q_logits, -1)
    chain = get_method("chain").candidate_sets(draft_distribution(q_logits[None], None),
                                               SpecConfig(method="chain", depth=1, sparse_top=None))
    assert abs(coupling_bound(chain, p) - float(torch.minimum(p, q).sum())) < 1e-9
    cfg = SpecConfig(method="rheo", k=3, m=2, sparse_top=None)  # leads + one sample, no fills
    dist = draft_distribution(q_logits[None], None)
    leads = dist.ids[0, :2].tolist()
    q_tilde = torch.zeros(8, dtype=torch.float64).scatter_(0, dist.ids[0, 2:], tempered(dist.logits[0, 2:], 1.0))
    rheo = get_method("rheo")
    bound = coupling_bound(rheo.candidate_sets(dist, cfg), p)
    assert abs(bound - ot_bound(p, q_tilde, leads)) < 1e-9
    assert abs(rheo.acceptance(p, q_logits, cfg) - bound) < 1e-9  # Theorem 3: Rheo without fills is optimal


def test_the_theory_table_of_gaps():
    from eval.report.theory_checks import ot_gap_table

    table = ot_gap_table(nodes=6).set_index(["rule", "children", "temperature"])
    assert (table["mean_gap"] >= 0).all() and (table["max_gap"] >= table["mean_gap"]).all()
    for rule, children in (("Top-K", 4), ("Chain d=1", 1), ("Rheo m=2", 3)):  # fixed set, one sample, no fills
        assert (table.xs((rule, children), level=["rule", "children"])["reaches_bound"] == 1.0).all()
    assert (table.xs("RSD (2)", level="rule")["mean_gap"] > 0).all()
