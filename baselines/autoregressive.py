"""Autoregressive decoding of the target: the reference point for speedup and for
the distribution every speculative method must reproduce.

It drives the same target protocol as the speculative loop (a one-node "tree" per
call), so both are timed on the same KV-cached model code.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

import torch

from rheo.decode import EosSpec, GenerationOutput, check_prompt, eos_set
from rheo.methods import Method, register
from rheo.models.base import DraftTree, TargetModel
from rheo.probs import raise_nan, target_probs
from rheo.random import RandomSource, TorchRandom
from rheo.timing import NULL_TIMER


@torch.no_grad()
def autoregressive_generate(target: TargetModel, prompt: Sequence[int], max_new_tokens: int,
                            temperature: float = 1.0, generator: Optional[torch.Generator] = None,
                            eos_token_id: EosSpec = None, device: torch.device | str = "cpu",
                            rng: Optional[RandomSource] = None, timer=None) -> GenerationOutput:
    """Sample ``target`` token by token (argmax at ``temperature == 0``).

    ``timer``: a :class:`rheo.timing.PhaseTimer` (phases prefill, score, verify = picking the token, commit; None = off).
    """
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a number >= 0, got {type(temperature).__name__} {temperature!r}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    ids = check_prompt(prompt, max_new_tokens, target.vocab_size, getattr(target, "context_length", None))
    rng = rng if rng is not None else TorchRandom(generator)
    stop = eos_set(eos_token_id)
    out = GenerationOutput(tokens=[], accept_lengths=[])
    tm = timer or NULL_TIMER
    session = target.new_session()
    with tm.phase("prefill"):
        session.prefill(ids[:-1])
    root = ids[-1]
    zero = torch.zeros(1, dtype=torch.long, device=device)
    single = dict(parents=torch.full((1,), -1, dtype=torch.long, device=device), depths=zero,
                  ancestor_mask=torch.ones(1, 1, dtype=torch.bool, device=device))
    while len(out.tokens) < max_new_tokens:
        tree = DraftTree(tokens=torch.tensor([root], dtype=torch.long, device=device), **single)
        with tm.phase("score"):
            logits = session.score_tree(tree).logits[0]  # [V]
        with tm.phase("verify"):  # the AR "verification": pick the next token, read with the NaN check
            if temperature == 0:  # the first argmax, as of the one-hot target_probs makes at T = 0
                draw, nan = logits.argmax(), torch.isnan(logits).any()
            else:
                p = target_probs(logits, temperature, check=False)
                draw, nan = rng.categorical(p[None])[0], torch.isnan(p[0])  # a NaN logit: an all-NaN row
            token, bad = torch.stack([draw, nan.long()]).tolist()  # one host read
            if bad:
                raise_nan(logits, temperature)
        out.tokens.append(token)
        out.accept_lengths.append(1)
        if token in stop:
            break
        with tm.phase("commit"):
            session.commit(zero)
        root = token
    return out


def _generate(pair, prompt: Sequence[int], max_new_tokens: int, temperature: float, generator: torch.Generator,
              eos_token_id: EosSpec, device: torch.device | str, timer) -> GenerationOutput:
    return autoregressive_generate(pair.target, prompt, max_new_tokens, temperature, generator, eos_token_id,
                                   device=device, timer=timer)


#: the baseline of every speedup (a reference method: rheo.methods.registry)
AR = register(Method(name="ar", display="AR (ours)", kind="reference", generate=_generate))
