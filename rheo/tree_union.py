"""Several draft trees at one state scored by the target in one call.

Same-state evaluation builds one tree per compared method at each state; the trees share most
of their nodes (the draft's top candidates near the root are everybody's). A node is known by
its path of tokens from the root, and the target's output at a node depends on that path only,
so the *union* of the trees - every distinct path once - scored in one forward gives each tree
the rows it would get alone, at the cost of the distinct nodes instead of the sum of the trees.
The rows agree with separate calls up to floating-point summation order (a different number of
tree nodes in the same matrix products); on exact toy targets they are identical.
"""

from __future__ import annotations

from typing import Sequence

import torch

from rheo.models.base import DraftTree, LazyLogits
from rheo.tree import ancestor_mask

__all__ = ["union_tree", "tree_rows"]


def union_tree(trees: Sequence[DraftTree]) -> tuple[DraftTree, list[torch.Tensor]]:
    """The union of ``trees`` (same root) and, per tree, where its nodes sit in it.

    Returns ``(union, maps)``: ``union`` lists each distinct token path once, in order of first
    appearance (trees in order, each tree's nodes in order), so parents precede children;
    ``maps[t]``: [n_t] long, node ``i`` of tree ``t`` is node ``maps[t][i]`` of the union.
    """
    if not trees:
        raise ValueError("union_tree needs at least one tree")
    index: dict[tuple[int, ...], int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    paths: list[tuple[int, ...]] = []
    maps: list[torch.Tensor] = []
    for tree in trees:
        toks = tree.tokens.tolist()
        pars = tree.parents.tolist()
        own_paths: list[tuple[int, ...]] = []
        own_map: list[int] = []
        for i, (tok, par) in enumerate(zip(toks, pars)):
            path = (tok,) if par < 0 else own_paths[par] + (tok,)
            own_paths.append(path)
            at = index.get(path)
            if at is None:
                if par < 0 and tokens:
                    raise ValueError(f"trees have different roots: {paths[0]} and {path}")
                at = index[path] = len(tokens)
                tokens.append(tok)
                parents.append(-1 if par < 0 else index[own_paths[par]])
                paths.append(path)
            own_map.append(at)
        maps.append(torch.tensor(own_map, dtype=torch.long))
    device = trees[0].tokens.device
    parent_t = torch.tensor(parents, dtype=torch.long, device=device)  # [n]
    depths = torch.tensor([len(p) - 1 for p in paths], dtype=torch.long, device=device)  # [n]
    union = DraftTree(tokens=torch.tensor(tokens, dtype=torch.long, device=device), parents=parent_t, depths=depths,
                      ancestor_mask=ancestor_mask(parent_t, int(depths.max())))
    return union, maps


def tree_rows(logits, node_map: torch.Tensor):
    """One tree's rows of the union's logits: a tensor [n_t, V] for a tensor, else a LazyLogits view
    whose rows are made (once, in the union) when read."""
    node_map = node_map.to("cpu", torch.long)
    if isinstance(logits, torch.Tensor):
        return logits[node_map.to(logits.device)]

    def compute(idx: torch.Tensor) -> torch.Tensor:  # idx [k] long -> [k, V]
        return logits[node_map[idx.to("cpu")]]

    return LazyLogits(int(node_map.numel()), int(logits.shape[1]), compute, logits.device)
