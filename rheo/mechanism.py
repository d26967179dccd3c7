"""Mechanism columns of one scored tree, from its path probabilities (:mod:`rheo.expected`).

Given a kept tree, its target logits and ``reach`` ([n], the probability that the
accepted path holds each node):

* **expected_emitted** - ``reach.sum()``: accepted drafted tokens + the bonus, in expectation.
* **depth_accept** - ``[P(the accepted path reaches depth d) for d = 1..depth]`` (the nodes of
  one depth are disjoint events, so each entry is the sum of ``reach`` over that depth).
* **sampled_share** - expected sampled children on the path / expected_emitted: the
  share of emitted tokens that are sampled children.
* **probe** - for every kept node at depth d that drew a sample when expanded: does
  the sampled child survive pruning? ``probe_drawn[d]`` counts such nodes,
  ``probe_kept[d]`` those whose sample is kept (d = 0..depth-1; dynamic trees: Rheo's
  sample; static trees keep every draw).
* **calibration** - for every kept child: its draft probability under its parent
  (``q_T`` at T > 0; the untempered ``q`` at T = 0) against the target's probability of
  that token at T (at T = 0 the one-hot of the argmax: the argmax match), pooled into
  ``CALIB_BINS`` equal-width buckets of the draft probability: ``calib_n`` (children),
  ``calib_q`` and ``calib_p`` (their summed draft and target probabilities).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch

from rheo.candidates import SAMPLE
from rheo.models.base import TreeView
from rheo.probs import draft_distribution, tempered
from rheo.tree import BuiltTree, DraftFn

if TYPE_CHECKING:
    from rheo.spec import Spec

CALIB_BINS = 10


class DraftRecorder:
    """Wraps a drafter's ``draft`` callable and keeps every row it returns by token path
    (root first): the draft distribution behind each child of a tree."""

    def __init__(self, draft_fn: DraftFn, on_frontier: Optional[Callable[[list], None]] = None) -> None:
        """``on_frontier``: called with each draft call's frontier as token paths (rheo.random.PathRandom.at)."""
        self.draft_fn = draft_fn
        self.on_frontier = on_frontier
        self.rows: dict[tuple[int, ...], torch.Tensor] = {}  # token path -> draft logits [Vd]

    def __call__(self, view: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        logits = self.draft_fn(view, frontier)  # [f, Vd]
        tokens, parents = view.tokens.tolist(), view.parents.tolist()
        paths = [_token_path(tokens, parents, node) for node in frontier.tolist()]
        for path, row in zip(paths, logits):
            self.rows[path] = row
        if self.on_frontier is not None:
            self.on_frontier(paths)
        return logits


def tree_columns(built: BuiltTree, reach: torch.Tensor, depth: int) -> dict:
    """The path-probability columns (module docstring) of a tree drafted ``depth`` layers deep."""
    depths, kind = built.tree.depths.cpu(), built.kind.cpu()
    parents = built.tree.parents.cpu()
    expected = float(reach.sum())
    drafted = depths > 0
    drawn, kept = [0] * depth, [0] * depth
    if built.resid_probs is not None:
        exp_row = built.exp_row.cpu()
        mass = built.resid_probs.cpu().sum(-1)  # [E] q~ mass of each expansion (0: nothing to sample)
        sampled_parents = set(parents[(kind == SAMPLE) & drafted].tolist())
        for node in torch.nonzero(exp_row >= 0).flatten().tolist():
            d = int(depths[node])
            if d < depth and float(mass[exp_row[node]]) > 0:
                drawn[d] += 1
                kept[d] += node in sampled_parents
    return {"expected_emitted": expected, "kept_nodes": int(drafted.sum()),
            "depth_accept": [float(reach[depths == d].sum()) for d in range(1, depth + 1)],
            "sampled_share": float(reach[(kind == SAMPLE) & drafted].sum()) / expected,
            "probe_drawn": drawn, "probe_kept": kept}


def calibration_columns(built: BuiltTree, target_logits: torch.Tensor, recorder: DraftRecorder,
                        cfg: "Spec", draft_to_target: Optional[torch.Tensor]) -> dict:
    """Bucketed draft vs target probability of every kept child (module docstring)."""
    tokens, parents = built.tree.tokens.tolist(), built.tree.parents.tolist()
    n_bin, q_bin, p_bin = [0] * CALIB_BINS, [0.0] * CALIB_BINS, [0.0] * CALIB_BINS
    expanded = sorted(set(parents[1:]))
    if not expanded:
        return {"calib_n": n_bin, "calib_q": q_bin, "calib_p": p_bin}
    p_rows = tempered(target_logits[torch.tensor(expanded)].cpu().double(), cfg.temperature)  # [E, V]
    p_of = dict(zip(expanded, p_rows))
    q_of: dict[int, torch.Tensor] = {}
    for u in expanded:
        dist = draft_distribution(recorder.rows[_token_path(tokens, parents, u)][None].cpu(), cfg.sparse_top,
                                  None if draft_to_target is None else draft_to_target.cpu())
        q = dist.q[0] if cfg.greedy else tempered(dist.logits[0], cfg.temperature)  # [S]
        q_of[u] = torch.zeros(p_rows.shape[1], dtype=torch.float64).scatter_(0, dist.ids[0], q.double())
    for child in range(1, len(tokens)):
        u = parents[child]
        q, p = float(q_of[u][tokens[child]]), float(p_of[u][tokens[child]])
        b = min(int(q * CALIB_BINS), CALIB_BINS - 1)
        n_bin[b] += 1
        q_bin[b] += q
        p_bin[b] += p
    return {"calib_n": n_bin, "calib_q": q_bin, "calib_p": p_bin}


def _token_path(tokens: list[int], parents: list[int], node: int) -> tuple[int, ...]:
    path = []
    while node >= 0:
        path.append(tokens[node])
        node = parents[node]
    return tuple(path[::-1])


def root_columns(method, cfg: "Spec", recorder: DraftRecorder, root: int, target_logits: torch.Tensor,
                 draft_to_target: Optional[torch.Tensor]) -> dict:
    """At the root: the method's own single-node acceptance in closed form (``Method.acceptance``,
    every child surviving) and the optimal-transport bound of its candidate-set distribution
    (:mod:`rheo.ot`). Both None where the method has no candidate sets or too many to list (a
    static root with many draws, whose exact closed form costs as much)."""
    from rheo.ot import coupling_bound

    if method.candidate_sets is None:
        return {"root_acceptance": None, "root_ot_bound": None}
    row = recorder.rows[(root,)].cpu()  # [Vd] draft logits at the root
    d2t = None if draft_to_target is None else draft_to_target.cpu()
    full = torch.full(target_logits.shape[-1:], -torch.inf, dtype=torch.float64)  # [V] draft logits, target ids
    full[d2t if d2t is not None else torch.arange(row.shape[0])] = row.double()
    # the sets and the closed form rank the one tensor: tied logits (common in bf16) at the k-th slot
    # would otherwise be broken differently by the two rankings, and compare different candidate sets
    sets = method.candidate_sets(draft_distribution(full[None], cfg.sparse_top), cfg)
    if sets is None:
        return {"root_acceptance": None, "root_ot_bound": None}
    p = tempered(target_logits[0].cpu().double(), cfg.temperature)  # [V]
    own = None if method.acceptance is None else float(method.acceptance(p, full, cfg))
    return {"root_acceptance": own, "root_ot_bound": coupling_bound(sets, p)}
