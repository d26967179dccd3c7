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

import dataclasses
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
    sample_prob: [n] float, q~(sampled token); 0 where the node has no sample (None when deferred)
    slot_prob:   [n, K] float, sample_prob in the sample's slot, 0 in every other slot; the dynamic
                 tree builder reads it wherever resid_probs is set (None for Top-K)
    deferred:    a Rheo layer's resid_probs and slot_prob, left for the builder to finish for every
                 layer at once (:class:`Deferred`); resid_probs, sample_prob and slot_prob are None then
    """

    tokens: torch.Tensor
    log_score: torch.Tensor
    kind: torch.Tensor
    resid_probs: Optional[torch.Tensor]
    sample_prob: Optional[torch.Tensor]
    slot_prob: Optional[torch.Tensor] = None
    deferred: Optional["Deferred"] = None


@dataclass(frozen=True)
class Deferred:
    """What nothing in the tree builder's layer loop reads of a Rheo layer: q~ and the sample's
    probability per slot, made by :func:`finish_deferred` for all layers in one go (the same values as
    ``select_rheo(..., defer=False)`` gives layer by layer, with fewer ops).

    tail:     [n, S-m] q~ on the tail slots, NaN on rows without a tail (T > 0); None at T = 0
    pick:     [n] long, the tail position drawn (T > 0); None at T = 0
    has_tail: [n, 1] bool, the node drew a sample
    """

    tail: Optional[torch.Tensor]
    pick: Optional[torch.Tensor]
    has_tail: torch.Tensor
    m: int
    slots: int
    support: int
    dtype: torch.dtype


def finish_deferred(parts: list[Deferred]) -> tuple[torch.Tensor, torch.Tensor]:
    """The layers' :class:`Deferred` parts, in order -> (resid_probs [E, S], slot_prob [E*K]) of their E
    expanded nodes, as the layers' own Candidates would hold them concatenated."""
    first = parts[0]
    m, device = first.m, first.has_tail.device
    has_tail = torch.cat([p.has_tail for p in parts]) if len(parts) > 1 else first.has_tail  # [E, 1]
    zero = constant(0, first.dtype, device)
    sample_col = slot_table(m, first.slots, first.support, device)[1]  # [K] bool
    if first.tail is None:  # T = 0: q~ is the one-hot of the first tail slot, the sample x_{m+1} (select_rheo)
        resid = torch.where(has_tail, _one_hot_row(first.support, m, first.dtype, device), zero)  # [E, S]
        slot_prob = (sample_col & has_tail).to(first.dtype)  # [E, K]
        return resid, slot_prob.flatten()
    tail = torch.where(has_tail, torch.cat([p.tail for p in parts]), zero)  # [E, S-m], 0 on rows without a sample
    pick = torch.cat([p.pick for p in parts])  # [E]
    sample_prob = tail.gather(1, pick[:, None])  # [E, 1]; 0 on rows without a sample
    slot_prob = torch.where(sample_col, sample_prob, zero)  # [E, K]
    return torch.nn.functional.pad(tail, (m, 0)), slot_prob.flatten()


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


def eager_cache(maxsize: int):
    """``functools.lru_cache(maxsize)`` for eager calls. A call that ``torch.compile`` traces runs the function
    itself, so the small tables it makes become constants of the graph: Dynamo cannot trace through an
    lru_cache wrapper (it would trace the function anyway, with a warning that it ignores the cache)."""
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args):
            return fn(*args) if torch.compiler.is_compiling() else cached(*args)
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call
    return wrap


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


@eager_cache(maxsize=32)
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
                probe_min: float = 0.0, defer: bool = False) -> Candidates:
    """Every node of the layer at once: one categorical draw of [n] rows (none at T = 0, where the
    residual is a one-hot), slots, scores and kinds as [n, K] tensors read from a per-(m, K, S) table
    of slot columns (:func:`slot_table`); no host read.
    ``defer``: leave q~ and the per-slot sample probability to :func:`finish_deferred` (the tree
    builder's path); where a row without a tail holds only empty slots past its leads, their kinds stay
    the template's (they are never kept).
    ``rheo.reference.reference_select`` is the node-by-node twin."""
    n, support = dist.log_q.shape
    slots = min(k, support)
    if not 0 <= m < slots:
        raise ValueError(f"m must be in [0, {slots - 1}] for {slots} candidate slots, got m={m}")
    z_t = nonlead_mass(dist, m, temperature) if probe_min > 0 or proxy == "tempered" else None  # [n]
    has_tail = draws_probe(dist, m, temperature, probe_min, z_t)[:, None]  # [n, 1]
    by_pick, sample_col, kind_row, _ = slot_table(m, slots, support, dist.ids.device)
    scores = rank_scores(dist, rank, temperature)  # [n, S]
    # [n, K]: the slot holds a drawn sample. With probe_min = 0 a row without a tail has only empty slots past
    # its leads, and the paper's proxy (m >= 1) scores its sample slot -inf as the slot itself: the column will do
    sampled = sample_col if defer and probe_min == 0 and proxy == "rheo" and m >= 1 else sample_col & has_tail
    kind = (kind_row.expand(n, slots) if defer and probe_min == 0
            else torch.where(has_tail, kind_row, constant(LEAD, torch.long, dist.ids.device)))
    cand = _deferred(dist, scores, has_tail, sampled, kind, by_pick, m, slots, temperature, rng,
                     (proxy, proxy_value, eps, rank, z_t))
    if defer:
        return cand
    resid_probs, slot_prob = finish_deferred([cand.deferred])
    slot_prob = slot_prob.view(n, slots)  # [n, K]
    return dataclasses.replace(cand, resid_probs=resid_probs, sample_prob=slot_prob[:, m], slot_prob=slot_prob,
                               deferred=None)


def _deferred(dist: DraftDist, scores, has_tail, sampled, kind, by_pick, m: int, slots: int, temperature: float,
              rng: RandomSource, proxy_args: tuple) -> Candidates:
    """select_rheo past its common part: the draw, tokens and scores (what the builder's loop reads); q~
    and the sample's probability go into a :class:`Deferred`."""
    n, support = dist.log_q.shape
    tail = pick = None
    if temperature == 0:
        # q~ at T = 0 is the one-hot of the tail's first slot: the sample is x_{m+1}, its slot column m,
        # every slot where a node without a sample has it (by_pick[0] == plain), and nothing is drawn
        tokens, slot_scores = dist.ids[:, :slots], scores[:, :slots]  # views
    else:
        tail = tempered(dist.logits[:, m:], temperature)  # [n, S-m]; NaN on rows without a tail
        # a row without a tail draws from the one-hot of its first tail slot: one uniform, as every row,
        # and pick 0, which puts every slot where a node without a sample has it (by_pick[0] == plain)
        pick = rng.categorical(torch.where(has_tail, tail, _one_hot_row(support - m, 0, tail.dtype, tail.device)))
        # slot of column j for a draw at tail position p: j for a lead, m + p for the sample, m + r + (r >= p)
        # for the r-th fill: row p of a table made once per (m, K, S)
        slot = by_pick[pick]  # [n, K]
        tokens, slot_scores = dist.ids.gather(1, slot), scores.gather(1, slot)
    proxy, proxy_value, eps, rank, z_t = proxy_args
    sample_score = log_proxy(dist, scores, m, temperature, proxy, proxy_value, eps, rank, z_t)  # [n]
    log_score = torch.where(sampled, sample_score[:, None], slot_scores)  # [n, K]
    return Candidates(tokens=tokens, log_score=log_score, kind=kind, resid_probs=None, sample_prob=None,
                      deferred=Deferred(tail, pick, has_tail, m, slots, support, dist.logits.dtype))


@eager_cache(maxsize=32)
def _one_hot_row(length: int, column: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[length] 1 in ``column``, 0 elsewhere: q~ over a node's support at T = 0 (made once per shape)."""
    return torch.nn.functional.one_hot(torch.tensor(column), length).to(dtype=dtype, device=device)


@eager_cache(maxsize=64)
def slot_table(m: int, slots: int, support: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Rheo's K slot columns for every draw, made once per (m, K, S, device): by_pick [S-m, K] (row p:
    the support column of each slot when the sample is tail position p; :func:`slot_templates`),
    sample_col [K] bool, kind_row [K] (LEAD / SAMPLE / FILL), plain [K] = j (a node without a sample)."""
    col, fill_rank, sample_col, kind_row, plain = slot_templates(m, slots, torch.device("cpu"))
    pick = torch.arange(support - m)[:, None]  # [S-m, 1]
    by_pick = col + torch.where(sample_col, pick, (fill_rank >= pick).long())  # [S-m, K]
    return tuple(t.to(device) for t in (by_pick, sample_col, kind_row, plain))


@eager_cache(maxsize=64)
def slot_templates(m: int, slots: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Column templates of Rheo's K slots (leads, sample, fills), made once per (m, K, device):
    col [K] (j for a lead, m for the sample, m + r for the r-th fill), fill_rank [K] (r for the r-th
    fill, -1 elsewhere), sample_col [K] bool, kind_row [K] (LEAD / SAMPLE / FILL), plain [K] = j."""
    j = torch.arange(slots)
    fill_rank = torch.where(j > m, j - m - 1, -1)
    col = torch.where(j > m, j - 1, j)
    kind_row = torch.where(j < m, LEAD, torch.where(j == m, SAMPLE, FILL))
    return tuple(t.to(device) for t in (col, fill_rank, j == m, kind_row, j))
