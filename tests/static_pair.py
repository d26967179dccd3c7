"""A tiny transformers Llama target with a random EAGLE-3 head on its small vocabulary, for the engine
tests (rheo.engine): the smallest pair that every engine runs, with fp32 weights and no files."""

from __future__ import annotations

import torch

from rheo.models.eagle3 import Eagle3Drafter
from rheo.models.eagle3_head import Eagle3Config, Eagle3Head
from rheo.models.hf_target import HFTarget
from rheo.models.tiny import make_tiny_llama

HIDDEN, HEADS, KV_HEADS = 32, 4, 2


def eagle_pair(vocab: int = 12, layers: int = 4, seed: int = 0) -> tuple[HFTarget, Eagle3Drafter]:
    """(HFTarget, Eagle3Drafter): a seeded random Llama of ``layers`` decoder layers (>= 3: the head
    reads layers 2, L//2, L-3) and a random head whose output layer is the target's (so that its
    drafts agree with the target often enough for trees to be accepted past the root)."""
    hf = make_tiny_llama(seed=seed, vocab_size=vocab, hidden_size=HIDDEN, num_layers=layers, num_heads=HEADS,
                         num_kv_heads=KV_HEADS, intermediate_size=48)
    cfg = Eagle3Config(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       intermediate_size=40, vocab_size=vocab, draft_vocab_size=vocab)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        head = Eagle3Head(cfg).eval()
    with torch.no_grad():
        head.lm_head.weight.copy_(hf.lm_head.weight)
        head.norm.weight.copy_(hf.model.norm.weight)
    return HFTarget(hf), Eagle3Drafter(head, hf.get_input_embeddings().weight)


def eager_compiler(fn):
    """torch.compile as the graphs engine calls it, with Dynamo's own graphs run eagerly (no Inductor)."""
    return torch.compile(fn, backend="eager", fullgraph=True, dynamic=False)


def graph_counts() -> tuple[int, int]:
    """(graphs Dynamo made, graph breaks) since the counters were last cleared."""
    counters = torch._dynamo.utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def fresh_dynamo() -> None:
    """Forget every compiled graph and zero the counters (each test counts its own)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
