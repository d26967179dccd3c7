"""The EAGLE-3 head's draft step in fewer ops, with the same bits as :meth:`Eagle3Head.qkv` (its
reference twin, which training and the committed-context step use).

A draft step runs the head on the f frontier nodes of one tree layer, all at one position. Its
rotation is a row of a table made once per session (:func:`rope_table`), the input and hidden norms
run as one pass over the two stacked inputs, and q and k are rotated together. Each entry is computed
by the same float operations in the same order as in ``qkv`` (``tests/test_eagle3.py`` compares the
two bit for bit), so a faster draft step draws the same trees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from rheo.models.eagle3_head import Eagle3Head

__all__ = ["RopeRow", "RopeTable", "norm_pair", "qkv_at", "rope_table"]


@dataclass(frozen=True)
class RopeRow:
    """The rotation of one position, broadcast over [B, heads, T, hd]: cos, sin_signed [hd]; perm [hd]."""

    cos: torch.Tensor
    sin_signed: torch.Tensor
    perm: torch.Tensor


@dataclass(frozen=True)
class RopeTable:
    """Rotations of positions 0 .. length-1: cos, sin_signed [length, hd] (sin with rotate_half's
    sign on its first half); perm [hd] swaps the halves."""

    cos: torch.Tensor
    sin_signed: torch.Tensor
    perm: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.cos.shape[0])

    def row(self, position: int) -> RopeRow:
        return RopeRow(self.cos[position], self.sin_signed[position], self.perm)


def rope_table(head: Eagle3Head, length: int, like: torch.Tensor) -> RopeTable:
    """The rotations of positions 0 .. length-1 in ``like``'s dtype: row p holds what ``qkv`` computes
    for position p (each entry one product and a cos / sin)."""
    cos, sin = head.rotary(like, torch.arange(length, device=like.device)[None])  # [1, length, hd]
    half = cos.shape[-1] // 2
    sin_signed = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
    perm = torch.cat([torch.arange(half, 2 * half), torch.arange(half)]).to(like.device)
    return RopeTable(cos[0], sin_signed[0], perm)


def norm_pair(head: Eagle3Head) -> torch.Tensor:
    """The input and hidden norms' weights stacked [2, H] (a drafting session makes it once)."""
    a, c = head.midlayer.input_layernorm, head.midlayer.hidden_norm
    if a.variance_epsilon != c.variance_epsilon:
        raise ValueError("the head's input and hidden norms have different epsilons")
    return torch.stack([a.weight.detach(), c.weight.detach()])


def qkv_at(head: Eagle3Head, embeds: torch.Tensor, hidden: torch.Tensor, rope: RopeRow,
           norms: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``head.qkv(embeds, hidden, positions)`` for B nodes at the one position ``rope`` rotates.

    embeds, hidden: [B, T, H]; norms: :func:`norm_pair` when the caller keeps it. Returns rotated q [B, nH, T, hd], rotated k [B, nKV, T, hd], v [B, nKV, T, hd].
    Both norms in one pass over [B, T, 2, H] (each row its own reduction; the result viewed as the
    [B, T, 2H] concatenation), and q and k rotated together as x cos + x[perm] sin_signed
    (= rotate_half(x) sin: a sign moved onto an exact product)."""
    cfg = head.cfg
    b, t, h = hidden.shape
    weight = norm_pair(head) if norms is None else norms
    eps = head.midlayer.input_layernorm.variance_epsilon
    both = torch.stack([embeds, hidden], dim=-2)  # [B, T, 2, H]
    dtype = both.dtype
    both = both.to(torch.float32)
    both = both * torch.rsqrt(both.pow(2).mean(-1, keepdim=True) + eps)
    x = (weight * both.to(dtype)).view(b, t, 2 * h)  # [B, T, 2H]
    attn = head.midlayer.self_attn
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q = attn.q_proj(x).view(b, t, nh, hd).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, nkv, hd).transpose(1, 2)
    v = attn.v_proj(x).view(b, t, nkv, hd).transpose(1, 2)
    qk = torch.cat([q, k], dim=1)  # [B, nH + nKV, T, hd]
    qk = qk * rope.cos + qk[..., rope.perm] * rope.sin_signed
    return qk[:, :nh], qk[:, nh:], v
