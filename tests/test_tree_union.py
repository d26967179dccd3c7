"""Scoring several trees as their union (rheo.tree_union): the union holds every distinct token
path once with its ancestors, each tree's rows come back where they were, the tiny random Llama
gives each tree the rows of a separate call (to float tolerance), and same-state columns on the
exact toy pair are those of one call per tree."""

from __future__ import annotations

import pytest
import torch

from rheo.models.base import DraftTree
from rheo.tree import ancestor_mask
from rheo.tree_union import tree_rows, union_tree


def _tree(tokens, parents):
    parents = torch.tensor(parents)
    depths = torch.zeros(len(tokens), dtype=torch.long)
    for i in range(1, len(tokens)):
        depths[i] = depths[parents[i]] + 1
    return DraftTree(tokens=torch.tensor(tokens), parents=parents, depths=depths,
                     ancestor_mask=ancestor_mask(parents, int(depths.max())))


def _paths(tree):
    toks, pars = tree.tokens.tolist(), tree.parents.tolist()
    out = []
    for t, p in zip(toks, pars):
        out.append((t,) if p < 0 else out[p] + (t,))
    return out


A = _tree([5, 6, 7, 8, 9], [-1, 0, 0, 1, 1])
B = _tree([5, 7, 6, 3, 8], [-1, 0, 0, 1, 2])  # shares 5, 5-6, 5-7, 5-6-8; adds 5-7-3
C = _tree([5, 6, 6], [-1, 0, 1])              # a token repeated along one path


def test_union_lists_each_path_once_and_maps_every_node():
    union, maps = union_tree([A, B, C])
    upaths = _paths(union)
    assert len(set(upaths)) == len(upaths) == union.num_nodes == 7
    for tree, node_map in zip([A, B, C], maps):
        assert [upaths[j] for j in node_map.tolist()] == _paths(tree)
    assert torch.equal(union.ancestor_mask, ancestor_mask(union.parents, int(union.depths.max())))
    assert bool((union.parents[1:] < torch.arange(1, union.num_nodes)).all())  # parents precede children


def test_union_of_one_tree_is_the_tree_and_roots_must_agree():
    union, (node_map,) = union_tree([A])
    assert torch.equal(union.tokens, A.tokens) and torch.equal(node_map, torch.arange(A.num_nodes))
    with pytest.raises(ValueError, match="different roots"):
        union_tree([A, _tree([4, 6], [-1, 0])])
    with pytest.raises(ValueError, match="at least one tree"):
        union_tree([])


def test_tiny_llama_union_rows_match_separate_calls():
    from eval.measure.pairs import make_tiny_pair

    pair = make_tiny_pair()
    sess = pair.target.new_session()
    sess.prefill([1, 2, 3])
    alone = []
    for tree in (A, B, C):
        alone.append(sess.score_tree(tree).logits.materialize())  # [n_t, V]
        sess.discard()
    union, maps = union_tree([A, B, C])
    logits = sess.score_tree(union).logits
    for want, node_map in zip(alone, maps):
        got = tree_rows(logits, node_map)
        assert got.shape == want.shape
        torch.testing.assert_close(got[:], want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got[2], want[2], atol=1e-4, rtol=1e-4)
    sess.discard()
    assert sess.cache.get_seq_length() == 3


def test_same_state_columns_equal_one_call_per_tree_on_the_toy_pair():
    """The toy target's rows depend on the token path only: union scoring changes no value."""
    from toys import toy_pair

    from rheo.config import SpecConfig
    from rheo.same_state import same_state_generate

    target, drafter, _ = toy_pair(8, salt=2)
    compared = [SpecConfig(method="topk", k=3, depth=3, tree_size=6, sparse_top=None, temperature=0.7),
                SpecConfig(method="rheo", k=3, m=1, depth=3, tree_size=6, sparse_top=None, temperature=0.7)]
    together = same_state_generate(target, drafter, [1, 2], 12, compared[0], compared,
                                   torch.Generator().manual_seed(1), key="u")
    for i, cfg in enumerate(compared):
        one = same_state_generate(target, drafter, [1, 2], 12, compared[0], [cfg],
                                  torch.Generator().manual_seed(1), key="u")
        assert [t.columns for t in together.trees if t.method == i] == [t.columns for t in one.trees]
