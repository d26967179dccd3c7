"""A capturable toy drafter and Dynamo's graph counts, for the captured-build tests.

:class:`StaticToyDrafter` is a drafter session whose ``draft`` reads no host value: its committed
context sits in a buffer of fixed capacity with its length in a 0-d tensor, as a static head session
holds its KV, so one compiled graph serves every committed length and every layer.
"""

from __future__ import annotations

import contextlib

import torch

from rheo.models.base import TreeView


class StaticToyDrafter:
    """logits [f, V] of frontier nodes: a function of the node's token, its parent's token, its depth
    and the mean embedding of the committed tokens (capacity ``cap``, length a 0-d tensor)."""

    def __init__(self, vocab: int, dim: int = 8, cap: int = 64, seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> None:
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn(vocab, dim, generator=g, dtype=dtype)  # [V, d]
        self.out = torch.randn(dim, vocab, generator=g, dtype=dtype) * 2  # [d, V]
        self.cache = torch.zeros(cap, dim, dtype=dtype)  # [cap, d]
        self.length = torch.zeros((), dtype=torch.long)  # 0-d
        self.vocab_size = vocab
        self.draft_to_target = None

    def extend(self, tokens: torch.Tensor) -> None:
        """tokens: [a] long, committed after the current length."""
        at = self.length + torch.arange(tokens.shape[0])
        self.cache.index_copy_(0, at, self.emb[tokens])
        self.length.add_(tokens.shape[0])

    def draft(self, view: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] -> logits [f, V]."""
        tok = view.tokens[frontier]  # [f]
        parent = view.tokens[view.parents[frontier].clamp(min=0)]  # [f]
        live = (torch.arange(self.cache.shape[0]) < self.length).to(self.cache.dtype)  # [cap]
        ctx = (self.cache * live[:, None]).sum(0) / self.length.clamp(min=1)  # [d]
        h = self.emb[tok] + 0.5 * self.emb[parent] + ctx + 0.1 * view.depths[frontier, None]  # [f, d]
        return torch.tanh(h) @ self.out  # [f, V]


@contextlib.contextmanager
def dynamo_counts():
    """Yields a dict filled on exit with Dynamo's ``graphs`` (unique graphs made) and ``breaks``
    (graph breaks) inside the block."""
    from torch._dynamo.utils import counters
    counters.clear()
    out: dict = {}
    try:
        yield out
    finally:
        out["graphs"] = counters["stats"]["unique_graphs"]
        out["breaks"] = sum(counters["graph_break"].values())
