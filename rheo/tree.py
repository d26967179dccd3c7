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

from rheo.candidates import LEAD, SAMPLE, Candidates
from rheo.models.base import DraftTree, TreeView
from rheo.probs import DRAFT_NAN, DraftDist, NonFiniteLogitsError, draft_distribution, nan_rows
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
    """

    tree: DraftTree
    kind: torch.Tensor
    sample_prob: torch.Tensor
    exp_row: torch.Tensor
    resid_ids: Optional[torch.Tensor]
    resid_probs: Optional[torch.Tensor]
    drafted: int


def build_dynamic_tree(candidates: CandidateFn, draft_fn: DraftFn, root_token: int, cfg: "Spec",
                       rng: RandomSource, draft_to_target: Optional[torch.Tensor] = None,
                       device: torch.device | str = "cpu") -> BuiltTree:
    """The EAGLE-2/3 tree (module docstring) with the candidate rule ``candidates`` at every node."""
    long = dict(dtype=torch.long, device=device)
    tokens = torch.tensor([root_token], **long)  # [N]
    parents = torch.tensor([-1], **long)  # [N]
    depths = torch.zeros(1, **long)  # [N]
    kinds = torch.full((1,), LEAD, **long)  # [N]
    scores: Optional[torch.Tensor] = None  # [N], typed on the first layer
    sample_p: Optional[torch.Tensor] = None  # [N]
    exp_nodes, exp_ids, exp_probs = [], [], []
    frontier = torch.zeros(1, **long)  # [f]
    for layer in range(cfg.depth):
        logits = draft_fn(TreeView(tokens, parents, depths, layer), frontier)  # [f, Vd]
        dist = draft_distribution(logits, cfg.sparse_top, draft_to_target, check_nan=False)
        cand, support_ids = candidates(dist, cfg, rng, layer), dist.ids
        if scores is None:
            scores = torch.zeros(1, dtype=cand.log_score.dtype, device=device)
            sample_p = torch.zeros(1, dtype=cand.log_score.dtype, device=device)
        exp_nodes.append(frontier)
        exp_ids.append(support_ids)
        if cand.resid_probs is not None:
            exp_probs.append(cand.resid_probs)
        n_slots = cand.tokens.shape[1]
        valid = child_slots(cand.log_score, dist.log_q)  # [c] flat slot indices of the children
        child_score = (scores[frontier][:, None] + cand.log_score).flatten()[valid]  # [c]
        child_parent = frontier.repeat_interleave(n_slots)[valid]  # [c]
        child_kind = cand.kind.flatten()[valid]  # [c]
        child_sp = cand.sample_prob.repeat_interleave(n_slots)[valid]  # [c]
        first = tokens.shape[0]
        tokens = torch.cat([tokens, cand.tokens.flatten()[valid]])
        parents = torch.cat([parents, child_parent])
        depths = torch.cat([depths, torch.full_like(child_parent, layer + 1)])
        kinds = torch.cat([kinds, child_kind])
        scores = torch.cat([scores, child_score])
        sample_p = torch.cat([sample_p, torch.where(child_kind == SAMPLE, child_sp, 0.0)])
        if layer + 1 == cfg.depth:
            break
        best = torch.sort(child_score, descending=True, stable=True).indices[: cfg.k]  # [<=K]
        frontier = (first + best).sort().values
        if frontier.numel() == 0:
            break
    return _prune(tokens, parents, depths, kinds, scores, sample_p, exp_nodes, exp_ids, exp_probs, cfg)


def child_slots(log_score: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """log_score: [f, K] (-inf = empty slot), log_q: [f, S] -> [c] long, the flat indices of the
    non-empty slots in order. One host read per layer: the child count, with the NaN check of the
    draft rows (a NaN draft raises NonFiniteLogitsError)."""
    valid = torch.isfinite(log_score).flatten()  # [f*K]
    order = torch.sort((~valid).to(torch.uint8), stable=True).indices  # [f*K] non-empty slots first
    count, bad = torch.stack([valid.sum(), nan_rows(log_q).long()]).tolist()
    if bad:
        raise NonFiniteLogitsError(DRAFT_NAN)
    return order[:count]


def _prune(tokens, parents, depths, kinds, scores, sample_p, exp_nodes, exp_ids, exp_probs,
           cfg: "Spec") -> BuiltTree:
    """Keep the root and the best ``tree_size`` drafted nodes (stable: ancestors first)."""
    n_all = tokens.shape[0]
    device = tokens.device
    ranked = torch.sort(scores[1:], descending=True, stable=True).indices[: cfg.tree_size] + 1
    keep = torch.cat([torch.zeros(1, dtype=torch.long, device=device), ranked.sort().values])  # [n]
    new_index = torch.full((n_all,), -1, dtype=torch.long, device=device)
    new_index[keep] = torch.arange(keep.shape[0], device=device)
    kept_parents = torch.where(parents[keep] >= 0, new_index[parents[keep].clamp(min=0)], -1)  # [n]
    exp_row_all = torch.full((n_all,), -1, dtype=torch.long, device=device)
    exp_cat = torch.cat(exp_nodes)  # [E]
    exp_row_all[exp_cat] = torch.arange(exp_cat.shape[0], device=device)
    tree = DraftTree(tokens=tokens[keep], parents=kept_parents, depths=depths[keep],
                     ancestor_mask=ancestor_mask(kept_parents, cfg.depth))
    resid_ids = torch.cat(exp_ids) if exp_probs else None
    resid_probs = torch.cat(exp_probs) if exp_probs else None
    return BuiltTree(tree=tree, kind=kinds[keep], sample_prob=sample_p[keep], exp_row=exp_row_all[keep],
                     resid_ids=resid_ids, resid_probs=resid_probs, drafted=n_all - 1)


def ancestor_mask(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """parents: [n] (-1 for the root) -> [n, n] bool, [i, j] = j is i or an ancestor of i."""
    n = parents.shape[0]
    rows = torch.arange(n, device=parents.device)
    up = torch.where(parents >= 0, parents, rows)  # root points at itself
    mask = torch.zeros(n, n, dtype=torch.bool, device=parents.device)
    cur = rows
    mask[rows, cur] = True
    for _ in range(max_depth):
        cur = up[cur]
        mask[rows, cur] = True
    return mask
