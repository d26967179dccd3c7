"""Layer 1: exact behaviour on tiny vocabularies with saturated logits."""

import math

import pytest
import torch
from toys import root_to_leaf_paths, toy_pair

from rheo.candidates import FILL, LEAD, SAMPLE, select_rheo, select_topk
from rheo.decode import SpecConfig, speculative_generate
from rheo.exact import ScriptedRandom
from rheo.methods import build_tree
from rheo.models.toy import PrefixLM
from rheo.probs import draft_distribution
from rheo.random import TorchRandom
from rheo.tree import ancestor_mask

BIG = 50.0


def onehot_lm(next_token, vocab=5):
    """Saturated model: after any prefix, ``next_token(prefix)`` with probability ~1."""
    def fn(prefix):
        out = torch.full((vocab,), -BIG, dtype=torch.float64)
        out[next_token(prefix)] = BIG
        return out
    return PrefixLM(fn, vocab)


def test_full_acceptance():
    target = onehot_lm(lambda p: (p[-1] + 1) % 5)
    out = speculative_generate(target, target, [0], 8, SpecConfig(k=2, m=1, depth=3, tree_size=6),
                               torch.Generator().manual_seed(0))
    assert out.tokens == [1, 2, 3, 4, 0, 1, 2, 3]
    assert out.accept_lengths == [4, 4]


def test_zero_acceptance():
    target = onehot_lm(lambda p: 0)
    drafter = onehot_lm(lambda p: 1)
    cfg = SpecConfig(method="topk", k=1, depth=3, tree_size=3)
    out = speculative_generate(target, drafter, [2], 5, cfg, torch.Generator().manual_seed(0))
    assert out.tokens == [0] * 5 and out.accept_lengths == [1] * 5


def test_partial_acceptance_and_truncation():
    target = onehot_lm(lambda p: (p[-1] + 1) % 5)
    drafter = onehot_lm(lambda p: (p[-1] + 1) % 5 if len(p) % 2 else 0)  # right every other step
    out = speculative_generate(target, drafter, [0], 7, SpecConfig(method="topk", k=1, depth=4, tree_size=4),
                               torch.Generator().manual_seed(0))
    assert out.tokens == [1, 2, 3, 4, 0, 1, 2]
    assert sum(out.accept_lengths) == 7 and max(out.accept_lengths) >= 2


def test_eos_stops_and_is_returned():
    target = onehot_lm(lambda p: (p[-1] + 1) % 5)
    out = speculative_generate(target, target, [0], 20, SpecConfig(k=2, depth=3, tree_size=5),
                               torch.Generator().manual_seed(0), eos_token_id=3)
    assert out.tokens == [1, 2, 3]


def test_empty_draft_when_draft_mass_is_on_one_token():
    """Draft support of one token: Rheo falls back; the tree is a single chain."""
    def fn(prefix):
        out = torch.full((4,), -math.inf, dtype=torch.float64)
        out[0] = 0.0
        return out
    drafter = PrefixLM(fn, 4)
    target = onehot_lm(lambda p: 0, vocab=4)
    cfg = SpecConfig(k=3, m=1, depth=2, tree_size=10, sparse_top=None)
    built = build_tree(_draft_fn(drafter, [1]), 1, cfg,
                       TorchRandom(torch.Generator().manual_seed(0)))
    assert built.tree.tokens.tolist() == [1, 0, 0]  # one finite candidate per node, no sample
    assert (built.kind == SAMPLE).sum() == 0
    out = speculative_generate(target, drafter, [1], 6, cfg, torch.Generator().manual_seed(0))
    assert out.tokens == [0] * 6 and out.accept_lengths == [3, 3]


def _draft_fn(lm, prompt):
    sess = lm.new_session()
    sess.prefill(prompt, None)
    return sess.draft


def test_candidate_slots_rheo():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.5, 0.0, -1.0]], dtype=torch.float64)
    dist = draft_distribution(logits, None)
    q = dist.q[0]
    for pick in range(5):
        cand = select_rheo(dist, k=4, m=1, temperature=1.0, rng=ScriptedRandom([pick]))
        toks = cand.tokens[0].tolist()
        assert toks[0] == 0 and toks[1] == 1 + pick  # lead, then the sample
        assert len(set(toks)) == 4 and toks[2:] == [t for t in range(1, 6) if t != 1 + pick][:2]
        assert cand.kind[0].tolist() == [LEAD, SAMPLE, FILL, FILL]
        proxy = min(float(q[0]), float(q[1:].sum()))
        assert math.isclose(float(cand.log_score[0, 1].exp()), proxy, rel_tol=1e-12)
        q_tilde = torch.softmax(logits[0, 1:], -1)
        assert math.isclose(float(cand.sample_prob[0]), float(q_tilde[pick]), rel_tol=1e-12)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_rheo_slot_probabilities_and_residuals_hold_the_sample_alone(temperature):
    """slot_prob holds sample_prob in the sample's slot and 0 elsewhere; a node without a tail (its 4
    finite logits all leads) has neither residual nor sample; at T = 0 the residual is the one-hot of
    x_{m+1} and nothing is drawn (a scripted source with no draws left would raise)."""
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.5, 0.0, -1.0], [2.0, 1.5, 1.0, 0.0, -9, -9]], dtype=torch.float64)
    logits[1, 4:] = -torch.inf
    dist = draft_distribution(logits, None)
    cand = select_rheo(dist, k=5, m=4, temperature=temperature, rng=ScriptedRandom([] if temperature == 0 else [1, 0]))
    assert cand.kind.tolist() == [[LEAD] * 4 + [SAMPLE], [LEAD] * 5]
    want = cand.sample_prob[:, None] * (cand.kind == SAMPLE)
    assert torch.equal(cand.slot_prob, want) and cand.slot_prob[1].abs().sum() == 0
    assert cand.resid_probs[1].abs().sum() == 0 and cand.resid_probs[0, :4].abs().sum() == 0
    if temperature == 0:
        assert cand.resid_probs[0].tolist() == [0, 0, 0, 0, 1, 0] and cand.tokens[0, 4] == 4
    else:
        assert math.isclose(float(cand.resid_probs[0].sum()), 1.0, rel_tol=1e-12) and cand.tokens[0, 4] == 5


def test_m0_proxy_takes_first_slot_and_topk_slots():
    logits = torch.tensor([[1.0, 0.0, -1.0]], dtype=torch.float64)
    dist = draft_distribution(logits, None)
    cand = select_rheo(dist, k=2, m=0, temperature=1.0, rng=ScriptedRandom([2]))
    assert cand.tokens[0].tolist() == [2, 0]
    assert float(cand.log_score[0, 0]) > float(cand.log_score[0, 1])
    top = select_topk(dist, 2)
    assert top.tokens[0].tolist() == [0, 1] and (top.kind == LEAD).all()


def test_sparse_truncation_drops_tail():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    dist = draft_distribution(logits, 3)
    assert dist.ids[0].tolist() == [0, 1, 2]
    assert torch.allclose(dist.q[0], torch.softmax(logits[0, :3], -1))


def test_tree_closed_under_ancestors_and_mask():
    target, drafter, _ = toy_pair(8, salt=4)
    for method, m in [("topk", 0), ("rheo", 0), ("rheo", 1), ("rheo", 3)]:
        cfg = SpecConfig.for_method(method=method, k=4, m=m, depth=4, tree_size=9, sparse_top=None)
        built = build_tree(_draft_fn(drafter, [0, 1]), 1, cfg, TorchRandom(torch.Generator().manual_seed(1)))
        parents = built.tree.parents.tolist()
        assert built.tree.num_nodes == 10 and parents[0] == -1
        assert all(0 <= parents[i] < i for i in range(1, 10))  # closed, parents first
        depths = built.tree.depths.tolist()
        assert all(depths[i] == depths[parents[i]] + 1 for i in range(1, 10))
        mask = built.tree.ancestor_mask
        for path in root_to_leaf_paths(built.tree.parents):
            leaf = path[-1]
            assert set(torch.nonzero(mask[leaf]).flatten().tolist()) == set(path)
        for node in range(10):  # siblings carry distinct tokens
            kids = [built.tree.tokens[c].item() for c in range(10) if parents[c] == node]
            assert len(kids) == len(set(kids))


def test_ancestor_mask_small():
    mask = ancestor_mask(torch.tensor([-1, 0, 0, 1]), 3)
    assert mask.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]


def test_same_seed_same_tokens():
    target, drafter, _ = toy_pair(6, salt=9)
    cfg = SpecConfig(k=3, m=1, depth=3, tree_size=6, sparse_top=4)
    runs = [speculative_generate(target, drafter, [0], 30, cfg, torch.Generator().manual_seed(s)).tokens
            for s in (11, 11, 12)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
