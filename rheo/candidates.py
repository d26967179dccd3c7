"""Candidate selection at expanded nodes: Top-K and RheoSampling.

Slots of one expanded node, in this order (the order breaks score ties, so it is
part of the method):

* **leads** – the ``m`` highest-``q`` tokens, deterministic.
* **sample** – one token drawn from the residual ``q~ = q_T`` restricted to the
  non-lead support and renormalised. It is *ranked* with the proxy probability
  ``min(q(x_m), z)`` (``z`` = untempered non-lead mass; ``min(q(x_1)+eps, 1)`` for
  ``m = 0``) and *verified* with its true ``q~``.
* **fills** – the ``K-m-1`` highest-``q`` tokens outside the leads and the sample.

Top-K fills every slot with the top-``K`` tokens of ``q`` (all deterministic).
If the leads hold the whole truncated mass there is nothing to sample and the node
falls back to Top-K (a function of ``q`` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from rheo.probs import DraftDist, tempered
from rheo.random import RandomSource

LEAD, SAMPLE, FILL = 0, 1, 2


@dataclass(frozen=True)
class Candidates:
    """Children proposed by ``n`` expanded nodes, ``K`` slots each.

    tokens:      [n, K] long, target-vocabulary ids
    log_score:   [n, K] float, log q, or log proxy for the sample; -inf = empty slot
    kind:        [n, K] long, LEAD / SAMPLE / FILL (Top-K children are LEAD)
    resid_probs: [n, S] float, q~ over the node's support slots (0 on leads), or None
    sample_prob: [n] float, q~(sampled token); 0 where the node has no sample
    """

    tokens: torch.Tensor
    log_score: torch.Tensor
    kind: torch.Tensor
    resid_probs: Optional[torch.Tensor]
    sample_prob: torch.Tensor


def select_topk(dist: DraftDist, k: int) -> Candidates:
    n, support = dist.log_q.shape
    slots = min(k, support)
    return Candidates(
        tokens=dist.ids[:, :slots],
        log_score=dist.log_q[:, :slots],
        kind=torch.full((n, slots), LEAD, dtype=torch.long, device=dist.ids.device),
        resid_probs=None,
        sample_prob=torch.zeros(n, dtype=dist.log_q.dtype, device=dist.ids.device),
    )


def proxy_prob(q: torch.Tensor, m: int, proxy: str, proxy_value: float, eps: float) -> torch.Tensor:
    """q: [n, S] sorted descending -> proxy probability of the sample, [n]."""
    if proxy == "fixed":
        return torch.full_like(q[:, 0], proxy_value)
    if m == 0:
        return (q[:, 0] + eps).clamp(max=1.0)
    z = q[:, m:].sum(-1)  # [n] untempered non-lead mass
    return torch.minimum(q[:, m - 1], z)


def select_rheo(dist: DraftDist, k: int, m: int, temperature: float, rng: RandomSource,
                proxy: str = "rheo", proxy_value: float = 0.25, eps: float = 1e-6) -> Candidates:
    n, support = dist.log_q.shape
    slots = min(k, support)
    if not 0 <= m < slots:
        raise ValueError(f"m must be in [0, {slots - 1}] for {slots} candidate slots, got m={m}")
    device = dist.ids.device
    tail_logits = dist.logits[:, m:]  # [n, S-m]
    has_tail = torch.isfinite(tail_logits[:, 0])  # [n] (sorted: any finite <=> first finite)
    resid = tempered(tail_logits, temperature)  # [n, S-m]
    resid = torch.where(has_tail[:, None], resid, torch.ones_like(resid))  # keep rows drawable
    pick = rng.categorical(resid)  # [n] in [0, S-m)

    n_fill = slots - m - 1
    fill_rank = torch.arange(n_fill, device=device)  # [F]
    fill_slot = m + fill_rank[None, :] + (fill_rank[None, :] >= pick[:, None]).long()  # [n, F]
    lead_slot = torch.arange(m, device=device).expand(n, m)  # [n, m]
    slot = torch.cat([lead_slot, (m + pick)[:, None], fill_slot], dim=1)  # [n, K]
    slot = torch.where(has_tail[:, None], slot, torch.arange(slots, device=device)[None, :])

    log_score = dist.log_q.gather(1, slot)  # [n, K]
    log_proxy = proxy_prob(dist.q, m, proxy, proxy_value, eps).log()  # [n]
    log_score[:, m] = torch.where(has_tail, log_proxy, log_score[:, m])

    kind = torch.full((n, slots), FILL, dtype=torch.long, device=device)
    kind[:, :m] = LEAD
    kind[:, m] = SAMPLE
    kind = torch.where(has_tail[:, None], kind, torch.full_like(kind, LEAD))

    resid_probs = torch.zeros_like(dist.log_q)  # [n, S]
    resid_probs[:, m:] = resid * has_tail[:, None]
    sample_prob = resid.gather(1, pick[:, None]).squeeze(1) * has_tail  # [n]
    return Candidates(tokens=dist.ids.gather(1, slot), log_score=log_score, kind=kind,
                      resid_probs=resid_probs, sample_prob=sample_prob)

