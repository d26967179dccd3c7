"""Baselines composed from the core: autoregressive sampling and EAGLE's Top-K tree."""

from baselines.autoregressive import autoregressive_generate
from baselines.topk import topk_config, topk_generate

__all__ = ["autoregressive_generate", "topk_config", "topk_generate"]
