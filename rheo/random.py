"""Randomness as an input.

Every random decision of the decoder goes through a :class:`RandomSource` with two
primitives, so that tests can replace the source: :class:`TorchRandom` draws from a
``torch.Generator`` (production), and :mod:`rheo.exact` branches over every
outcome to compute output distributions exactly.
"""

from __future__ import annotations

from typing import Optional, Protocol

import torch


class RandomSource(Protocol):
    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        """probs: [n, V] non-negative, rows with positive sum (need not be normalised).
        Returns [n] long, row i drawn with probability probs[i] / probs[i].sum()."""

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:
        """probs: [n] in [0, 1]. Returns [n] bool, True with probability probs[i]."""


def check_generator(generator: object) -> Optional[torch.Generator]:
    """``generator`` if it is None or a ``torch.Generator``; TypeError otherwise (a seed such as 42 or a
    numpy Generator is refused even at T = 0, where nothing is drawn)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__} "
                        f"{generator!r:.60}: use torch.Generator().manual_seed(seed)")
    return generator


class TorchRandom:
    """Inverse-CDF sampling from uniforms drawn on ``generator``'s device.

    Without a generator it draws from torch's default CPU generator, so ``torch.manual_seed``
    seeds it (as in ``transformers``); a ``torch.Generator()`` of its own would repeat one seed."""

    def __init__(self, generator: Optional[torch.Generator] = None) -> None:
        self.generator = check_generator(generator) if generator is not None else torch.default_generator

    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        u = torch.rand(n, generator=self.generator, dtype=torch.float64, device=self.generator.device)
        return u.to(device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        n, vocab = probs.shape
        cdf = probs.to(torch.float64).cumsum(-1)  # [n, V]
        u = self._uniform(n, probs.device) * cdf[:, -1]  # [n]
        idx = torch.searchsorted(cdf, u[:, None], right=True).squeeze(-1)  # [n]
        return idx.clamp_(max=vocab - 1)

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:
        return self._uniform(probs.shape[0], probs.device) < probs.to(torch.float64)
