"""A tiny randomly initialised Llama for fast CPU tests of the model adapters."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["make_tiny_llama"]


def make_tiny_llama(
    seed: int = 0,
    vocab_size: int = 256,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    initializer_range: float = 0.1,
    attn_implementation: str = "sdpa",
) -> LlamaForCausalLM:
    """Random fp32 Llama in eval mode, the same weights for the same arguments.

    ``initializer_range`` is larger than Llama's 0.02 so that next-token logits are
    well separated: greedy tests then do not hinge on float-level near-ties.
    The global RNG is left as it was (weights come from a forked, seeded RNG).
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=1024,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation,
                                              dtype=torch.float32)
    return model.eval()
