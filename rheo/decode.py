"""Speculative decoding loop (implementation landing next; signature is final)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from rheo.config import SpecConfig

__all__ = ["SpecConfig", "GenerationOutput", "speculative_generate"]


@dataclass
class GenerationOutput:
    tokens: list[int]                 # exactly the new tokens
    accept_lengths: list[int]         # tokens emitted per target call, bonus included
    drafted_nodes: list[int] = field(default_factory=list)   # per cycle
    kept_nodes: list[int] = field(default_factory=list)      # per cycle
    sample_kept: list[int] = field(default_factory=list)     # per cycle, samples kept
    sample_accepted: list[int] = field(default_factory=list) # per cycle, samples accepted

    @property
    def target_calls(self) -> int:
        return len(self.accept_lengths)

    @property
    def tau(self) -> float:
        return len(self.tokens) / max(1, self.target_calls)


def speculative_generate(target, drafter, prompt: Sequence[int], max_new_tokens: int,
                         config: SpecConfig = SpecConfig(), generator: Optional[torch.Generator] = None,
                         eos_token_id=None) -> GenerationOutput:
    raise NotImplementedError
