"""Baselines composed from the core. Autoregressive sampling lives here; EAGLE's Top-K tree is
not a separate loop: it is ``rheo.decode.speculative_generate`` with ``SpecConfig(method="topk")``."""

from baselines.autoregressive import autoregressive_generate

__all__ = ["autoregressive_generate"]
