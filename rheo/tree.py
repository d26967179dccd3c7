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

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

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
    root_row:    [Vd] the root's draft logits, when a captured build returns them (rheo.captured_build)
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
    root_row: Optional[torch.Tensor] = None


def build_dynamic_tree(candidates: CandidateFn, draft_fn: DraftFn, root_token: int, cfg: "Spec",
                       rng: RandomSource, draft_to_target: Optional[torch.Tensor] = None,
                       device: torch.device | str = "cpu") -> BuiltTree:
    """The EAGLE-2/3 tree (module docstring) with the candidate rule ``candidates`` at every node."""
    long = dict(dtype=torch.long, device=device)
    # one row each: token, parent, depth, kind (LEAD / SAMPLE / FILL) of every node, root first, in a
    # buffer of the most nodes the tree can draft (written layer by layer, grown if a rule offers more)
    nodes = torch.cat([torch.tensor([[root_token, -1, 0, LEAD]], **long),
                       torch.empty(node_capacity(cfg), 4, **long)])  # [N, 4]
    grown = grow_tree(candidates, draft_fn, nodes, cfg, rng, draft_to_target, device)
    ranked, finite, exp_row_all = rank_nodes(grown, cfg)
    return prune(grown, ranked, finite, exp_row_all, cfg)


def node_capacity(cfg: "Spec") -> int:
    """Drafted nodes (root excluded) of a tree whose every layer keeps K slots at K nodes."""
    return cfg.k * (1 + (cfg.depth - 1) * cfg.k)


class Grown(NamedTuple):
    """A drafted tree before pruning (every slot a node, fixed shapes).

    nodes:     [N, 4] long, token, parent, depth, kind of every drafted node, root first
    scores:    [N] float path scores (-inf: an empty slot)
    sample_p:  [N] float, q~ of a SAMPLE node, 0 elsewhere
    exp_nodes: per layer [f] long, the expanded nodes
    exp_ids:   per layer [f, S] long, their support ids
    exp_probs: [[E, S]] float q~ of every expansion (one entry, or one per layer), or [] (Top-K)
    bad:       0-d long, the count of NaN draft rows
    root_row:  [Vd] the root's draft logits (the first layer's first row)
    """

    nodes: torch.Tensor
    scores: torch.Tensor
    sample_p: torch.Tensor
    exp_nodes: list
    exp_ids: list
    exp_probs: list
    bad: torch.Tensor
    root_row: torch.Tensor


def grow_tree(candidates: CandidateFn, draft_fn: DraftFn, nodes: torch.Tensor, cfg: "Spec", rng: RandomSource,
              draft_to_target: Optional[torch.Tensor], device: torch.device | str) -> Grown:
    """The draft loop: ``cfg.depth`` layers of draft calls and candidate rules written into ``nodes``
    ([N, 4], row 0 the root; grown if a rule offers more slots), with no host read."""
    long = dict(dtype=torch.long, device=device)
    layer_depth = torch.arange(1, cfg.depth + 1, **long)  # [depth]: a layer's depth, read as a view
    scores: Optional[torch.Tensor] = None  # [N] path scores, typed on the first layer
    sample_p: list[torch.Tensor] = []  # per layer [f*K]: q~ of a SAMPLE node, 0 elsewhere (Rheo)
    exp_nodes, exp_ids, exp_probs, first_cols = [], [], [], []
    deferred: list[Deferred] = []  # per layer, a rule that leaves q~ to after the loop (Rheo)
    frontier, end = _ROOT.to(device), 1  # [f]; nodes[:end] are drafted
    root_row = None
    for layer in range(cfg.depth):
        columns = nodes[:end].T  # [4, end] views
        logits = draft_fn(TreeView(columns[0], columns[1], columns[2], layer), frontier)  # [f, Vd]
        root_row = logits[0] if root_row is None else root_row
        dist = draft_distribution(logits, cfg.sparse_top, draft_to_target, check_nan=False)
        first_cols.append(dist.log_q[:, 0])  # NaN iff the row is (nan_rows), checked once in prune
        cand = candidates(dist, cfg, rng, layer)
        exp_nodes.append(frontier)
        exp_ids.append(dist.ids)
        if cand.deferred is not None:  # finished for every layer at once, after the loop
            deferred.append(cand.deferred)
        elif cand.resid_probs is not None:
            exp_probs.append(cand.resid_probs)
            sample_p.append(cand.slot_prob.flatten())  # [f*K]
        # Every slot becomes a node (fixed shapes, no host read): an empty slot (-inf) is a node of score
        # -inf, ranked after every drafted child and dropped by prune; its own children are -inf too.
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
    return Grown(nodes[:end], scores[:end], sample_probs, exp_nodes, exp_ids, exp_probs, bad, root_row)


def rank_nodes(grown: Grown, cfg: "Spec") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ranked [<= tree_size] the best drafted nodes by score, stable; finite: 0-d count of drafted
    (finite-score) slots; exp_row_all [N] the row of each node's expansion, -1 if not expanded)."""
    scores, nodes = grown.scores, grown.nodes
    ranked = torch.sort(scores[1:], descending=True, stable=True).indices[: cfg.tree_size] + 1
    finite = (scores[1:] > float("-inf")).sum()  # +inf is not a log score; NaN raises below
    exp_cat = torch.cat(grown.exp_nodes)  # [E]
    exp_row_all = torch.full((nodes.shape[0],), -1, dtype=torch.long, device=nodes.device)
    exp_row_all[exp_cat] = torch.arange(exp_cat.shape[0], device=nodes.device)
    return ranked, finite, exp_row_all


def select_kept(nodes: torch.Tensor, ranked: torch.Tensor, exp_row_all: torch.Tensor, finite: torch.Tensor,
                bad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The root and the ``ranked`` nodes, ancestors first: (keep [n], kept [4, n] token, parent (old
    index), depth, kind; kept_parents [n] in the kept tree; exp_row [n]; read [2 + 4n] long: the drafted
    count, the NaN count, then kept_parents, tokens, kinds and exp_row, what the host reads in one go)."""
    device = nodes.device
    keep = torch.cat([_ROOT.to(device), ranked.sort().values])  # [n]
    # one slot past the end holds -1: the root's parent index, -1, reads it
    new_index = torch.full((nodes.shape[0] + 1,), -1, dtype=torch.long, device=device)
    new_index[keep] = torch.arange(keep.shape[0], device=device)
    kept = nodes.T[:, keep]  # [4, n]: token, parent, depth, kind
    kept_parents, exp_row = new_index[kept[1]], exp_row_all[keep]  # [n], [n]
    read = torch.cat([torch.stack([finite, bad]), kept_parents, kept[0], kept[3], exp_row])
    return keep, kept, kept_parents, exp_row, read


def prune(grown: Grown, ranked: torch.Tensor, finite: torch.Tensor, exp_row_all: torch.Tensor,
          cfg: "Spec") -> BuiltTree:
    """Keep the root and the best ``tree_size`` drafted nodes (stable: ancestors first), empty slots
    (score -inf) never. The one host read of the build (of the cycle, but for verification's
    draws): the count of drafted children, the NaN flag (a NaN draft raises NonFiniteLogitsError), and
    the kept tree's parents, tokens, kinds and expansion rows (``DraftTree.host``)."""
    while True:  # twice only when fewer than tree_size slots were drafted (empty slots are not kept)
        keep, kept, kept_parents, exp_row, read_t = select_kept(grown.nodes, ranked, exp_row_all, finite, grown.bad)
        read = check_read(read_t.tolist())
        if read[0] >= ranked.shape[0]:
            break
        ranked = ranked[:read[0]]
    tree = DraftTree(tokens=kept[0], parents=kept_parents, depths=kept[2],
                     ancestor_mask=ancestor_mask(kept_parents, cfg.depth))
    resid_ids, resid_probs = residuals(grown)
    return built_tree(tree, kept[3], grown.sample_p[keep], exp_row, resid_ids, resid_probs, read)


def check_read(read: list[int]) -> list[int]:
    """The host's copy of :func:`select_kept`'s ``read``; NonFiniteLogitsError if a draft row was NaN."""
    if read[1]:
        raise NonFiniteLogitsError(DRAFT_NAN)
    return read


def residuals(grown: Grown) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(resid_ids [E, S], resid_probs [E, S]) of every expansion, or (None, None) for a rule without q~."""
    exp_probs = grown.exp_probs
    resid_ids = torch.cat(grown.exp_ids) if exp_probs else None
    resid_probs = (torch.cat(exp_probs) if len(exp_probs) > 1 else exp_probs[0]) if exp_probs else None
    return resid_ids, resid_probs


def built_tree(tree: DraftTree, kind, sample_prob, exp_row, resid_ids, resid_probs, read: list[int]) -> BuiltTree:
    """The BuiltTree of a kept set whose :func:`select_kept` read is ``read`` (its host lists)."""
    n = tree.num_nodes
    tree = dataclasses.replace(tree, host=(read[2:2 + n], read[2 + n:2 + 2 * n]))
    return BuiltTree(tree=tree, kind=kind, sample_prob=sample_prob, exp_row=exp_row, resid_ids=resid_ids,
                     resid_probs=resid_probs, drafted=read[0], host_kind=read[2 + 2 * n:2 + 3 * n],
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
