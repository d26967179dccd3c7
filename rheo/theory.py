"""Closed forms for a single expanded node whose children all survive (§4).

``alpha_topk = p(top-K of q)``;
``alpha_rheo = sum_y min(p, q~) + (1/beta) sum_y max(q~(y) - p(y), 0) * sum_{x in L u F_y} max(p(x) - q~(x), 0)``
with ``L`` the leads, ``F_y`` the fills when the sample is ``y`` and
``beta = sum_y max(p(y) - q~(y), 0)``. ``ot_bound`` is the optimal-transport bound
``p(D) + sum_{y not in D} min(p(y), q~(y))`` of a fixed deterministic set ``D``
(``q~(D) = 0``) plus one sample from ``q~``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from rheo.probs import draft_distribution, tempered


def node_acceptance(target_probs: torch.Tensor, draft_logits: torch.Tensor, method: str = "rheo",
                    k: int = 10, m: int = 1, temperature: float = 1.0,
                    sparse_top: Optional[int] = None) -> float:
    """target_probs: [V] (already tempered); draft_logits: [V] (same vocabulary).

    Probability that verification accepts one of the node's children (vs the bonus).
    """
    p = target_probs.to(torch.float64)
    if p.dim() != 1 or draft_logits.shape != p.shape:
        raise ValueError(f"need target_probs [V] and draft_logits [V], got {tuple(p.shape)} and "
                         f"{tuple(draft_logits.shape)}")
    dist = draft_distribution(draft_logits.to(torch.float64)[None], sparse_top)
    ids, logits = dist.ids[0], dist.logits[0]  # [S]
    finite = torch.isfinite(logits)  # [S]
    slots = min(k, ids.shape[0])
    if method == "topk":
        return _probability(p[ids[:slots]][finite[:slots]].sum())
    if method != "rheo":
        raise ValueError(f"method must be 'rheo' or 'topk', got {method!r}")
    if not 0 <= m < slots:
        raise ValueError(f"m must be in [0, {slots - 1}], got {m}")
    if not finite[m]:  # leads hold all the mass: deterministic fallback
        return _probability(p[ids[:slots]][finite[:slots]].sum())
    q_t = tempered(logits[m:], temperature)  # [S-m] residual q~ on the tail slots
    p_tail = p[ids[m:]]  # [S-m]
    lead_mass = float(p[ids[:m]].sum())
    excess = (p_tail - q_t).clamp(min=0) * finite[m:]  # max(p - q~, 0) on drafted-able slots
    beta = float((p - _scatter(q_t, ids[m:], p)).clamp(min=0).sum())
    direct = float(torch.minimum(p_tail, q_t).sum())
    if beta <= 0:
        return _probability(direct)
    n_fill = slots - m - 1
    head = excess[: n_fill + 1]  # fills come from the first n_fill+1 tail slots
    fill_mass = torch.full_like(q_t, float(head[:n_fill].sum()))  # sample outside the head
    in_head = torch.arange(q_t.shape[0]) < n_fill + 1
    fill_mass[in_head] = float(head.sum()) - head[in_head[: head.shape[0]]]
    overflow = (q_t - p_tail).clamp(min=0)  # [S-m]
    return _probability(direct + float((overflow * (lead_mass + fill_mass)).sum()) / beta)


def _probability(x) -> float:
    """Clamp to [0, 1]. Every quantity returned by this module (node_acceptance, ot_bound) is,
    mathematically, the probability of an event (a child accepted; an optimal coupling's
    agreement), so only float64 rounding of sums of ~V terms can take it past a bound
    (observed: 1 + 2.2e-16 on another machine); the clamp removes exactly that and nothing else.
    Intermediate sums are not clamped: an error there is a bug that the exact tests must see."""
    return min(1.0, max(0.0, float(x)))


def ot_bound(target_probs: torch.Tensor, q_tilde: torch.Tensor, det_tokens: Sequence[int]) -> float:
    """target_probs, q_tilde: [V]; det_tokens: the fixed deterministic set D (q~(D) = 0)."""
    p, q = target_probs.to(torch.float64), q_tilde.to(torch.float64)
    d = torch.zeros_like(p, dtype=torch.bool)
    d[list(det_tokens)] = True
    if float(q[d].sum()) > 1e-12:
        raise ValueError("q_tilde must put no mass on the deterministic set")
    return _probability(p[d].sum() + torch.minimum(p[~d], q[~d]).sum())  # a probability: see _probability


def _scatter(values: torch.Tensor, ids: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like).scatter_(0, ids, values.to(like.dtype))
