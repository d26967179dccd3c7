"""Expected acceptance of one cycle: the probability that each kept node lies on the accepted path.

Given a cycle's pruned tree and the target's logits, the verifier's randomness is
all that is left, and the number of tokens the cycle emits (accepted drafted tokens
plus the bonus) has the exact expectation ``1 + sum over drafted nodes of
P(node accepted)``. ``P(node accepted)`` is a product down the tree: the probability
that the parent is reached times the probability that, at the parent, the verifier
accepts this child. The child-acceptance probabilities follow the verifiers
(:mod:`rheo.verify`, :mod:`rheo.methods.static`), which are the definition; at a node
with target distribution ``p`` (temperature ``T``):

* **point masses** (Top-K, and Rheo's leads and fills): the one-draw verifier draws
  ``y ~ r`` and accepts the child whose token is ``y``: child ``d`` with ``r(d)``.
* **stochastic-first** (Rheo): the sampled child first, with ``a = min(1, p(x_s) / q~(x_s))``;
  the point masses then see ``r = max(p - q~, 0) / beta``, each accepted with
  ``(1 - a) r(d)``. A sample pruned from the tree is never tried (``r = p``).
* **deterministic-first** (ablation): point masses against ``p`` first; the sample with
  ``(1 - p(D)) min(1, p'(x_s) / q~(x_s))``, ``p'`` = ``p`` off the point masses, renormalised.
* **recursive rejection** (static trees): sibling ``i`` in draw order with
  ``prod_{j<i} (1 - a_j) a_i``, ``a_i = min(1, r_i(x_i) / q_i(x_i))``, ``r_{i+1}`` the residual.
* **T = 0**: the child equal to the target's argmax, with probability 1.

The functions here are the vectorised ``path_probs`` plug-ins of :mod:`rheo.methods`
(over all expanded nodes of a tree at once); ``rheo/reference.py`` holds their plain
recursive twins. They read the target rows of the nodes that have children only
(with :class:`rheo.models.base.LazyLogits`, those rows are computed in one batch)
and draw no random numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rheo.candidates import SAMPLE
from rheo.probs import NonFiniteLogitsError, nan_cause, tempered
from rheo.tree import BuiltTree

if TYPE_CHECKING:
    from rheo.spec import Spec

F64 = torch.float64


def dynamic_path_probs(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec") -> torch.Tensor:
    """Top-K / Rheo (``verify_dynamic``): [n] float64 probability that the path holds each node."""
    if cfg.greedy:
        return greedy_path_probs(built, target_logits)
    parents, expanded, p = _expanded_rows(built, target_logits, cfg.temperature)  # [n], [E], [E, V]
    n = parents.shape[0]
    row_of = torch.full((n,), -1, dtype=torch.long)
    row_of[expanded] = torch.arange(expanded.shape[0])
    child, at = torch.arange(1, n), row_of[parents[1:]]  # [n-1] drafted nodes and their parent's row
    tokens, is_sample = built.tree.tokens.cpu()[1:], built.kind.cpu()[1:] == SAMPLE  # [n-1]
    det_child, det_at, det_tok = child[~is_sample], at[~is_sample], tokens[~is_sample]  # [d]
    s_child, s_at, s_tok = child[is_sample], at[is_sample], tokens[is_sample]  # [s] surviving samples
    q_s = built.sample_prob.cpu().to(F64)[1:][is_sample]  # [s] q~ each sample was drawn with
    total = p.sum(-1)  # [E] (a categorical draw normalises)
    cond = torch.zeros(n, dtype=F64)
    if cfg.verify_order == "deterministic_first":
        cond[det_child] = p[det_at, det_tok] / total[det_at]
        det_mask = torch.zeros_like(p, dtype=torch.bool)
        det_mask[det_at, det_tok] = True
        off = p.masked_fill(det_mask, 0.0)[s_at]  # [s, V] p off the point masses
        left = off.sum(-1)  # [s]
        a = (_gather(off, s_tok) / left.clamp(min=1e-300) / q_s).clamp(max=1.0)
        cond[s_child] = left / total[s_at] * a
        return _reach(parents, built.tree.depths.cpu(), cond)
    a = (p[s_at, s_tok] / q_s).clamp(max=1.0)  # [s]
    cond[s_child] = a
    rejected = torch.ones(expanded.shape[0], dtype=F64)
    rejected[s_at] = 1.0 - a
    num, den = p[det_at, det_tok], total[det_at].clone()  # [d] point masses verified against p / sum(p)
    if s_at.numel():  # ... or, where the node's sample survived, against max(p - q~, 0) / beta
        q_tok, beta = _residual_terms(built, expanded, s_at, p, det_at, det_tok)  # [d], [E] (-1: no sample)
        use = beta[det_at] > 0
        num = torch.where(use, (num - q_tok).clamp(min=0), num)
        den = torch.where(use, beta[det_at], den)
    cond[det_child] = rejected[det_at] * num / den
    return _reach(parents, built.tree.depths.cpu(), cond)


def _residual_terms(built: BuiltTree, expanded: torch.Tensor, s_at: torch.Tensor, p: torch.Tensor,
                    det_at: torch.Tensor, det_tok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q~ at each point mass [d] and beta = sum_v max(p_v - q~_v, 0) of every row [E] (-1 where no
    sample survived), read from q~'s sparse support instead of full-vocabulary rows.

    ``sum_v max(p_v - q_v, 0) = sum(p) - sum_v min(p_v, q_v)`` and ``q`` is zero off its support;
    where that difference is small (``< 1e-6``) it is recomputed over the whole row, so the
    subtraction never decides the sign of a vanishing residual.
    """
    rows = built.exp_row.cpu()[expanded[s_at]]  # [s]
    ids, q = built.resid_ids.cpu()[rows], built.resid_probs.cpu()[rows].to(F64)  # [s, S]
    p_rows = p[s_at]  # [s, V]
    beta_s = p_rows.sum(-1) - torch.minimum(p_rows.gather(1, ids), q).sum(-1)  # [s]
    small = beta_s < 1e-6
    if small.any():
        dense = torch.zeros(int(small.sum()), p.shape[1], dtype=F64).scatter_(1, ids[small], q[small])
        beta_s[small] = (p_rows[small] - dense).clamp(min=0).sum(-1)
    beta = torch.full((p.shape[0],), -1.0, dtype=F64)
    beta[s_at] = beta_s
    slot = torch.full((p.shape[0],), -1, dtype=torch.long)
    slot[s_at] = torch.arange(s_at.shape[0])
    j = slot[det_at].clamp(min=0)  # [d] the point mass's row among the sampled ones
    hit = ids[j] == det_tok[:, None]  # [d, S]
    q_tok = (q[j] * hit).sum(-1) * (slot[det_at] >= 0)  # [d]
    return q_tok, beta


def static_path_probs(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec") -> torch.Tensor:
    """Static trees and chains (``verify_static``, recursive rejection sampling): [n] float64."""
    if cfg.greedy:
        return greedy_path_probs(built, target_logits)
    parents, expanded, r = _expanded_rows(built, target_logits, cfg.temperature)  # [n], [E], [E, V]
    n, e = parents.shape[0], expanded.shape[0]
    kids = _child_table(parents, expanded)  # [E, B] child indices in draw order, -1 = none
    tokens = built.tree.tokens.cpu()
    q = _residual_rows(built, expanded, r.shape[1])  # [E, V] q_T of each expansion
    cond = torch.zeros(n, dtype=F64)
    alive = torch.ones(e, dtype=F64)  # every earlier sibling rejected
    rows = torch.arange(e)
    for j in range(kids.shape[1]):
        c = kids[:, j]
        has = c >= 0  # [E]
        x = tokens[c.clamp(min=0)]  # [E]
        q_j = q if cfg.replacement else q / q.sum(-1, keepdim=True).clamp(min=1e-300)
        a = (r[rows, x] / q_j[rows, x]).clamp(max=1.0)  # [E]
        cond[c[has]] = (alive * a)[has]
        alive = torch.where(has, alive * (1 - a), alive)
        left = (r - q_j).clamp(min=0)
        beta = left.sum(-1, keepdim=True)
        r = torch.where(has[:, None] & (beta > 0), left / beta.clamp(min=1e-300), r)
        if not cfg.replacement:
            q = q.clone()
            q[rows[has], x[has]] = 0.0
    return _reach(parents, built.tree.depths.cpu(), cond)


def greedy_path_probs(built: BuiltTree, target_logits: torch.Tensor) -> torch.Tensor:
    """T = 0 (``walk_greedy``): the path follows the target's argmax; [n] float64 of 0 / 1."""
    parents = built.tree.parents.cpu()
    n = parents.shape[0]
    cond = torch.zeros(n, dtype=F64)
    expanded = torch.unique(parents[1:])  # [E] sorted
    rows = target_logits[expanded]  # [E, V]
    if torch.isnan(rows).any():
        raise NonFiniteLogitsError("target model returned NaN logits")
    best = torch.zeros(n, dtype=torch.long)
    best[expanded] = rows.argmax(-1).cpu()
    cond[1:] = (built.tree.tokens.cpu()[1:] == best[parents[1:]]).to(F64)
    return _reach(parents, built.tree.depths.cpu(), cond)


# ------------------------------------------------------------------ helpers
def _expanded_rows(built: BuiltTree, target_logits: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(parents [n], the nodes with children [E] sorted, their target probabilities p [E, V] float64)."""
    parents = built.tree.parents.cpu()
    expanded = torch.unique(parents[1:])  # [E]
    p = tempered(target_logits[expanded].cpu().to(F64), temperature)  # [E, V]
    if torch.isnan(p).any():
        raise NonFiniteLogitsError(nan_cause(target_logits[expanded].cpu().to(F64), temperature))
    return parents, expanded, p


def _residual_rows(built: BuiltTree, nodes: torch.Tensor, vocab: int) -> torch.Tensor:
    """q~ (static trees: q_T) of the expansions of ``nodes`` [k] on the target vocabulary: [k, V]."""
    full = torch.zeros(nodes.shape[0], vocab, dtype=F64)
    if nodes.numel() == 0:
        return full
    exp_rows = built.exp_row.cpu()[nodes]
    return full.scatter_(1, built.resid_ids.cpu()[exp_rows], built.resid_probs.cpu()[exp_rows].to(F64))


def _child_table(parents: torch.Tensor, expanded: torch.Tensor) -> torch.Tensor:
    """[E, B] the children of each expanded node in index (draw) order, padded with -1."""
    kids = [[] for _ in range(expanded.shape[0])]
    row = {int(u): i for i, u in enumerate(expanded.tolist())}
    for c, u in enumerate(parents.tolist()[1:], start=1):
        kids[row[u]].append(c)
    width = max((len(k) for k in kids), default=0)
    return torch.tensor([k + [-1] * (width - len(k)) for k in kids], dtype=torch.long).view(len(kids), width)


def _gather(p: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """p: [k, V], tokens: [k] -> [k] p[i, tokens[i]]."""
    return p.gather(1, tokens[:, None]).squeeze(1) if tokens.numel() else p.new_zeros(0)


def _reach(parents: torch.Tensor, depths: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
    """cond: [n] acceptance of each node given its parent -> [n] probability of reaching it (root: 1)."""
    reach = torch.zeros_like(cond)
    reach[0] = 1.0
    for d in range(1, int(depths.max()) + 1):
        nodes = torch.nonzero(depths == d).flatten()
        reach[nodes] = reach[parents[nodes]] * cond[nodes]
    return reach
