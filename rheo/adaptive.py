"""Adaptive Rheo: per request, choose each cycle's setting from the roots of the request's earlier cycles.

Two rules, ``adapt="root"`` (rheo_adaptive) and ``adapt="level"`` (rheo_level), read the same evidence.

Rheo m=1 and Rheo m=0 build nearly the same tree at a node; they differ in which child is ranked
first, and so which one gets the deep subtree below it:

* m >= 1 ranks the draft's top token ``x1`` first (a lead). The verifier ends up accepting the
  child ``x1`` with probability ``b = p_T(x1)`` (the output token is distributed as ``p_T``, and a
  rejected deterministic child leaves no mass on its token).
* m = 0 ranks the sampled child first. It is drawn from ``q_T`` and checked first, so it is accepted
  with probability ``a = sum_x min(p_T(x), q_T(x))`` (one minus the total variation distance).

After a target call both are known exactly at the cycle's root (its target row is scored with the
tree, its draft row was drafted before it), with no extra model call. The rule keeps the running
sum of ``a - b`` over the roots of the request's earlier cycles and drafts the next cycle with
Rheo m=0 (the paper's proxy) while that sum is positive, else with the configured setting
(``m``, ``proxy``, ``rank`` as given; rheo_adaptive's is m=1 with the tempered proxy). A weak
drafter has ``a < b`` (its sample is often rejected where its top token is right); a drafter
close to the target has ``a`` near 1. At ``T = 0`` both are the argmax match, the sum stays 0 and
the configured setting (Top-K's tree, for the tempered proxy) is used.

``adapt="level"`` drafts the next cycle with Rheo m=0 while the mean of ``a`` over the request's
observed roots is at least :data:`LEVEL`, else with the configured setting (the first cycle, with no
root observed, too). It asks how good the drafter is rather than which child wins at the root: the
head-reading study found ``a - b`` positive at most roots even for a weak head, where the tree as a
whole gains more from rheo_auto's leads. :data:`LEVEL` is halfway between what this project's trained
head and the target itself read on held-out prompts of the self-instructed draft corpus (0.37 and
1.00 at T = 0.7, 0.34 and 0.92 at T = 1): a number read off no benchmark prompt. At ``T = 0``, ``a``
is the argmax match and both arms build Top-K's tree.

The mean of ``a`` over a request's roots (``CyclePolicy.accepts``; ``GenerationOutput.root_accept``) is
the acceptance rate of a token sampled from the draft: it reads where a drafter sits between a weak
head and the target, which the share of m=0 cycles does not (``docs/algorithm.md``).

Lossless: the setting of a cycle is a function of rows scored in earlier cycles only, never of a
token drawn in the cycle; given that history, the cycle is an ordinary lossless Rheo cycle, so
every emitted token has the target's conditional distribution (``docs/algorithm.md``). Cost: one
host read per cycle (the evidence), and two reductions over the root's ``S`` support slots.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

from rheo.models.base import TreeView
from rheo.probs import draft_distribution, prob_dtype, tempered

if TYPE_CHECKING:
    from rheo.spec import Spec
    from rheo.tree import DraftFn

#: the rules of ``SpecConfig.adapt`` other than "none"
ADAPT_RULES = ("root", "level")
#: adapt="level": Rheo m=0 from this mean root acceptance of a sampled child up (module docstring)
LEVEL = 0.65


def root_terms(root_draft_logits: torch.Tensor, root_target_logits: torch.Tensor, cfg: "Spec",
               draft_to_target: Optional[torch.Tensor] = None) -> torch.Tensor:
    """root_draft_logits: [Vd], root_target_logits: [V] (untempered) -> [2]: ``a - b`` and ``a`` (module
    docstring) on the truncated draft support, at ``cfg.temperature``; float64 for float64 input."""
    # no NaN checks here (each a host read): the tree builder checks the draft row and the verifier the
    # target row, in the same cycle
    dist = draft_distribution(root_draft_logits[None], cfg.sparse_top, draft_to_target, check_nan=False)  # [1, S]
    q_t = tempered(dist.logits[0], cfg.temperature)  # [S]
    p_t = tempered(root_target_logits.to(prob_dtype(root_target_logits)), cfg.temperature)  # [V], as target_probs
    p_support = p_t[dist.ids[0]].to(q_t.dtype)  # [S]
    a = torch.minimum(p_support, q_t).sum()
    return torch.stack([a - p_support[0], a])


def root_evidence(root_draft_logits: torch.Tensor, root_target_logits: torch.Tensor, cfg: "Spec",
                  draft_to_target: Optional[torch.Tensor] = None) -> torch.Tensor:
    """0-d ``a - b`` of :func:`root_terms`."""
    return root_terms(root_draft_logits, root_target_logits, cfg, draft_to_target)[0]


class CyclePolicy:
    """The setting of each cycle of one request under ``adapt="root"`` or ``"level"``.

    ``config()`` is the cycle's concrete configuration (``adapt="none"``); ``observe`` takes the
    cycle's root rows once the target has scored its tree."""

    def __init__(self, cfg: "Spec") -> None:
        if cfg.adapt not in ADAPT_RULES:
            raise ValueError(f"CyclePolicy needs adapt in {ADAPT_RULES}, got {cfg.adapt!r}")
        self.rule = cfg.adapt
        self.configured = dataclasses.replace(cfg, adapt="none")
        self.alternative = dataclasses.replace(cfg, adapt="none", m=0, proxy="rheo")
        self.margin = 0.0  # running sum of a - b over the observed roots
        self.chosen: list[int] = []  # m of every cycle drafted so far
        self.accepts: list[float] = []  # a of every observed root: the sampled child's acceptance there

    def config(self) -> "Spec":
        if self.rule == "root":
            pick_m0 = self.margin > 0
        else:
            pick_m0 = bool(self.accepts) and sum(self.accepts) / len(self.accepts) >= LEVEL
        cfg = self.alternative if pick_m0 else self.configured
        self.chosen.append(cfg.m)
        return cfg

    def observe(self, root_draft_logits: torch.Tensor, root_target_logits: torch.Tensor,
                draft_to_target: Optional[torch.Tensor] = None) -> None:
        """root_draft_logits: [Vd] (the cycle's first draft row), root_target_logits: [V] (the
        scored tree's row 0)."""
        evidence, accept = root_terms(root_draft_logits, root_target_logits, self.configured, draft_to_target).tolist()
        self.margin += evidence
        self.accepts.append(accept)

    @property
    def observed(self) -> int:
        """Roots observed so far."""
        return len(self.accepts)


def cycle_policy(cfg: "Spec") -> Optional[CyclePolicy]:
    """A fresh policy for one request, or None for a configuration without ``adapt``."""
    return CyclePolicy(cfg) if getattr(cfg, "adapt", "none") in ADAPT_RULES else None


class RootRow:
    """Wraps a drafter's ``draft`` callable for one cycle and keeps the root's row: the first row
    of the first call (the root is the first layer's only frontier node)."""

    def __init__(self, draft_fn: "DraftFn") -> None:
        self.draft_fn = draft_fn
        self.row: Optional[torch.Tensor] = None  # [Vd]

    def __call__(self, view: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        logits = self.draft_fn(view, frontier)  # [f, Vd]
        if self.row is None:
            self.row = logits[0]
        return logits
