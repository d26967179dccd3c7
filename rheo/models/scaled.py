"""A tempered drafter: the same head, its logits divided by a draft temperature.

At every drafted node the scaled drafter proposes from

    q_tau(v) ∝ exp(l(v) / tau)

where ``l`` [Vd] are the base drafter's logits and ``tau`` (``draft_temp``) > 0. ``tau = 1`` is
the head as trained; ``tau > 1`` spreads its mass (an over-confident head), ``tau < 1`` sharpens
it. The ranking of tokens at a node is unchanged; what changes is how much mass the drafter gives
each one, so a method that ranks by the draft's probabilities or samples from them builds
another tree. Only the drafter changes: every lossless method stays lossless with it (the
verifier corrects for whatever ``q`` the drafter proposed from).

``scripts/calibrate_head.py`` fits one ``tau`` for a head on held-out prompts
(docs/draft-head.md).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from rheo.models.base import DraftModel, TreeView

__all__ = ["ScaledDrafter", "ScaledSession", "check_draft_temp"]


def check_draft_temp(draft_temp) -> float:
    """``draft_temp`` as a float; ValueError unless it is a finite number > 0."""
    ok = (isinstance(draft_temp, (int, float)) and not isinstance(draft_temp, bool)
          and math.isfinite(draft_temp) and draft_temp > 0)
    if not ok:
        raise ValueError(f"draft_temp must be a finite number > 0 (1: the head as trained), got {draft_temp!r}")
    return float(draft_temp)


class ScaledDrafter:
    """DraftModel: ``base``'s logits divided by ``draft_temp`` (module docstring).

    base:       a DraftModel; its vocabulary and ``draft_to_target`` map are kept
    draft_temp: tau > 0
    """

    def __init__(self, base: DraftModel, draft_temp: float) -> None:
        self.base, self.draft_temp = base, check_draft_temp(draft_temp)
        self.vocab_size: int = int(base.vocab_size)
        self.draft_to_target: Optional[torch.Tensor] = base.draft_to_target
        self.device = getattr(base, "device", None)

    def new_session(self) -> "ScaledSession":
        return ScaledSession(self)


class ScaledSession:
    """One sequence: the base drafter's session, its draft logits tempered."""

    def __init__(self, drafter: ScaledDrafter) -> None:
        self.d = drafter
        self.base = drafter.base.new_session()

    def prefill(self, prompt_ids: Sequence[int], features: Optional[torch.Tensor]) -> None:
        """prompt_ids: [len] (root last); features: [len-1, F] or None: passed to the base session."""
        self.base.prefill(prompt_ids, features)

    def commit(self, tokens: torch.Tensor, features: Optional[torch.Tensor]) -> None:
        """tokens: [a+1] accepted tokens then the bonus; features: [a+1, F] or None."""
        self.base.commit(tokens, features)

    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] node indices at one depth. Returns l / tau [f, Vd] (the base's dtype; -inf stays -inf)."""
        base_logits = self.base.draft(tree, frontier)  # [f, Vd]
        if self.d.draft_temp == 1.0:
            return base_logits
        return base_logits / self.d.draft_temp
