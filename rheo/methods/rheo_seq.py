"""Rheo-Seq: Rheo's lead-plus-sample children on a static shape, verified sequence by sequence.

What each published verifier knows, in one rule:

* **RheoSampling** - a node's children are its ``b - 1`` most likely draft tokens (deterministic
  *leads*) plus one token *sampled* from the draft with the leads removed and renormalised
  (``q~ = q_T`` off the leads); the leads carry the draft's peak as point masses, the sample
  its spread. Checked stochastic-first: the sample, then the leads.
* **Traversal Verification** - acceptance of whole sequences from the leaves up, which on a
  chain of samples is the optimal (block) verification.
* **static shapes** - no pruning: ``branching = (b1, ..., bd)``, every node at depth i-1 gets
  b_i children (b_i = 1: the sample alone, from ``q_T``). Without pruning no node's presence
  depends on what was drawn, which the sequence-level induction needs (rheo.traversal: the drawn
  child is a fresh draw from ``q~``; the leads are point masses, exact in any number).

Verification is :func:`rheo.traversal.verify_traversal` (children in slot order: the sample,
then the leads), its path probabilities :func:`rheo.traversal.traversal_path_probs`. At T = 0 the
children are the b_i most likely draft tokens and verification is greedy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rheo.candidates import LEAD, SAMPLE, Candidates
from rheo.methods.registry import Method, register
from rheo.methods.static import MAX_STATIC_NODES, StaticShape, num_nodes
from rheo.methods.topk import check_sparse_top
from rheo.probs import DraftDist, tempered
from rheo.random import RandomSource
from rheo.traversal import traversal_path_probs, verify_traversal

if TYPE_CHECKING:
    from rheo.spec import Spec


def lead_and_sample(dist: DraftDist, b: int, temperature: float, rng: RandomSource) -> Candidates:
    """dist: [f, S] -> [f, b] children: slot 0 the sample from q~ (q_T off the b - 1 leads; kind SAMPLE,
    log_score = log q~(x), -inf where the leads hold all the mass), slots 1..b-1 the leads (kind LEAD,
    log_score = log q). resid_probs = q~ [f, S]. T = 0: the b most likely tokens, all leads."""
    n, support = dist.log_q.shape
    device = dist.ids.device
    long = dict(dtype=torch.long, device=device)
    if temperature == 0:
        slots = min(b, support)
        return Candidates(tokens=dist.ids[:, :slots], log_score=dist.log_q[:, :slots],
                          kind=torch.full((n, slots), LEAD, **long), resid_probs=None,
                          sample_prob=torch.zeros(n, dtype=dist.log_q.dtype, device=device))
    leads = min(b - 1, support)
    q_t = tempered(dist.logits, temperature)  # [f, S] sorted by q descending: the leads are the first slots
    resid = q_t.clone()
    resid[:, :leads] = 0.0
    mass = resid.sum(-1, keepdim=True)  # [f, 1]
    left = mass[:, 0] > 0
    q_tilde = torch.where(left[:, None], resid / mass.clamp(min=1e-300), 0.0)  # [f, S]
    placeholder = torch.zeros_like(q_t)
    placeholder[:, 0] = 1.0  # a drawable row where nothing is left to sample (the slot stays empty)
    pick = rng.categorical(torch.where(left[:, None], q_tilde, placeholder))  # [f]
    prob = q_tilde.gather(1, pick[:, None])[:, 0]
    sample_score = torch.where(left & (prob > 0), prob.log(), -torch.inf)  # [f]
    tokens = torch.cat([dist.ids.gather(1, pick[:, None]), dist.ids[:, :leads]], 1)  # [f, 1 + leads]
    log_score = torch.cat([sample_score[:, None], dist.log_q[:, :leads]], 1)
    kind = torch.cat([torch.full((n, 1), SAMPLE, **long), torch.full((n, leads), LEAD, **long)], 1)
    return Candidates(tokens=tokens, log_score=log_score, kind=kind, resid_probs=q_tilde,
                      sample_prob=torch.where(left, prob, 0.0))


class _Shape(StaticShape):
    def candidates(self, dist: DraftDist, cfg: "Spec", rng: RandomSource, layer: int) -> Candidates:
        return lead_and_sample(dist, self.shape(cfg)[layer], cfg.temperature, rng)


SHAPE = _Shape(shape=lambda cfg: cfg.branching)


def _validate(cfg: "Spec") -> None:
    if cfg.branching is None:
        raise ValueError("branching is required for method='rheo_seq', e.g. branching=[2, 1, 1, 1] (b - 1 leads "
                         "and one sample per node)")
    n = num_nodes(cfg.branching)
    if n > MAX_STATIC_NODES:
        raise ValueError(f"branching={list(cfg.branching)} makes a {n}-node tree, more than the {MAX_STATIC_NODES} "
                         "nodes one target call may score: choose a smaller shape")
    check_sparse_top(cfg, max(cfg.branching), "max(branching)")


register(Method(
    name="rheo_seq", display="Rheo-Seq", kind="static", candidates=SHAPE.candidates, build=SHAPE.build,
    verify=verify_traversal, fields=("branching", "sparse_top"), validate=_validate,
    max_children=lambda cfg: max(cfg.branching),
    label=lambda row: "rheo_seq (" + ",".join(str(int(b)) for b in row.branching) + ")",
    path_probs=traversal_path_probs))
