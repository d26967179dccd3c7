"""Randomness as an input.

Every random decision of the decoder goes through a :class:`RandomSource` with two
primitives, so that tests can replace the source: :class:`TorchRandom` draws from a
``torch.Generator`` (production), and :mod:`rheo.exact` branches over every
outcome to compute output distributions exactly.
"""

from __future__ import annotations

import hashlib
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
        cdf = probs.cumsum(-1, dtype=torch.float64)  # [n, V]: the float64 cast and the sum in one op
        u = self._uniform(n, probs.device) * cdf[:, -1]  # [n]
        idx = torch.searchsorted(cdf, u[:, None], right=True).squeeze(-1)  # [n]
        return idx.clamp_(max=vocab - 1)

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:
        return self._uniform(probs.shape[0], probs.device) < probs.to(torch.float64)

    def bernoulli_else_categorical(self, accept: torch.Tensor, probs: torch.Tensor,
                                   also: torch.Tensor) -> tuple[bool, int, int]:
        """accept: [1] in [0, 1]; probs: [1, V]; also: a 0-d integer or bool tensor the caller reads
        with the draws. ``bernoulli(accept)``, and when it is False, ``categorical(probs)``, with one
        read from the device: both are drawn, then the generator is set back to its state after the
        first draw when the second was not needed. The stream is the one the two calls make in turn,
        so the same seed gives the same tokens. Returns (hit, y, also)."""
        hit = self.bernoulli(accept)  # [1] bool
        after_first = self.generator.get_state()
        y = self.categorical(probs)  # [1]
        hit, y, extra = torch.stack([hit.long(), y, also.long()[None]]).flatten().tolist()
        if hit:
            self.generator.set_state(after_first)
        return bool(hit), int(y), int(extra)


class PathRandom:
    """Common random numbers for trees built at one decoding state, coupled node by node.

    The ``j``-th draw made at the node reached by token path ``p`` uses random numbers seeded by
    a hash of ``(key, p, j)`` (so distinct ``(p, j)`` draw independently), whichever tree is
    being built. A categorical draw is a Gumbel-max draw, ``argmax_i log probs[i] + G_i``, with
    the Gumbel noise of entry ``i`` of a row of length ``L`` indexed by ``L - 1 - i`` (from the
    row's end): rows that are tails of one sorted support (Rheo's residual after ``m`` leads,
    for any ``m``) give the same noise to the same token. So two trees that expand the same node
    draw the same token there when their residuals agree, and a residual without the top token
    (``m = 1``) picks what the full one (``m = 0``) picked unless that was the top token; each
    tree on its own is distributed exactly as under :class:`TorchRandom`. The builder announces
    each layer's frontier with :meth:`at` (``rheo.mechanism.DraftRecorder`` does, at every draft
    call); a draw of ``n`` rows is then one per frontier node, in order. A draw whose row count
    is not the frontier's takes the next seeds of a plain hashed stream.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.paths: list[tuple[int, ...]] = []
        self.draws: dict[tuple[int, ...], int] = {}  # path -> draws made there so far
        self.spare = 0  # draws of the plain stream so far

    def at(self, paths: list[tuple[int, ...]]) -> None:
        """The current frontier, as token paths from the root."""
        self.paths = list(paths)

    def _generators(self, n: int) -> list[torch.Generator]:
        """One generator per row of an ``n``-row draw (class docstring)."""
        if n == len(self.paths):
            names = []
            for path in self.paths:
                j = self.draws.get(path, 0)
                self.draws[path] = j + 1
                names.append(f"{path}/{j}")
        else:
            names = [f"spare/{self.spare + i}" for i in range(n)]
            self.spare += n
        seeds = [int.from_bytes(hashlib.sha256(f"{self.key}/{name}".encode()).digest()[:8], "little") >> 1
                 for name in names]
        return [torch.Generator().manual_seed(seed) for seed in seeds]

    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        u = [torch.rand(1, generator=g, dtype=torch.float64) for g in self._generators(n)]
        return torch.cat(u).to(device) if u else torch.empty(0, dtype=torch.float64, device=device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        n, length = probs.shape
        u = torch.stack([torch.rand(length, generator=g, dtype=torch.float64) for g in self._generators(n)]) \
            if n else torch.empty(0, length, dtype=torch.float64)  # [n, L], entry k = noise of index L-1-k
        gumbel = -torch.log(-torch.log(u.clamp(min=1e-300))).flip(-1).to(probs.device)  # [n, L]
        return (probs.to(torch.float64).log() + gumbel).argmax(-1)  # [n]

    bernoulli = TorchRandom.bernoulli


class PredrawnRandom:
    """Draws from uniforms drawn before: the ``i``-th uniform any draw needs is ``uniforms[i]``, in the
    order :class:`TorchRandom` would draw them (categorical and bernoulli are its own code), so a
    function that takes its randomness as a tensor can be captured whole (no ``torch.Generator`` in it).

    uniforms: [N] float64. On a CPU, ``torch.rand(N, generator=g)`` equals the separate draws of the
    same total length made on ``g`` in turn, so a build fed ``TorchRandom(g)``'s ``N`` uniforms drawn at
    once makes the same tree as the build drawing them itself, and leaves ``g`` where it would.
    Reading past the end raises ValueError (the count is a property of the configuration's shapes)."""

    def __init__(self, uniforms: torch.Tensor) -> None:
        self.uniforms = uniforms
        self.used = 0  # uniforms read so far

    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        if self.used + n > self.uniforms.shape[0]:
            raise ValueError(f"a draw of {n} uniforms after {self.used} of {self.uniforms.shape[0]} pre-drawn ones: "
                             "the function drew more than its count")
        u = self.uniforms[self.used:self.used + n]
        self.used += n
        return u.to(device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        """:meth:`TorchRandom.categorical`'s index, counted instead of searched: the entries of the
        (non-decreasing) CDF at or below the scaled uniform, which is what ``searchsorted(right=True)``
        returns, in a form a compiler fuses into one kernel with the comparison (probs: [n, V] -> [n])."""
        n, vocab = probs.shape
        cdf = probs.cumsum(-1, dtype=torch.float64)  # [n, V]
        u = self._uniform(n, probs.device) * cdf[:, -1]  # [n]
        return (cdf <= u[:, None]).sum(-1).clamp(max=vocab - 1)

    bernoulli = TorchRandom.bernoulli


class CountingRandom:
    """A :class:`TorchRandom` that counts the uniforms it hands out (``used``): how many a function
    needs pre-drawn for :class:`PredrawnRandom`."""

    def __init__(self, base: TorchRandom) -> None:
        self.base = base
        self.used = 0

    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        self.used += n
        return self.base._uniform(n, device)

    categorical = TorchRandom.categorical
    bernoulli = TorchRandom.bernoulli
