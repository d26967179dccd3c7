"""One generation of any registered method: the run, the GPU check and the tree tuning all call it.

A tree method runs the speculative loop (:func:`rheo.decode.speculative_generate`); a
reference method (:mod:`baselines`: AR, ``transformers`` ``generate``) its registered
``generate``. Which one is the method's registration, not its name.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from rheo.config import SpecConfig
from rheo.decode import EosSpec, GenerationOutput, speculative_generate
from rheo.engine import with_engine
from rheo.methods import get_method
from rheo.timing import PhaseTimer


def generate(pair, spec: SpecConfig, prompt: Sequence[int], max_new_tokens: int, generator: torch.Generator,
             eos_token_id: EosSpec = None, device: torch.device | str = "cpu",
             timer: Optional[PhaseTimer] = None, record_expected: bool = False) -> GenerationOutput:
    """Up to ``max_new_tokens`` tokens after ``prompt`` (token ids) with ``pair`` (a rheo.models
    ModelPair) under ``spec`` (its method and temperature; a tree method's parameters).
    ``record_expected``: a tree method also records each cycle's expected emitted tokens (a
    reference method has no cycles and ignores it). ``spec.engine`` (rheo.engine) runs the pair's
    static twin for the tree methods and AR; another reference method refuses it."""
    method = get_method(spec.method)
    if method.is_reference:
        if spec.engine != "eager" and not method.phases:  # a library's own loop (the registry's mark)
            raise ValueError(f"method {spec.method!r} runs a library's own loop, which engine={spec.engine!r} cannot "
                             f"change: use engine='eager' (AR runs the engine's target)")
        return method.generate(with_engine(pair, spec.engine), prompt, max_new_tokens, spec.temperature, generator, eos_token_id, device,
                               timer)
    return speculative_generate(pair.target, pair.drafter, prompt, max_new_tokens, config=spec,
                                generator=generator, eos_token_id=eos_token_id, timer=timer,
                                record_expected=record_expected)


def phase_timer(spec: SpecConfig, device: torch.device | str, profile: bool = True) -> Optional[PhaseTimer]:
    """A PhaseTimer for one generation of ``spec``'s method, or None when ``profile`` is off or the
    method's phases cannot be timed (a library's own loop)."""
    return PhaseTimer(device) if profile and get_method(spec.method).phases else None
