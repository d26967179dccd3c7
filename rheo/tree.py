"""EAGLE-2/3 dynamic draft tree: layer-wise expansion, global re-ranking, masks.

Expansion: the root proposes ``K`` children; each later layer expands the ``K``
best nodes of the previous layer (by *path score* = sum of log q, or log proxy for
samples, from the root), ``depth`` layers in all. Pruning keeps the best
``tree_size`` drafted nodes. Ties are broken by creation order (a stable sort):
parents are created before children and, within a node, slots are created in
slot order (leads, sample, fills) - this is what keeps the sample's rank
independent of its identity (Lemma 1) and the kept set closed under ancestors.
Temperature never enters here except through the sample's draw.

A mechanism: :func:`build_dynamic_tree` is the tree builder of Top-K and Rheo
(:mod:`rheo.methods`), handed the method's candidate rule by its caller; static
trees have their own builder (:mod:`rheo.methods.static`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch

from rheo.candidates import LEAD, Candidates, Deferred, constant, finish_deferred
from rheo.models.base import DraftTree, TreeView
from rheo.probs import DRAFT_NAN, DraftDist, NonFiniteLogitsError, draft_distribution
from rheo.random import RandomSource

if TYPE_CHECKING:
    from rheo.spec import Spec

DraftFn = Callable[[TreeView, torch.Tensor], torch.Tensor]  # (view, frontier [f]) -> logits [f, Vd]
#: (dist [f, S], cfg, rng, layer) -> Candidates [f, slots]: a method's candidate rule
CandidateFn = Callable[[DraftDist, "Spec", RandomSource, int], Candidates]


@dataclass(frozen=True)
class BuiltTree:
    """The pruned tree plus what verification needs about each kept node.

    tree:        DraftTree with n kept nodes (root = 0)
    kind:        [n] long, LEAD / SAMPLE / FILL (root: LEAD)
    sample_prob: [n] float, probability a SAMPLE node's token was drawn with (q~ under its
                 parent's residual; q_i of its sibling rank in a static tree), 0 otherwise
    exp_row:     [n] long, row of the node's own expansion in resid_*, -1 if not expanded
    resid_ids:   [E, S] long target ids of each expansion's support, or None (Top-K)
    resid_probs: [E, S] float q~ (static trees: q_T) of each expansion, or None (Top-K)
    drafted:     number of drafted nodes before pruning (root excluded)
    host_kind:   kind as a list, when the builder read it with the tree (``tree.host``), else None
    host_exp_row: exp_row as a list, likewise
    """

    tree: DraftTree
    kind: torch.Tensor
    sample_prob: torch.Tensor
    exp_row: torch.Tensor
    resid_ids: Optional[torch.Tensor]
    resid_probs: Optional[torch.Tensor]
    drafted: int
    host_kind: Optional[list[int]] = None
    host_exp_row: Optional[list[int]] = None


def build_dynamic_tree(candidates: CandidateFn, draft_fn: DraftFn, root_token: int, cfg: "Spec",
                       rng: RandomSource, draft_to_target: Optional[torch.Tensor] = None,
                       device: torch.device | str = "cpu") -> BuiltTree:
    """The EAGLE-2/3 tree (module docstring) with the candidate rule ``candidates`` at every node."""
    long = dict(dtype=torch.long, device=device)
    # one row each: token, parent, depth, kind (LEAD / SAMPLE / FILL) of every node, root first, in a
    # buffer of the most nodes the tree can draft (written layer by layer, grown if a rule offers more)
    nodes = torch.cat([torch.tensor([[root_token, -1, 0, LEAD]], **long),
                       torch.empty(cfg.k * (1 + (cfg.depth - 1) * cfg.k), 4, **long)])  # [N, 4]
    layer_depth = torch.arange(1, cfg.depth + 1, **long)  # [depth]: a layer's depth, read as a view
    scores: Optional[torch.Tensor] = None  # [N] path scores, typed on the first layer
    sample_p: list[torch.Tensor] = []  # per layer [f*K]: q~ of a SAMPLE node, 0 elsewhere (Rheo)
    exp_nodes, exp_ids, exp_probs, first_cols = [], [], [], []
    deferred: list[Deferred] = []  # per layer, a rule that leaves q~ to after the loop (Rheo)
    frontier, end = _ROOT.to(device), 1  # [f]; nodes[:end] are drafted
    for layer in range(cfg.depth):
        columns = nodes[:end].T  # [4, end] views
        logits = draft_fn(TreeView(columns[0], columns[1], columns[2], layer), frontier)  # [f, Vd]
        dist = draft_distribution(logits, cfg.sparse_top, draft_to_target, check_nan=False)
        first_cols.append(dist.log_q[:, 0])  # NaN iff the row is (nan_rows), checked once in _prune
        cand = candidates(dist, cfg, rng, layer)
        exp_nodes.append(frontier)
        exp_ids.append(dist.ids)
        if cand.deferred is not None:  # finished for every layer at once, after the loop
            deferred.append(cand.deferred)
        elif cand.resid_probs is not None:
            exp_probs.append(cand.resid_probs)
            sample_p.append(cand.slot_prob.flatten())  # [f*K]
        # Every slot becomes a node (fixed shapes, no host read): an empty slot (-inf) is a node of score
        # -inf, ranked after every drafted child and dropped by _prune; its own children are -inf too.
        f, n_slots = cand.tokens.shape
        first, end = end, end + f * n_slots
        if scores is None:
            scores = torch.zeros(nodes.shape[0], dtype=cand.log_score.dtype, device=device)
        if end > nodes.shape[0]:  # a rule with more slots than k (host-known shapes: no read)
            nodes, scores = torch.cat([nodes, nodes.new_empty(end, 4)]), torch.cat([scores, scores.new_empty(end)])
        torch.stack([cand.tokens, frontier[:, None].expand(f, n_slots), layer_depth[layer].expand(f, n_slots),
                     cand.kind.expand(f, n_slots)], dim=-1, out=nodes[first:end].view(f, n_slots, 4))
        child_score = torch.add(scores[frontier][:, None], cand.log_score,
                                out=scores[first:end].view(f, n_slots)).flatten()  # [f*K]
        if layer + 1 == cfg.depth:
            break
        best = torch.sort(child_score, descending=True, stable=True).indices[: cfg.k]  # [<=K]
        frontier = (first + best).sort().values
    if deferred:
        if exp_probs:
            raise ValueError("a candidate rule must defer q~ at every layer or at none")
        resid, slot_prob = finish_deferred(deferred)  # [E, S], [E*K]
        exp_probs, sample_p = [resid], [slot_prob]
    sample_probs = (torch.cat([scores.new_zeros(1), *sample_p]) if sample_p
                    else constant(0, scores.dtype, scores.device).expand(end))  # [N]: a view where no node is a sample
    bad = torch.isnan(torch.cat(first_cols)).sum()
    return _prune(nodes[:end], scores[:end], sample_probs, exp_nodes, exp_ids, exp_probs, cfg, bad)


def _prune(nodes, scores, sample_p, exp_nodes, exp_ids, exp_probs, cfg: "Spec", bad: torch.Tensor) -> BuiltTree:
    """Keep the root and the best ``tree_size`` drafted nodes (stable: ancestors first), empty slots
    (score -inf) never. nodes: [N, 4] (token, parent, depth, kind); scores, sample_p: [N]; bad: 0-d
    count of NaN draft rows. The one host read of the build (of the cycle, but for verification's
    draws): the count of drafted children, the NaN flag (a NaN draft raises NonFiniteLogitsError), and
    the kept tree's parents, tokens, kinds and expansion rows (``DraftTree.host``)."""
    n_all = nodes.shape[0]
    device = nodes.device
    ranked = torch.sort(scores[1:], descending=True, stable=True).indices[: cfg.tree_size] + 1
    finite = (scores[1:] > float("-inf")).sum()  # +inf is not a log score; NaN raises below
    exp_cat = torch.cat(exp_nodes)  # [E]
    exp_row_all = torch.full((n_all,), -1, dtype=torch.long, device=device)
    exp_row_all[exp_cat] = torch.arange(exp_cat.shape[0], device=device)
    while True:  # twice only when fewer than tree_size slots were drafted (empty slots are not kept)
        keep = torch.cat([_ROOT.to(device), ranked.sort().values])  # [n]
        # one slot past the end holds -1: the root's parent index, -1, reads it
        new_index = torch.full((n_all + 1,), -1, dtype=torch.long, device=device)
        new_index[keep] = torch.arange(keep.shape[0], device=device)
        kept = nodes.T[:, keep]  # [4, n]: token, parent, depth, kind
        kept_parents, exp_row = new_index[kept[1]], exp_row_all[keep]  # [n], [n]
        read = torch.cat([torch.stack([finite, bad]), kept_parents, kept[0], kept[3], exp_row]).tolist()
        drafted, nan, n = read[0], read[1], keep.shape[0]
        if nan:
            raise NonFiniteLogitsError(DRAFT_NAN)
        if drafted >= ranked.shape[0]:
            break
        ranked = ranked[:drafted]
    host = (read[2:2 + n], read[2 + n:2 + 2 * n])
    tree = DraftTree(tokens=kept[0], parents=kept_parents, depths=kept[2],
                     ancestor_mask=ancestor_mask(kept_parents, cfg.depth), host=host)
    resid_ids = torch.cat(exp_ids) if exp_probs else None
    resid_probs = (torch.cat(exp_probs) if len(exp_probs) > 1 else exp_probs[0]) if exp_probs else None
    return BuiltTree(tree=tree, kind=kept[3], sample_prob=sample_p[keep], exp_row=exp_row,
                     resid_ids=resid_ids, resid_probs=resid_probs, drafted=drafted, host_kind=read[2 + 2 * n:2 + 3 * n],
                     host_exp_row=read[2 + 3 * n:])


#: the root's index, the first of every kept set (a CPU constant, moved once per build where needed)
_ROOT = torch.zeros(1, dtype=torch.long)


def ancestor_mask(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """parents: [n] (-1 for the root) -> [n, n] bool, [i, j] = j is i or an ancestor of i.
    Each node's chain of ``max_depth`` ancestors (the root repeats itself) is gathered level by level,
    then set in one scatter."""
    n = parents.shape[0]
    rows = torch.arange(n, device=parents.device)
    up = torch.where(parents >= 0, parents, rows)  # root points at itself
    chain = [rows]
    for _ in range(max_depth):
        chain.append(up[chain[-1]])
    return torch.zeros(n, n, dtype=torch.bool, device=parents.device).scatter_(1, torch.stack(chain, dim=1), True)
