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

Options (``rheo.config.SpecConfig``), each a function of ``q`` and ``T`` only, never of
the drawn token, and each keeping the sample ranked at or above every fill (ties go to the
sample, created first) - the two conditions that keep the sample's survival independent of
its identity, which the losslessness argument needs (``docs/algorithm.md``):

* ``rank="q_T"`` - every score (leads, fills, Top-K children, and the proxy's terms) is read
  from the draft at the sampling temperature instead of ``q``; at ``T = 0`` from its limit,
  the logit gaps ``l(x) - max l`` (``T log q_T`` as ``T -> 0``), where the sample, always
  ``x_{m+1}``, gets ``x_{m+1}``'s own score.
* ``proxy="tempered"`` - ``max(r(x_{m+1}) + eps, min(r(x_m), z_T))`` with ``r`` the ranking
  distribution and ``z_T`` the non-lead mass of ``q_T``; at ``T = 1`` (and ``rank="q"``) the
  paper's proxy wherever ``min(q(x_m), z) > q(x_{m+1})``.
* ``probe_min`` - a node draws its sample only where ``z_T >= probe_min``; other nodes are
  Top-K nodes.
"""

from __future__ import annotations

import functools
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
    kind:        [n, K] long, LEAD / SAMPLE / FILL (Top-K children are LEAD; a read-only expanded view there)
    resid_probs: [n, S] float, q~ over the node's support slots (0 on leads), or None
    sample_prob: [n] float, q~(sampled token); 0 where the node has no sample
    slot_prob:   [n, K] float, sample_prob in the sample's slot, 0 in every other slot; the dynamic
                 tree builder reads it wherever resid_probs is set (None for Top-K)
    """

    tokens: torch.Tensor
    log_score: torch.Tensor
    kind: torch.Tensor
    resid_probs: Optional[torch.Tensor]
    sample_prob: torch.Tensor
    slot_prob: Optional[torch.Tensor] = None


def rank_scores(dist: DraftDist, rank: str, temperature: float) -> torch.Tensor:
    """[n, S] log score of every support slot: log q (``rank="q"``), log q_T (``"q_T"``), or at
    T = 0 the limit of ``T log q_T``: the logit gap to the node's best logit (-inf stays -inf)."""
    if rank == "q":
        return dist.log_q
    if temperature == 0:
        return dist.logits - dist.logits[:, :1]  # sorted descending: column 0 holds the max
    return torch.log_softmax(dist.logits / temperature, dim=-1)


def nonlead_mass(dist: DraftDist, m: int, temperature: float) -> torch.Tensor:
    """z_T: [n] mass of q_T (the truncated draft at the sampling temperature) outside the m leads."""
    return tempered(dist.logits, temperature)[:, m:].sum(-1)


def draws_probe(dist: DraftDist, m: int, temperature: float, probe_min: float,
                z_t: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[n] bool: the node draws a sample (a tail slot is drawable, and z_T >= probe_min; z_t: [n]
    z_T when the caller has it)."""
    has_tail = dist.logits[:, m] != float("-inf")  # [n] (sorted: any finite <=> first finite; NaN rows raise later)
    if probe_min > 0:
        has_tail = has_tail & ((nonlead_mass(dist, m, temperature) if z_t is None else z_t) >= probe_min)
    return has_tail


def select_topk(dist: DraftDist, k: int, rank: str = "q", temperature: float = 1.0) -> Candidates:
    n, support = dist.log_q.shape
    slots = min(k, support)
    return Candidates(
        tokens=dist.ids[:, :slots],
        log_score=rank_scores(dist, rank, temperature)[:, :slots],
        kind=constant(LEAD, torch.long, dist.ids.device).expand(n, slots),  # a view: nothing launched
        resid_probs=None,
        sample_prob=constant(0, dist.log_q.dtype, dist.ids.device).expand(n),
    )


@functools.lru_cache(maxsize=32)
def constant(value: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-d tensor of ``value``, made once per (dtype, device): Top-K's kinds and zero sample
    probabilities (here and in the tree builder) are expanded views of it, and it is the LEAD kind of a
    Rheo node without a sample."""
    return torch.tensor(value, dtype=dtype, device=device)


def proxy_prob(q: torch.Tensor, m: int, proxy: str, proxy_value: float, eps: float,
               z_t: Optional[torch.Tensor] = None) -> torch.Tensor:
    """q: [n, S] ranking probabilities sorted descending (z_t: [n] non-lead mass of q_T, for
    ``proxy="tempered"``) -> proxy probability of the sample, [n]."""
    if proxy == "fixed":
        return torch.full_like(q[:, 0], proxy_value)
    if m == 0:
        return (q[:, 0] + eps).clamp(max=1.0)
    if proxy == "tempered":
        floor = (q[:, m] + eps).clamp(max=1.0)  # at or above every fill
        return torch.maximum(floor, torch.minimum(q[:, m - 1], z_t))
    z = q[:, m:].sum(-1)  # [n] non-lead mass of the ranking distribution
    return torch.minimum(q[:, m - 1], z)


def log_proxy(dist: DraftDist, scores: torch.Tensor, m: int, temperature: float, proxy: str,
              proxy_value: float, eps: float, rank: str, z_t: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[n] log score of the sample slot (module docstring). scores: [n, S] from :func:`rank_scores`;
    z_t: [n] z_T when the caller has it."""
    if rank == "q_T" and temperature == 0 and proxy != "fixed":
        return scores[:, m]  # the limit: the sample is x_{m+1} and takes its score
    if proxy == "tempered" and z_t is None:
        z_t = nonlead_mass(dist, m, temperature)
    return proxy_prob(scores.exp(), m, proxy, proxy_value, eps, z_t).log()


def select_rheo(dist: DraftDist, k: int, m: int, temperature: float, rng: RandomSource,
                proxy: str = "rheo", proxy_value: float = 0.25, eps: float = 1e-6, rank: str = "q",
                probe_min: float = 0.0) -> Candidates:
    """Every node of the layer at once: one categorical draw of [n] rows (none at T = 0, where the
    residual is a one-hot), slots, scores and kinds as [n, K] tensors read from a per-(m, K, S) table
    of slot columns (:func:`slot_table`); no host read.
    ``rheo.reference.reference_select`` is the node-by-node twin."""
    n, support = dist.log_q.shape
    slots = min(k, support)
    if not 0 <= m < slots:
        raise ValueError(f"m must be in [0, {slots - 1}] for {slots} candidate slots, got m={m}")
    z_t = nonlead_mass(dist, m, temperature) if probe_min > 0 or proxy == "tempered" else None  # [n]
    has_tail = draws_probe(dist, m, temperature, probe_min, z_t)[:, None]  # [n, 1]
    by_pick, sample_col, kind_row, _ = slot_table(m, slots, support, dist.ids.device)
    scores = rank_scores(dist, rank, temperature)  # [n, S]
    zero = constant(0, dist.logits.dtype, dist.ids.device)  # cached 0-d: no fill launched
    sampled = sample_col & has_tail  # [n, K]: the slot holds a drawn sample
    if temperature == 0:
        # q~ at T = 0 is the one-hot of the tail's first slot: the sample is x_{m+1}, its slot column m,
        # every slot where a node without a sample has it (by_pick[0] == plain), and nothing is drawn
        resid_probs = torch.where(has_tail, _one_hot_row(support, m, dist.logits.dtype, dist.ids.device), zero)  # [n, S]
        tokens, slot_scores = dist.ids[:, :slots], scores[:, :slots]  # views
        sample_prob, slot_prob = resid_probs[:, m], sampled.to(resid_probs.dtype)
    else:
        resid = tempered(dist.logits[:, m:], temperature)  # [n, S-m]
        # a row without a tail draws from the one-hot of its first tail slot: one uniform, as every row,
        # and pick 0, which puts every slot where a node without a sample has it (by_pick[0] == plain)
        pick = rng.categorical(torch.where(has_tail, resid, _one_hot_row(support - m, 0, resid.dtype, resid.device)))
        # slot of column j for a draw at tail position p: j for a lead, m + p for the sample, m + r + (r >= p)
        # for the r-th fill: row p of a table made once per (m, K, S)
        slot = by_pick[pick]  # [n, K]
        tokens, slot_scores = dist.ids.gather(1, slot), scores.gather(1, slot)
        resid = torch.where(has_tail, resid, zero)  # [n, S-m], 0 on rows without a sample
        sample_prob = resid.gather(1, pick[:, None]).squeeze(1)
        resid_probs, slot_prob = torch.nn.functional.pad(resid, (m, 0)), torch.where(sampled, sample_prob[:, None], zero)
    sample_score = log_proxy(dist, scores, m, temperature, proxy, proxy_value, eps, rank, z_t)  # [n]
    log_score = torch.where(sampled, sample_score[:, None], slot_scores)  # [n, K]
    return Candidates(tokens=tokens, log_score=log_score,
                      kind=torch.where(has_tail, kind_row, constant(LEAD, torch.long, dist.ids.device)),
                      resid_probs=resid_probs, sample_prob=sample_prob, slot_prob=slot_prob)


@functools.lru_cache(maxsize=32)
def _one_hot_row(length: int, column: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[length] 1 in ``column``, 0 elsewhere: q~ over a node's support at T = 0 (made once per shape)."""
    return torch.nn.functional.one_hot(torch.tensor(column), length).to(dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def slot_table(m: int, slots: int, support: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Rheo's K slot columns for every draw, made once per (m, K, S, device): by_pick [S-m, K] (row p:
    the support column of each slot when the sample is tail position p; :func:`slot_templates`),
    sample_col [K] bool, kind_row [K] (LEAD / SAMPLE / FILL), plain [K] = j (a node without a sample)."""
    col, fill_rank, sample_col, kind_row, plain = slot_templates(m, slots, torch.device("cpu"))
    pick = torch.arange(support - m)[:, None]  # [S-m, 1]
    by_pick = col + torch.where(sample_col, pick, (fill_rank >= pick).long())  # [S-m, K]
    return tuple(t.to(device) for t in (by_pick, sample_col, kind_row, plain))


@functools.lru_cache(maxsize=64)
def slot_templates(m: int, slots: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Column templates of Rheo's K slots (leads, sample, fills), made once per (m, K, device):
    col [K] (j for a lead, m for the sample, m + r for the r-th fill), fill_rank [K] (r for the r-th
    fill, -1 elsewhere), sample_col [K] bool, kind_row [K] (LEAD / SAMPLE / FILL), plain [K] = j."""
    j = torch.arange(slots)
    fill_rank = torch.where(j > m, j - m - 1, -1)
    col = torch.where(j > m, j - 1, j)
    kind_row = torch.where(j < m, LEAD, torch.where(j == m, SAMPLE, FILL))
    return tuple(t.to(device) for t in (col, fill_rank, j == m, kind_row, j))
