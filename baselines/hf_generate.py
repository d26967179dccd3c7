"""``transformers`` ``generate`` as a reference row: is our AR baseline as fast as the library's?

The same target (``pair.hf_model``), greedy (``do_sample=False``) at T = 0 and plain
sampling at T > 0 (``top_k=0``, ``top_p=1``: the full distribution at temperature T,
the distribution every method here samples). ``generate`` draws from torch's global
generator, so the seed is set on it (``torch.manual_seed``) and the tokens differ from
our samplers' at T > 0; at T = 0 they must agree with our AR (the tests check it).
Returns a :class:`rheo.decode.GenerationOutput` with one token per target call.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from rheo.decode import EosSpec, GenerationOutput, check_prompt, eos_set
from rheo.methods import Method, register


def hf_generate(hf_model: torch.nn.Module, prompt: Sequence[int], max_new_tokens: int,
                temperature: float = 0.0, seed: Optional[int] = None,
                eos_token_id: EosSpec = None) -> GenerationOutput:
    """prompt: token ids. Up to ``max_new_tokens`` new tokens, stopping after the first EOS."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    ids = check_prompt(prompt, max_new_tokens, int(hf_model.config.vocab_size))
    stop = sorted(eos_set(eos_token_id))
    device = next(hf_model.parameters()).device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=0, attention_mask=torch.ones_like(input_ids),
                  eos_token_id=stop or None, pad_token_id=stop[0] if stop else 0)
    if temperature == 0:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
        if seed is not None:
            torch.manual_seed(seed)
    out = hf_model.generate(input_ids, **kwargs)
    tokens = [int(t) for t in out[0, len(ids):]]
    hit = next((i for i, t in enumerate(tokens) if t in stop), None)
    if hit is not None:
        tokens = tokens[: hit + 1]  # generate pads after EOS
    return GenerationOutput(tokens=tokens, accept_lengths=[1] * len(tokens))


def _generate(pair, prompt: Sequence[int], max_new_tokens: int, temperature: float, generator: torch.Generator,
              eos_token_id: EosSpec, device: torch.device | str, timer) -> GenerationOutput:
    return hf_generate(pair.hf_model, prompt, max_new_tokens, temperature, generator.initial_seed(), eos_token_id)


#: a speed reference for the AR baseline; transformers runs the loop, so its phases cannot be timed
HF_GENERATE = register(Method(name="hf_generate", display="transformers generate", kind="reference",
                              generate=_generate, phases=False))
