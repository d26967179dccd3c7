"""The static sessions compile whole: ``torch.compile(fullgraph=True, dynamic=False)`` of the target's
scoring call (one token and a tree), its commit, the head's draft step and its draft extend makes no
graph break, and no new graph over 20 calls at growing cache lengths and every tree depth (Dynamo's
own counters; backend "eager", so the counts do not depend on Inductor)."""

from __future__ import annotations

import pytest
import torch
from static_pair import eager_compiler, eagle_pair, fresh_dynamo, graph_counts

from rheo.models.base import DraftTree, TreeView
from rheo.models.static_eagle3 import MAX_DEPTH, StaticEagle3Drafter
from rheo.models.static_target import StaticHFTarget
from rheo.tree import ancestor_mask


@pytest.fixture(autouse=True)
def _fresh():
    fresh_dynamo()
    yield
    fresh_dynamo()


def _tree(n: int, g: torch.Generator, vocab: int) -> DraftTree:
    """A random tree of n nodes (parents precede children) with its host lists."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    depths = [0] * n
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
    tokens = torch.randint(0, vocab, (n,), generator=g)
    p = torch.tensor(parents)
    return DraftTree(tokens=tokens, parents=p, depths=torch.tensor(depths), ancestor_mask=ancestor_mask(p, n),
                     host=(parents, tokens.tolist()))


def _deepest_path(tree: DraftTree) -> list[int]:
    parents = tree.host_lists()[0]
    node, path = len(parents) - 1, []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@pytest.mark.parametrize("n", [1, 7])
def test_the_target_scoring_and_commit_make_one_graph_for_every_cache_length(n):
    target, _ = eagle_pair()
    static = StaticHFTarget(target, eager_compiler, min_capacity=128)
    session = static.new_session()
    session.prefill(list(range(5)))
    g = torch.Generator().manual_seed(n)
    seen = []
    for call in range(21):
        tree = _tree(n, g, target.vocab_size)
        session.score_tree(tree).logits[0]
        path = _deepest_path(tree)  # not 0, 1, 2, ..: the commit moves rows
        assert n == 1 or path != list(range(len(path)))
        session.commit(path)
        seen.append(graph_counts())
    assert session.past_len >= 5 + 21 and session.capacity == 128  # 21 lengths, one cache bucket
    assert seen[-1][1] == 0  # no graph break
    assert seen[0][0] == seen[-1][0] == (1 if n == 1 else 2)  # scoring (and the commit of a tree) once


def test_the_head_step_and_extend_make_one_graph_for_every_depth_and_length():
    target, drafter = eagle_pair()
    static = StaticEagle3Drafter(drafter, eager_compiler, min_capacity=128)
    session = static.new_session()
    feats = torch.randn(5, 3 * target.hidden_size)
    session.prefill(list(range(6)), feats)
    g = torch.Generator().manual_seed(0)
    f, depth = 3, MAX_DEPTH  # the paper's depth: steps at depths 1 .. 7
    counts = []
    for cycle in range(20):
        tokens, parents, depths = [int(torch.randint(0, drafter.vocab_size, (1,), generator=g))], [-1], [0]
        frontier = torch.tensor([0])
        for layer in range(depth):
            view = TreeView(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths), layer)
            logits = session.draft(view, frontier)
            assert logits.shape == (frontier.numel(), drafter.vocab_size) and torch.isfinite(logits).all()
            first = len(tokens)
            children = [int(frontier[i % frontier.numel()]) for i in range(f)]
            tokens += logits.argmax(-1).tolist()[:1] * f
            parents += children
            depths += [layer + 1] * f
            frontier = torch.arange(first, first + f)
        accepted = 1 + cycle % (depth + 1)  # 1 .. depth+1 tokens committed
        tokens = torch.randint(0, drafter.vocab_size, (accepted,), generator=g)
        session.commit(tokens, torch.randn(accepted, 3 * target.hidden_size))
        counts.append(graph_counts())
    assert session.committed == 5 + sum(1 + c % (depth + 1) for c in range(20))
    assert counts[-1][1] == 0  # no graph break
    assert counts[0][0] == 2 and counts[-1][0] == 2  # the step (every depth, every length) and the extend
