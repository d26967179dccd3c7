"""Draft and target distributions.

* ``q``   – draft distribution: top-``sparse_top`` draft logits, rest -inf, softmax,
  *no* temperature. Used to rank candidates (tree construction).
* ``q_T`` – the same truncated logits with temperature ``T``: what samples are drawn
  from and what verification compares against (``q~`` once leads are removed).
* ``p``   – target distribution with temperature ``T`` (never truncated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


class NonFiniteLogitsError(ValueError):
    """A model returned NaN logits (or a row with no finite logit)."""


def prob_dtype(logits: torch.Tensor) -> torch.dtype:
    """float64 stays float64 (exact tests); everything else is computed in float32."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class DraftDist:
    """Truncated draft distribution of ``n`` expanded nodes, sorted by ``q`` descending.

    ids:    [n, S] long, target-vocabulary ids of the S support slots
    logits: [n, S] float, the raw (truncated) draft logits, -inf outside the support
    log_q:  [n, S] float, log q (untempered), -inf outside the support
    """

    ids: torch.Tensor
    logits: torch.Tensor
    log_q: torch.Tensor

    @property
    def q(self) -> torch.Tensor:
        return self.log_q.exp()


def draft_distribution(draft_logits: torch.Tensor, sparse_top: Optional[int],
                       draft_to_target: Optional[torch.Tensor] = None, check_nan: bool = True) -> DraftDist:
    """draft_logits: [n, Vd] -> DraftDist with S = min(sparse_top, Vd) slots.

    ``check_nan=False`` leaves the NaN check (a host read) to the caller: :func:`nan_rows` is the flag
    it reads (the tree builder reads it together with the layer's child count)."""
    if draft_logits.dim() != 2:
        raise ValueError(f"draft logits must be [n, vocab], got shape {tuple(draft_logits.shape)}")
    logits = draft_logits.to(prob_dtype(draft_logits))
    vocab = logits.shape[-1]
    support = vocab if sparse_top is None else min(sparse_top, vocab)
    if support == vocab:
        values, ids = torch.sort(logits, dim=-1, descending=True, stable=True)  # [n, S]
    else:
        values, ids = torch.topk(logits, support, dim=-1, sorted=True)  # [n, S]
    log_q = torch.log_softmax(values, dim=-1)  # [n, S]
    if check_nan and nan_rows(log_q):
        raise NonFiniteLogitsError(DRAFT_NAN)
    if draft_to_target is not None:
        ids = draft_to_target[ids]
    return DraftDist(ids=ids, logits=values, log_q=log_q)


DRAFT_NAN = "draft model returned NaN logits (or a row without a finite logit)"


def nan_rows(log_q: torch.Tensor) -> torch.Tensor:
    """log_q: [n, S] -> 0-d bool, whether a row is NaN (one NaN logit - topk ranks NaN first - or an
    all -inf row makes the whole row NaN)."""
    return torch.isnan(log_q[:, 0]).any()


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits: [..., V] (may hold -inf) -> probabilities [..., V] at ``temperature``.
    T = 0 gives the one-hot of the first argmax."""
    if temperature == 0:
        out = torch.zeros_like(logits)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(logits if temperature == 1 else logits / temperature, dim=-1)  # x / 1 == x: one op fewer


def target_probs(target_logits: torch.Tensor, temperature: float, check: bool = True) -> torch.Tensor:
    """target_logits: [V] -> p: [V] at ``temperature`` (float32, or float64 if given). ``check=False``
    (T > 0 only) leaves the NaN check to the caller, who reads ``isnan(p[0])`` with its own draw and
    raises with :func:`raise_nan` (one host read instead of two)."""
    logits = target_logits.to(prob_dtype(target_logits))
    probs = tempered(logits, temperature)
    # softmax turns one NaN logit (or an all -inf row) into an all-NaN row
    if (check or temperature == 0) and (torch.isnan(probs[0]) or (temperature == 0 and torch.isnan(logits).any())):
        raise_nan(target_logits, temperature)
    return probs


def raise_nan(target_logits: torch.Tensor, temperature: float) -> None:
    """Raise the NonFiniteLogitsError of NaN target probabilities made from ``target_logits`` [V]."""
    raise NonFiniteLogitsError(nan_cause(target_logits.to(prob_dtype(target_logits)), temperature))


def nan_cause(logits: torch.Tensor, temperature: float) -> str:
    """Why tempered target probabilities came out NaN: the model's logits, or (logits finite) a
    temperature so small that logits / T overflows the probability dtype."""
    if temperature > 0 and not torch.isnan(logits).any() and torch.isfinite(logits).any(-1).all():
        return (f"temperature {temperature:g} is too small for {logits.dtype}: the target's logits hold no NaN but "
                f"logits / T overflows; use temperature=0 for greedy decoding, or a temperature >= 1e-6")
    return "target model returned NaN logits (or no finite logit)"


def clamp_probability(x) -> float:
    """Clamp to [0, 1]. Every closed form of the project (a child accepted, an optimal coupling's
    agreement) is, mathematically, the probability of an event, so only float64 rounding of sums
    of ~V terms can take it past a bound (observed: 1 + 2.2e-16 on another machine); the clamp
    removes exactly that and nothing else. Intermediate sums are not clamped: an error there is a
    bug that the exact tests must see."""
    return min(1.0, max(0.0, float(x)))
