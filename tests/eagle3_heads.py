"""Random EAGLE-3 heads in the official checkpoint layout, for the tests (config.json plus
model.safetensors or pytorch_model.bin), sized to read make_tiny_llama(hidden_size=H, vocab_size=VOCAB)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

H, VOCAB, DRAFT_VOCAB, HEADS, KV_HEADS, FFN = 64, 256, 120, 4, 2, 96
ATOL = 1e-4


def official_state(seed: int = 0, fc_in: int = 3 * H, d2t_shift: int = 0) -> tuple[dict, torch.Tensor]:
    """Random weights with official key names; returns (state, draft->target ids [DRAFT_VOCAB])."""
    g = torch.Generator().manual_seed(seed)
    hd = H // HEADS
    target_ids = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values + d2t_shift

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[target_ids.clamp(max=VOCAB - 1)] = True
    state = {
        "fc.weight": w(H, fc_in),
        "midlayer.self_attn.q_proj.weight": w(HEADS * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": w(KV_HEADS * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": w(KV_HEADS * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": w(H, HEADS * hd),
        "midlayer.mlp.gate_proj.weight": w(FFN, H),
        "midlayer.mlp.up_proj.weight": w(FFN, H),
        "midlayer.mlp.down_proj.weight": w(H, FFN),
        "midlayer.input_layernorm.weight": 1 + w(H),
        "midlayer.hidden_norm.weight": 1 + w(H),
        "midlayer.post_attention_layernorm.weight": 1 + w(H),
        "norm.weight": 1 + w(H),
        "lm_head.weight": w(DRAFT_VOCAB, H) * 5,
        "d2t": target_ids - torch.arange(DRAFT_VOCAB),
        "t2d": t2d,
    }
    return state, target_ids


def official_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": FFN,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 2048,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "hidden_act": "silu", "bias": False,
    }


def write_head(path, state, fmt="safetensors"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(official_config()))
    if fmt == "safetensors":
        save_file(state, str(path / "model.safetensors"))
    else:
        torch.save(state, path / "pytorch_model.bin")
    return path


@pytest.fixture(scope="module")
def tiny():
    """The tiny Llama target these heads read (one per test module)."""
    from rheo.models.tiny import make_tiny_llama

    return make_tiny_llama(seed=0, vocab_size=VOCAB, hidden_size=H)


@pytest.fixture(scope="module")
def drafter(tiny, tmp_path_factory):
    """An EAGLE-3 drafter loaded from a random head in the official layout, on ``tiny``."""
    from rheo.models.eagle3 import load_eagle3_drafter

    state, _ = official_state()
    return load_eagle3_drafter(write_head(tmp_path_factory.mktemp("head"), state), tiny)
