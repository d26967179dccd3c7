"""One buffer for the keys and values of every decoder layer of a target (:class:`KVArena`), seen by
``transformers`` as a cache of :class:`ArenaLayer` views.

A forward writes each layer's new rows in place (no copy of the past, as ``torch.cat`` would make),
and keeping the accepted path after a tree moves the rows of every layer at once: one gather and one
copy, whatever the layer count (per layer, it was four ops: 128 on a 32-layer target).
"""

from __future__ import annotations

from typing import Optional

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["ArenaLayer", "KVArena"]


class KVArena:
    """The keys and values of every decoder layer in one buffer ``[L, 2, B, heads, capacity, head_dim]``
    (allocated on the first write, doubled when full); :class:`ArenaLayer` ``i`` is the view
    ``buf[i, :, ..., :length, :]``. One length for all layers: each forward writes every layer."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.buf: Optional[torch.Tensor] = None  # [L, 2, B, heads, capacity, head_dim]
        self.lengths = [0] * num_layers

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """keys, values: [B, heads, n, head_dim] behind layer ``layer``'s rows -> its keys, values [B, heads, len, D]."""
        start = self.lengths[layer]
        end = start + keys.shape[-2]
        if self.buf is None or end > self.buf.shape[-2]:
            self._grow(keys, end)
        self.buf[layer, 0, :, :, start:end].copy_(keys)
        self.buf[layer, 1, :, :, start:end].copy_(values)
        self.lengths[layer] = end
        return self.buf[layer, 0, :, :, :end], self.buf[layer, 1, :, :, :end]

    def _grow(self, like: torch.Tensor, need: int) -> None:
        capacity = max(256, need, 2 * (0 if self.buf is None else self.buf.shape[-2]))
        b, h, _, d = like.shape
        buf = torch.empty(self.num_layers, 2, b, h, capacity, d, dtype=like.dtype, device=like.device)
        if self.buf is not None:
            used = max(self.lengths)
            buf[..., :used, :].copy_(self.buf[..., :used, :])
        self.buf = buf

    def keep(self, past: int, rows: torch.Tensor) -> None:
        """rows: [a] positions (on the buffer's device) of every layer moved to ``past ..``, in order; then crop there."""
        if self.buf is not None:
            self.buf[..., past:past + rows.numel(), :] = self.buf.index_select(-2, rows)
        self.crop(past + rows.numel())

    def crop(self, length: int) -> None:
        self.lengths = [min(n, length) for n in self.lengths]


class ArenaLayer(DynamicLayer):
    """One decoder layer's cache as a view of a :class:`KVArena` (same interface as DynamicLayer)."""

    def __init__(self, arena: KVArena, index: int) -> None:
        self.arena, self.index = arena, index
        super().__init__()

    @property
    def keys(self) -> Optional[torch.Tensor]:  # [B, heads, length, head_dim], a view of the arena
        return self._view(0)

    @keys.setter
    def keys(self, value) -> None:
        if value is not None:
            raise AttributeError("an ArenaLayer's keys are a view of its KVArena: write through update()")

    @property
    def values(self) -> Optional[torch.Tensor]:
        return self._view(1)

    @values.setter
    def values(self, value) -> None:
        if value is not None:
            raise AttributeError("an ArenaLayer's values are a view of its KVArena: write through update()")

    def _view(self, which: int) -> Optional[torch.Tensor]:
        buf = self.arena.buf
        return None if buf is None else buf[self.index, which, :, :, :self.arena.lengths[self.index]]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.is_initialized = True
        return self.arena.write(self.index, key_states, value_states)

    def get_seq_length(self) -> int:
        return self.arena.lengths[self.index]

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of positions to remove, got {tokens_to_remove}")
        self.arena.lengths[self.index] = max(0, self.arena.lengths[self.index] + tokens_to_remove)

    def reset(self) -> None:
        self.arena.lengths[self.index] = 0
