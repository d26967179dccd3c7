"""The EAGLE-3 draft head as a module, in the official checkpoint layout.

Parameter names match the official EAGLE-3 checkpoints (``fc.weight``,
``midlayer.self_attn.{q,k,v,o}_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``,
``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``,
``norm.weight``, ``lm_head.weight`` and the buffers ``d2t`` / ``t2d``).

One step of the head, for a token x paired with a hidden state h::

    a   = attn(cat(input_layernorm(embed(x)), hidden_norm(h)))   # q/k/v take 2H
    h'  = h + a                                                  # residual is h
    out = h' + mlp(post_attention_layernorm(h'))
    logits = lm_head(norm(out))

Step 1 feeds ``h = fc(target features)``; later steps feed the head's own
``out`` (before ``norm``). Token embeddings are the target's and are passed in.
Attention is split in two: :meth:`Eagle3Head.qkv` makes rotated queries/keys,
callers decide which keys each query sees (drafter: committed cache + tree
ancestors; training: the training-time-test pattern), :meth:`Eagle3Head.finish`
applies ``o_proj``, the residuals and the MLP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)


#: the RMSNorm eps of the official EAGLE-3 code when a head config.json does not set one
OFFICIAL_RMS_NORM_EPS = 1e-6


@dataclass
class Eagle3Config:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int  # target vocabulary
    draft_vocab_size: int
    target_hidden_size: Optional[int] = None  # fc input is 3 * this; defaults to hidden_size
    head_dim: Optional[int] = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[Dict[str, Any]] = None
    max_position_embeddings: int = 8192
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Eagle3Config":
        """A head ``config.json`` read as the official EAGLE-3 code reads it: ``rms_norm_eps``
        defaults to :data:`OFFICIAL_RMS_NORM_EPS` (1e-6), and ``head_dim`` is kept as written
        (:func:`rheo.models.eagle3.load_eagle3_drafter` then follows the official hidden / heads)."""
        from rheo.models.config_checks import check_head_config_values

        check_head_config_values(d)
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs = {k: v for k, v in d.items() if k in known}
        if kwargs.get("rms_norm_eps") is None:
            kwargs["rms_norm_eps"] = OFFICIAL_RMS_NORM_EPS
        if kwargs.get("draft_vocab_size") is None:
            kwargs["draft_vocab_size"] = d["vocab_size"]
        rope = d.get("rope_parameters") or {}
        if "rope_theta" not in kwargs and "rope_theta" in rope:
            kwargs["rope_theta"] = rope["rope_theta"]
        if kwargs.get("rope_scaling") is None and rope.get("rope_type", "default") != "default":
            kwargs["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
        return cls(**kwargs, extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> Dict[str, Any]:
        """The config as a head ``config.json``. ``target_hidden_size`` is written only when it
        differs from ``hidden_size``: the official code takes its presence to mean that the head
        brings its own ``embed_tokens`` (this class never does: it uses the target's)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        if d["target_hidden_size"] == d["hidden_size"]:
            del d["target_hidden_size"]
        d.update(self.extra)
        d.setdefault("architectures", ["LlamaForCausalLMEagle3"])
        d.setdefault("model_type", "llama")
        return d

    def llama_config(self) -> LlamaConfig:
        """A LlamaConfig carrying the head's shapes (used for RoPE, norms and the MLP)."""
        max_pos = self.max_position_embeddings
        if self.rope_scaling and "original_max_position_embeddings" in self.rope_scaling:
            max_pos = max(max_pos, int(self.rope_scaling["original_max_position_embeddings"]) * 16)
        return LlamaConfig(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            max_position_embeddings=max_pos,
            vocab_size=self.vocab_size,
            hidden_act="silu",
        )


class Eagle3Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(2 * h, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, cfg.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, cfg.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, h, bias=False)


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.self_attn = Eagle3Attention(cfg)
        self.mlp = LlamaMLP(cfg.llama_config())
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)


class Eagle3Head(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(cfg.llama_config())

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """features: [..., 3*Ht] -> step-1 hidden [..., H]."""
        return self.fc(features)

    def qkv(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """embeds, hidden: [B, T, H]; positions: [B, T] long.

        Returns rotated q [B, nH, T, hd], rotated k [B, nKV, T, hd], v [B, nKV, T, hd].
        """
        cfg, layer = self.cfg, self.midlayer
        b, t, _ = hidden.shape
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        attn = layer.self_attn
        q = attn.q_proj(x).view(b, t, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = self.rotary(v, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def finish(self, attn_out: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """attn_out: [B, nH, T, hd] (softmax-weighted values); hidden: [B, T, H] (the residual).

        Returns the head's output hidden [B, T, H] (before ``norm``).
        """
        b, _, t, _ = attn_out.shape
        layer = self.midlayer
        h = hidden + layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, -1))
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, out_hidden: torch.Tensor) -> torch.Tensor:
        """out_hidden: [..., H] -> draft logits [..., draft_vocab]."""
        return self.lm_head(self.norm(out_hidden))

    def draft_to_target(self) -> torch.Tensor:
        """[draft_vocab] long target ids."""
        return torch.arange(self.cfg.draft_vocab_size, device=self.d2t.device) + self.d2t


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Grouped-query attention.

    q: [B, nH, T, hd]; keys, values: [B, nKV, S, hd]; mask: [B or 1, 1, T, S] bool (True = attend), or
    additive (0 = attend, -inf = not: the float mask attention makes of a boolean one), or None.
    Returns [B, nH, T, hd].
    """
    return nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def save_head(head: Eagle3Head, out_dir, dtype: torch.dtype = torch.float16, int8: bool = False) -> None:
    """Write ``config.json`` + ``model.safetensors`` (official key names) atomically into ``out_dir``.

    Float weights are stored as ``dtype``; ``d2t`` (long) and ``t2d`` (bool) as they are.
    ``int8``: matrices as per-row int8 (:func:`quantize_int8`; our loader reads it, the
    official EAGLE code does not).
    """
    import json

    from safetensors.torch import save

    from rheo.io import atomic_write_bytes, atomic_write_text

    out_dir = Path(out_dir)
    state = {}
    for k, v in head.state_dict().items():
        if k.startswith("rotary."):
            continue
        v = v.detach().cpu()
        state[k] = (v.to(dtype) if v.is_floating_point() else v).contiguous()
    if int8:
        state = quantize_int8(state)
    atomic_write_bytes(out_dir / "model.safetensors", save(state, metadata={"format": "pt"}))
    atomic_write_text(out_dir / "config.json", json.dumps(head.cfg.to_dict(), indent=2) + "\n")


INT8_SCALE_SUFFIX = "_int8_scale"


def quantize_int8(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Symmetric per-row int8 for every 2-D float weight: ``w ~= q * scale[:, None]``.

    The int8 tensor keeps its official key; ``<key>_int8_scale`` [rows] fp16 sits beside it.
    Used only to store a *baseline* head compactly (half of fp16); see :func:`dequantize_int8`.
    """
    out = {}
    for k, v in state.items():
        if v.is_floating_point() and v.dim() == 2:
            scale = v.float().abs().amax(dim=1).clamp_min(1e-12) / 127.0  # [rows]
            out[k] = torch.round(v.float() / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
            out[k + INT8_SCALE_SUFFIX] = scale.to(torch.float16)
        else:
            out[k] = v
    return out


def dequantize_int8(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Inverse of :func:`quantize_int8` (a no-op on a plain checkpoint); weights come back fp32."""
    scales = {k[: -len(INT8_SCALE_SUFFIX)]: v for k, v in state.items() if k.endswith(INT8_SCALE_SUFFIX)}
    out = {k: v for k, v in state.items() if not k.endswith(INT8_SCALE_SUFFIX)}
    for k, s in scales.items():
        out[k] = out[k].float() * s.float()[:, None]
    return out
