"""Closed forms for a single expanded node whose children all survive (§4); each method
registers its own (``Method.acceptance``: rheo.methods.topk, rheo, static).

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

from rheo.config import SpecConfig
from rheo.methods import get_method, method_names
from rheo.probs import clamp_probability


def node_acceptance(target_probs: torch.Tensor, draft_logits: torch.Tensor, method: str = "rheo",
                    k: int = 10, m: int = 1, temperature: float = 1.0,
                    sparse_top: Optional[int] = None) -> float:
    """target_probs: [V] (already tempered); draft_logits: [V] (same vocabulary).

    Probability that verification accepts one of the node's children (vs the bonus): the closed
    form ``method`` registers (``Method.acceptance``, rheo.methods), for ``k`` slots and ``m`` leads.
    """
    p = target_probs.to(torch.float64)
    if p.dim() != 1 or draft_logits.shape != p.shape:
        raise ValueError(f"need target_probs [V] and draft_logits [V], got {tuple(p.shape)} and "
                         f"{tuple(draft_logits.shape)}")
    acceptance = get_method(method).acceptance
    if acceptance is None:
        raise ValueError(f"method {method!r} registers no closed-form acceptance; methods with one: "
                         f"{[n for n in method_names() if get_method(n).acceptance is not None]}")
    cfg = SpecConfig.for_method(method=method, k=k, m=m, temperature=temperature, sparse_top=sparse_top)
    return acceptance(p, draft_logits.to(torch.float64), cfg)


def ot_bound(target_probs: torch.Tensor, q_tilde: torch.Tensor, det_tokens: Sequence[int]) -> float:
    """target_probs, q_tilde: [V]; det_tokens: the fixed deterministic set D (q~(D) = 0)."""
    p, q = target_probs.to(torch.float64), q_tilde.to(torch.float64)
    d = torch.zeros_like(p, dtype=torch.bool)
    d[list(det_tokens)] = True
    if float(q[d].sum()) > 1e-12:
        raise ValueError("q_tilde must put no mass on the deterministic set")
    return clamp_probability(p[d].sum() + torch.minimum(p[~d], q[~d]).sum())
