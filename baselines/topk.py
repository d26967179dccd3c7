"""EAGLE-2/3's Top-K dynamic tree at T > 0, expressed through the shared core.

Top-K is not a separate loop: it is :func:`rheo.decode.speculative_generate` with
``method="topk"`` (every slot a deterministic top-K candidate, verified as point
masses). This module only fixes that choice.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

import torch

from rheo.decode import EosSpec, GenerationOutput, SpecConfig, speculative_generate
from rheo.models.base import DraftModel, TargetModel


def topk_config(config: SpecConfig = SpecConfig()) -> SpecConfig:
    return replace(config, method="topk")


def topk_generate(target: TargetModel, drafter: DraftModel, prompt: Sequence[int], max_new_tokens: int,
                  config: SpecConfig = SpecConfig(), generator: Optional[torch.Generator] = None,
                  eos_token_id: EosSpec = None) -> GenerationOutput:
    return speculative_generate(target, drafter, prompt, max_new_tokens, topk_config(config), generator,
                                eos_token_id)
