"""Baselines composed from the core, registered as *reference* methods (rheo.methods.registry):
autoregressive sampling (``ar``, the baseline of every speedup) and ``transformers`` ``generate``
(``hf_generate``, a speed reference). EAGLE's Top-K tree is not a separate loop: it is
``rheo.decode.speculative_generate`` with ``SpecConfig(method="topk")``."""

from baselines.autoregressive import AR, autoregressive_generate
from baselines.hf_generate import HF_GENERATE

__all__ = ["AR", "HF_GENERATE", "autoregressive_generate"]
