"""Model pairs for the cycle-cost benchmark (:mod:`eval.device.cycle_cost`): the cost of a cycle
depends on a pair's shapes (layers, widths, vocabularies), not on its weights, so random weights
stand in for the paper's pairs.

* ``tiny32``      - a Llama target with Llama-3.1-8B's 32 layers at tiny widths (hidden 64, vocabulary
  2000) and an EAGLE-3 head of the same widths (draft vocabulary 1000): the op and sync counts of the
  8B's loop, in seconds on a CPU;
* ``llama31_8b``  - Llama-3.1-8B's shapes (32 layers, hidden 4096, vocabulary 128256) with an EAGLE-3
  head of its shapes (draft vocabulary 32000);
* ``vicuna_13b``  - Vicuna-13B's shapes (40 layers, hidden 5120, vocabulary 32000) with an EAGLE-3 head
  of its shapes (draft vocabulary 32000);
* ``smollm2``     - the embedded pair (SmolLM2-135M and its trained head), real weights.

``reduce`` divides the widths and vocabularies of a random shape (not its layer count), so that the
8B and 13B shapes can be built and run on a CPU at a fraction of their size; the counts of ops do
not depend on widths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rheo.placement import as_dtype

SHAPES = ("tiny32", "llama31_8b", "vicuna_13b", "smollm2")
#: name -> (target Llama config fields, draft vocabulary)
RANDOM_SHAPES = {
    "tiny32": (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=32, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=2000), 1000),
    "llama31_8b": (dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0), 32000),
    "vicuna_13b": (dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                        num_key_value_heads=40, vocab_size=32000), 32000),
}


@dataclass
class CostPair:
    """A target and a drafter (the model protocols of rheo.models.base) with the name of their shape."""

    name: str
    target: object
    drafter: object
    vocab_size: int


def _reduced(fields: dict, draft_vocab: int, reduce: int) -> tuple[dict, int]:
    if reduce == 1:
        return dict(fields), draft_vocab
    out = dict(fields)
    heads = max(1, fields["num_attention_heads"] // reduce)
    kv = max(1, fields["num_key_value_heads"] // reduce)
    head_dim = fields["hidden_size"] // fields["num_attention_heads"]
    out.update(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv,
               intermediate_size=fields["intermediate_size"] // reduce, vocab_size=fields["vocab_size"] // reduce)
    return out, draft_vocab // reduce


def random_pair(name: str, device: str = "cpu", dtype: torch.dtype = torch.float32, reduce: int = 1,
                seed: int = 0) -> CostPair:
    """A random-weight Llama target and EAGLE-3 head of shape ``name`` (module docstring)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rheo.models.eagle3 import Eagle3Drafter
    from rheo.models.eagle3_head import Eagle3Config, Eagle3Head
    from rheo.models.hf_target import HFTarget

    if name not in RANDOM_SHAPES:
        raise ValueError(f"unknown random shape {name!r}; choose from {list(RANDOM_SHAPES)}")
    if reduce < 1:
        raise ValueError(f"reduce must be an integer >= 1, got {reduce}")
    fields, draft_vocab = _reduced(*RANDOM_SHAPES[name], reduce)
    config = LlamaConfig(max_position_embeddings=8192, **fields)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            hf = LlamaForCausalLM(config).eval()
            head = Eagle3Head(Eagle3Config(
                hidden_size=fields["hidden_size"], num_attention_heads=fields["num_attention_heads"],
                num_key_value_heads=fields["num_key_value_heads"], intermediate_size=fields["intermediate_size"],
                vocab_size=fields["vocab_size"], draft_vocab_size=draft_vocab,
                rope_theta=fields.get("rope_theta", 10000.0))).eval()
            head.d2t.zero_()  # offsets: draft id i -> target id i
    finally:
        torch.set_default_dtype(before)
    return CostPair(name, HFTarget(hf), Eagle3Drafter(head, hf.get_input_embeddings().weight),
                    fields["vocab_size"])


def load_cost_pair(name: str, device: str = "cpu", dtype: str = "float32", reduce: int = 1) -> CostPair:
    """The pair of shape ``name`` (one of :data:`SHAPES`) on ``device`` in ``dtype``."""
    torch_dtype = as_dtype(dtype)
    if name == "smollm2":
        from eval.measure.pairs import load_pair

        pair = load_pair("smollm2_135m", device=device, dtype=dtype)
        return CostPair(name, pair.target, pair.drafter, pair.target.vocab_size)
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; choose from {list(SHAPES)}")
    return random_pair(name, device=device, dtype=torch_dtype, reduce=reduce)
