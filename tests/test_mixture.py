"""The draft-quality dial (rheo.models.mixture), against a tiny random Llama and a random EAGLE-3
head: the target's side scored level by level equals the target scoring the whole tree at once;
a = 0 is the head, a = 1 the target itself; the decode loop with it stays lossless (greedy identity
with the target's own greedy decode; same-state rows of every method)."""

from __future__ import annotations

import pytest
import torch
from eagle3_heads import ATOL, VOCAB, drafter, tiny  # noqa: F401 (fixtures)
from toys import assert_greedy_match

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models.base import DraftTree, TreeView
from rheo.models.hf_target import HFTarget
from rheo.models.mixture import MixedDrafter, mix_label
from rheo.tree import ancestor_mask

PROMPT = [5, 17, 33, 2, 99, 140, 7]
#          node: 0   1   2   3   4   5   6   7   8
PARENTS = [-1, 0, 0, 0, 1, 2, 2, 5, 4]
DEPTHS = [0, 1, 1, 1, 2, 2, 2, 3, 3]
TOKENS = [PROMPT[-1], 11, 42, 200, 3, 64, 65, 128, 250]
LAYERS = [[0], [1, 2, 3], [4, 5, 6], [7, 8]]


def _session(tiny, drafter, mix):
    target = HFTarget(tiny)
    mixed = MixedDrafter(drafter, target, mix)
    sess = mixed.new_session()
    sess.prefill(PROMPT, target.new_session().prefill(PROMPT[:-1]))
    return target, mixed, sess


def _draft_all(sess, tree):
    got = {}
    for layer in LAYERS:
        out = sess.draft(tree, torch.tensor(layer))
        got.update({n: out[i] for i, n in enumerate(layer)})
    return got


@torch.no_grad()
def test_the_target_itself_level_by_level_equals_one_tree_call(tiny, drafter):
    target, _, sess = _session(tiny, drafter, 1.0)
    view = TreeView(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.tensor(DEPTHS))
    got = _draft_all(sess, view)
    t_sess = target.new_session()
    t_sess.prefill(PROMPT[:-1])
    parents = torch.tensor(PARENTS)
    tree = DraftTree(torch.tensor(TOKENS), parents, torch.tensor(DEPTHS), ancestor_mask(parents, 3))
    want = torch.log_softmax(t_sess.score_tree(tree).logits.materialize(), -1)  # [n, V]
    for node, row in got.items():
        assert torch.allclose(row, want[node], atol=ATOL), node


@torch.no_grad()
def test_mix_zero_is_the_head_and_a_mixture_is_convex(tiny, drafter):
    view = TreeView(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.tensor(DEPTHS))
    head = drafter.new_session()
    target = HFTarget(tiny)
    head.prefill(PROMPT, target.new_session().prefill(PROMPT[:-1]))
    _, _, s0 = _session(tiny, drafter, 0.0)
    _, _, s1 = _session(tiny, drafter, 1.0)
    _, _, sh = _session(tiny, drafter, 0.25)
    g0, g1, gh = _draft_all(s0, view), _draft_all(s1, view), _draft_all(sh, view)
    d2t = drafter.draft_to_target
    for layer in LAYERS:
        base = torch.softmax(head.draft(view, torch.tensor(layer)), -1)  # [f, Vd]
        for i, node in enumerate(layer):
            q0 = g0[node].exp()
            assert torch.allclose(q0[d2t], base[i], atol=1e-6)
            assert float(q0.sum()) == pytest.approx(1.0, abs=1e-5)
            assert torch.allclose(gh[node].exp(), 0.75 * q0 + 0.25 * g1[node].exp(), atol=1e-6)


@torch.no_grad()
def test_commit_then_draft_sees_the_committed_tokens(tiny, drafter):
    """After a commit the target's side continues the committed sequence: its root row equals a
    fresh target's distribution after prompt + accepted tokens."""
    target, _, sess = _session(tiny, drafter, 1.0)
    view = TreeView(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.tensor(DEPTHS))
    _draft_all(sess, view)
    accepted = [11, 3, 250]  # two accepted drafted tokens, then the bonus (the new root)
    full = PROMPT + accepted
    feats = target.new_session().prefill(full[:-1])
    sess.commit(torch.tensor(accepted), feats[len(PROMPT) - 1:])
    root = sess.draft(TreeView(torch.tensor([accepted[-1]]), torch.tensor([-1]), torch.tensor([0])),
                      torch.tensor([0]))[0]
    fresh = target.new_session()
    fresh.prefill(full[:-1])
    tree = DraftTree(torch.tensor([full[-1]]), torch.tensor([-1]), torch.tensor([0]), torch.ones(1, 1, dtype=torch.bool))
    want = torch.log_softmax(fresh.score_tree(tree).logits[0], -1)
    assert torch.allclose(root, want, atol=ATOL)


@pytest.mark.parametrize("mix", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("method,m", [("topk", 0), ("rheo", 1)])
def test_greedy_decode_with_the_dial_is_the_targets_greedy_decode(tiny, drafter, mix, method, m):
    target = HFTarget(tiny)
    n_new = 24
    ref = tiny.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                        max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new)[0, len(PROMPT):].tolist()
    cfg = SpecConfig.for_method(method=method, k=3, m=m, depth=3, tree_size=8, temperature=0.0, sparse_top=16)
    out = speculative_generate(target, MixedDrafter(drafter, target, mix), PROMPT, n_new, cfg,
                               torch.Generator().manual_seed(0))
    assert_greedy_match(out.tokens, ref, tiny, PROMPT)


@torch.inference_mode()
def test_the_target_itself_as_drafter_is_always_accepted_by_a_sample(tiny, drafter):
    """At a = 1 and T = 1 the drafter is the target: Rheo m = 0's sample, drawn from q = p and ranked
    first among its siblings, is accepted with probability 1 at every node, so each cycle emits its
    kept chain of samples plus the bonus for sure (an integer expectation, met by the realized
    count); with the head alone (a = 0) fewer."""
    target = HFTarget(tiny)
    cfg = SpecConfig(method="rheo", k=3, m=0, depth=3, tree_size=8, temperature=1.0, sparse_top=None)
    taus = []
    for mix in (0.0, 1.0):
        out = speculative_generate(target, MixedDrafter(drafter, target, mix), PROMPT, 40, cfg,
                                   torch.Generator().manual_seed(0), record_expected=True)
        taus.append((out.expected_accept_lengths, out.accept_lengths))
    (e0, _), (e1, got1) = taus
    for e, got in list(zip(e1, got1))[:-1]:  # the last cycle may be cut by max_new_tokens
        assert e >= 2 - 1e-4 and abs(e - round(e)) < 1e-4 and got == round(e)
    assert sum(e1) / len(e1) > sum(e0) / len(e0) + 0.5


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True, float("nan")])
def test_bad_mix_is_refused(tiny, drafter, bad):
    with pytest.raises(ValueError, match="draft_mix"):
        MixedDrafter(drafter, HFTarget(tiny), bad)


def test_labels():
    assert [mix_label(a) for a in (None, 0.0, 0.5, 1.0)] == ["head", "head", "a=0.5", "target"]
    assert VOCAB > 0


@torch.no_grad()
def test_trees_at_one_state_share_their_common_nodes(tiny, drafter):
    """A second tree at the same state (same-state evaluation drafts several) reads the nodes it
    shares with the first back and scores only its new ones; its rows equal a fresh session's."""
    _, _, sess = _session(tiny, drafter, 1.0)
    first = TreeView(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.tensor(DEPTHS))
    _draft_all(sess, first)
    scored = len(sess.slot_of)
    #          node: 0  1   2   3    4   5   6   7    8  (0, 1, 2, 4, 5, 7: the first tree's paths)
    tokens = [PROMPT[-1], 11, 42, 77, 3, 64, 90, 128, 19]
    second = TreeView(torch.tensor(tokens), torch.tensor(PARENTS), torch.tensor(DEPTHS))
    got = _draft_all(sess, second)
    assert len(sess.slot_of) == scored + 3  # new paths: 77, 42-90, 11-3-19
    _, _, fresh = _session(tiny, drafter, 1.0)
    want = _draft_all(fresh, second)
    for node in got:
        assert torch.allclose(got[node], want[node], atol=ATOL), node
