"""Harness-side model factory: the paper's pairs via rheo.models, a pair of your own, plus a test pair.

A pair of your own (``model=local model.name=NAME model.target_path=DIR model.head_path=DIR``)
is any name outside the catalog with both folders given; its rows are labelled and filed under
NAME. :func:`eval.conf.local_pair.check_local_pair` refuses bad folders and a head that does not fit its target
before the run creates or loads anything.

``tiny_random`` (TEST ONLY) is built in-process, without weights: the target is
a seeded random 4-layer Llama (rheo.models.tiny) behind the real HFTarget
adapter, the drafter a PrefixLM toy whose logits are a noisy, cooled copy of
the target's, so that it is right often enough to accept a few tokens per
cycle. Text is byte-level (vocabulary 256), prompts keep their last
``TINY_CONTEXT`` bytes, there is no end-of-sequence token.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from eval.conf.schema import MODELS, run_dtype
from rheo.models.protocol import Prompting, answer_text, prompting, with_system
from rheo.placement import as_dtype

TINY_CONTEXT = 48
DRAFT_CONTEXT = 8  # the toy drafter sees only the last few tokens (cheap, partly right)
#: the name of a pair of your own labels its rows and names their folder


@functools.lru_cache(maxsize=1)
def load_pair(name: str, device: str = "cpu", dtype: Optional[str] = None,
              target_path: Optional[str] = None, head_path: Optional[str] = None,
              chat_format: Optional[str] = None, eos_tokens: Optional[tuple[str, ...]] = None):
    """A model pair with .target, .drafter, .tokenizer, .eos_token_ids, .format_chat.

    ``name``: a catalog entry, the test pair, or (with both folders) a pair of your own.
    The last pair stays loaded: the jobs of a sweep run one after another in one
    process (Hydra's basic launcher) and share it. Pairs hold no per-generation
    state (each generation opens new sessions), so sharing is safe.
    """
    if name not in MODELS and not (target_path and head_path):
        raise ValueError(f"unknown model {name!r}; choose from {list(MODELS)} or give target_path and head_path")
    torch_dtype = as_dtype(dtype)
    if name == "tiny_random":
        return make_tiny_pair(device=device)
    from rheo.models import load_model_pair  # heavy import, only when a real model is needed

    return load_model_pair(name, device=device, dtype=torch_dtype, target_path=target_path,
                           head_path=head_path, chat_format=chat_format, eos_tokens=eos_tokens)


def pair_args(cfg) -> tuple:
    """The arguments of :func:`load_pair` for a run configuration (its ``model`` node, device and dtype)."""
    model = cfg.model
    eos = None if model.get("eos_tokens") is None else tuple(str(t) for t in model.eos_tokens)
    return (model.name, cfg.device, run_dtype(cfg).dtype, model.target_path, model.head_path, model.get("chat_format"), eos)


class ByteTokenizer:
    """Bytes as token ids (vocabulary 256)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")


@dataclass
class TinyPair:
    target: object
    drafter: object
    hf_model: torch.nn.Module
    tokenizer: ByteTokenizer = field(default_factory=ByteTokenizer)
    eos_token_ids: list[int] = field(default_factory=list)
    prompting: Prompting = field(default_factory=Prompting)

    def with_protocol(self, protocol: Optional[str]) -> "TinyPair":
        from dataclasses import replace

        return replace(self, prompting=prompting("tiny_random", protocol))

    @property
    def protocol(self) -> str:
        return self.prompting.protocol

    def answer_text(self, ids: Sequence[int]) -> str:
        return answer_text(self.tokenizer, ids, self.prompting)

    def format_chat(self, messages: list[dict]) -> list[int]:
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in with_system(messages, self.prompting)) + "<assistant>"
        return self.tokenizer.encode(text)[-TINY_CONTEXT:]


def make_tiny_pair(device: str = "cpu", seed: int = 0) -> TinyPair:
    from rheo.models.hf_target import HFTarget
    from rheo.models.tiny import make_tiny_llama
    from rheo.models.toy import PrefixLM

    if device != "cpu":
        raise ValueError("tiny_random is a CPU test model; use device=cpu")
    hf_model = make_tiny_llama(seed=seed, vocab_size=256, num_layers=3)
    noise = torch.Generator().manual_seed(seed + 1)
    noise_table = torch.randn(997, 256, generator=noise)

    @torch.no_grad()
    def draft_logits(prefix: tuple[int, ...]) -> torch.Tensor:
        ids = torch.tensor([list(prefix[-DRAFT_CONTEXT:])], dtype=torch.long)
        logits = hf_model(input_ids=ids).logits[0, -1].float()
        return 1.5 * logits + noise_table[hash(prefix) % 997]

    return TinyPair(target=HFTarget(hf_model), drafter=PrefixLM(draft_logits, 256), hf_model=hf_model)
