"""The functions a compiler captures for the static target (:mod:`rheo.models.static_target`): a
decoder call over a static cache (:func:`decode_graph`), a padded tree's scoring call
(:func:`score_graph`) and the commit's fixed-shape copies (:func:`commit_graph`). No Python value in
them depends on the cache length or the tree: ``past`` is a 0-d tensor and every shape is a bucket's.
transformers' decoder layers run unchanged; only the model's top level (embedding, rotary, mask, the
cache object, the feature reads, the final norm and output rows) is written here. ``target`` is a
:class:`rheo.models.static_target.StaticHFTarget` (its decoder, output layer, feature layers, dtype).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["CHAIN_ROWS", "StaticKV", "chain_rows", "commit_graph", "decode_graph", "full_attention", "score_graph"]

#: logits rows made inside the scoring graph: the first-ranked chain, at most this many
CHAIN_ROWS = 16


def full_attention(hf_model: torch.nn.Module) -> bool:
    """True when every decoder layer attends to the whole past (no sliding window): one static cache fits all."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=hf_model.config).layers)


class StaticKV:
    """The cache object transformers' attention writes through (``cache.update``): row ``at[i]`` of
    layer ``l``'s keys and values gets the i-th new key and value; the whole buffer is returned.
    kv: 2L tensors, keys then values of layer 0, 1, ...: [1, kv_heads, capacity, head_dim]; at: [N] long."""

    def __init__(self, kv: Sequence[torch.Tensor], at: torch.Tensor) -> None:
        self.kv, self.at = kv, at

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.kv[2 * layer_idx], self.kv[2 * layer_idx + 1]
        k.index_copy_(2, self.at, keys)
        v.index_copy_(2, self.at, values)
        return k, v


def decode_graph(target: Any, kv: Sequence[torch.Tensor], tokens: torch.Tensor,
                 depths: torch.Tensor, visible: torch.Tensor, past: torch.Tensor):
    """The decoder over N new tokens behind ``past`` cached ones (no Python value depends on ``past``).

    tokens, depths: [N] long (positions past + depths); visible: [N, N] bool, [i, j] = token i sees
    new token j; past: 0-d long. Writes the new keys and values at rows past .. past+N-1 of ``kv``.
    Returns the final-norm hidden states [N, H] and the features [N, 3H] (model dtype)."""
    model = target.decoder
    n, capacity, device = tokens.shape[0], kv[0].shape[2], tokens.device
    at = past + torch.arange(n, device=device)  # [N] cache rows
    positions = (past + depths)[None]  # [1, N]
    col = torch.arange(capacity, device=device)
    rel = col - past  # [C]: column c holds new token c - past
    in_tree = (rel >= 0) & (rel < n)
    seen = (col < past)[None] | (visible[:, rel.clamp(0, n - 1)] & in_tree[None])  # [N, C]
    mask = torch.zeros(n, capacity, dtype=target.dtype, device=device)
    mask = mask.masked_fill(~seen, torch.finfo(target.dtype).min)[None, None]  # [1, 1, N, C]
    hidden = model.embed_tokens(tokens)[None]  # [1, N, H]
    rotary = model.rotary_emb(hidden, positions)
    cache = StaticKV(kv, at)
    taken = {}
    for i, layer in enumerate(model.layers):
        if i in target.layer_ids:
            taken[i] = hidden[0]
        hidden = layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary,
                       **{target.cache_kwarg: cache})
    features = torch.cat([taken[i] for i in target.layer_ids], dim=-1)  # [N, 3H]
    return model.norm(hidden)[0], features


def chain_rows(parents: torch.Tensor, rows: int) -> torch.Tensor:
    """parents: [N] long (-1: the root and padding). The root and each node's lowest-index child,
    ``rows`` entries, the last repeated once the chain ends (as :func:`first_child_chain`, padded)."""
    n = parents.shape[0]
    index = torch.arange(n, device=parents.device)
    has = parents >= 0
    first = torch.full((n + 1,), n, dtype=torch.long, device=parents.device)
    first = first.scatter_reduce(0, torch.where(has, parents, n), torch.where(has, index, n), "amin")
    chain = [index[:1]]
    for _ in range(rows - 1):
        nxt = first.index_select(0, chain[-1])
        chain.append(torch.where(nxt < n, nxt, chain[-1]))
    return torch.cat(chain)  # [rows]


def score_graph(target: Any, kv: Sequence[torch.Tensor], tokens: torch.Tensor, depths: torch.Tensor,
                parents: torch.Tensor, ancestors: torch.Tensor, past: torch.Tensor):
    """One scoring call of a padded tree (the function a compiler captures).

    tokens, depths, parents: [N] (padding: token 0, depth 0, parent -1); ancestors: [N, N] bool
    (padding rows and columns False); past: 0-d long. Returns hidden [N, H], features [N, 3H] and
    the logits [R, V] float32 of :func:`chain_rows` (R = min(N, CHAIN_ROWS))."""
    n = tokens.shape[0]
    visible = ancestors | torch.eye(n, dtype=torch.bool, device=tokens.device)  # padding sees itself
    hidden, features = decode_graph(target, kv, tokens, depths, visible, past)
    rows = chain_rows(parents, min(n, CHAIN_ROWS))
    return hidden, features, target.lm_head(hidden.index_select(0, rows)).float()


def commit_graph(kv: Sequence[torch.Tensor], past: torch.Tensor, src: torch.Tensor) -> None:
    """Move the rows past + src[i] of every tensor to past + i. src: [N] long (fixed length: the
    accepted path, its last node repeated)."""
    at = past + torch.arange(src.shape[0], device=src.device)
    rows = past + src
    for buf in kv:
        buf.index_copy_(2, at, buf.index_select(2, rows))
