"""RheoSampling (and Top-K) as a ``transformers`` custom generation method.

    from rheo.hf_generate import generate as rheo_generate
    out = model.generate(**inputs, custom_generate=rheo_generate, drafter="path/to/eagle3_head",
                         do_sample=True, temperature=0.7, max_new_tokens=128)
    # or the folder of this repository (transformers runs custom_generate/generate.py):
    out = model.generate(**inputs, custom_generate="path/to/rheo", trust_remote_code=True,
                         drafter=head, streamer=TextStreamer(tok), do_sample=True, temperature=0.7)

Every token comes from :func:`rheo.decode.speculative_generate` (the project's decoder and
verifier), so the output has the distribution of sampling the target at ``temperature``
over its full vocabulary (``transformers``' ``top_k=0``), and at ``do_sample=False`` it is
the target's greedy decode. Truncation and penalties (top_p, min_p, repetition_penalty, ...)
would change that distribution: they are not applied and a warning names any that is set;
a logits processor or stopping criterion of the caller's own is refused.

Read from the generation config: ``do_sample``, ``temperature``, ``max_new_tokens`` (else
``max_length``), ``eos_token_id`` (one id or several), ``return_dict_in_generate``. One
sequence at a time (batch 1; left padding in the attention mask is dropped), one beam.

Options, passed to ``generate`` as keyword arguments: ``drafter`` (an EAGLE-3 head folder,
or a loaded drafter for this model), ``method`` ("rheo" or "topk"), ``m``, ``k``, ``depth``,
``tree_size`` (the tree; defaults of :class:`rheo.config.SpecConfig`), ``spec_config`` (a
whole SpecConfig instead) and ``generator`` (a ``torch.Generator``; default torch's global
one, which ``torch.manual_seed`` seeds). With ``return_dict_in_generate=True`` the output
also holds ``accept_lengths`` (tokens emitted per target call) and ``tau``.

Streaming: with the folder, ``streamer`` gets the prompt, then each cycle's tokens. When the
function itself is passed (``custom_generate=generate``), ``transformers`` 5 keeps the
streamer from it: stream through the folder (or ``rheo generate`` on the command line).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from rheo.config import SpecConfig
from rheo.decode import speculative_generate

__all__ = ["generate", "RheoGenerateOutput", "spec_config_for"]

log = logging.getLogger(__name__)
#: generation-config fields whose non-neutral values change the sampled distribution (not applied)
NEUTRAL = {"top_k": (None, 0, 50), "top_p": (None, 1.0), "min_p": (None, 0.0), "typical_p": (None, 1.0),
           "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "repetition_penalty": (None, 1.0),
           "no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,), "suppress_tokens": (None,)}
#: arguments generate hands a custom method that carry nothing rheo needs (left as they are)
MODEL_KWARGS = ("position_ids", "use_cache", "logits_to_keep", "cache", "past_key_values", "cache_position",
                "synced_gpus", "prefix_allowed_tokens_fn", "negative_prompt_ids", "negative_prompt_attention_mask",
                "tokenizer", "assistant_tokenizer")
_DRAFTERS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


@dataclass
class RheoGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate``'s output (``sequences`` [1, prompt + new]) plus the per-cycle accept lengths."""

    accept_lengths: Optional[list[int]] = None
    tau: Optional[float] = None


def spec_config_for(generation_config, method: str = "rheo", spec_config: Optional[SpecConfig] = None,
                    **tree: Optional[int]) -> SpecConfig:
    """The SpecConfig of a call: ``spec_config`` (or the defaults) with the method, the tree sizes
    that are set and the temperature of the generation config (0 when ``do_sample`` is off)."""
    temperature = float(generation_config.temperature or 1.0) if generation_config.do_sample else 0.0
    base = spec_config or SpecConfig()
    changes = {key: value for key, value in tree.items() if value is not None}
    return dataclasses.replace(base, method=method if spec_config is None else base.method,
                               temperature=temperature, **changes)


@torch.no_grad()
def generate(model, input_ids: Optional[torch.Tensor] = None, generation_config=None, streamer=None,
             drafter=None, method: str = "rheo", m: Optional[int] = None, k: Optional[int] = None,
             depth: Optional[int] = None, tree_size: Optional[int] = None, spec_config: Optional[SpecConfig] = None,
             generator: Optional[torch.Generator] = None, inputs: Optional[torch.Tensor] = None,
             logits_processor=None, stopping_criteria=None, assistant_model=None, **kwargs):
    """Decode ``input_ids`` [1, len] with the target ``model`` and an EAGLE-3 ``drafter``; see the
    module doc. Returns the sequences [1, len + new] (or a :class:`RheoGenerateOutput`).

    ``attention_mask`` [1, len] arrives in ``kwargs`` (named here, generate would pass it twice)."""
    from rheo.models.hf_target import HFTarget

    attention_mask = kwargs.pop("attention_mask", None)
    gc = _generation_config(model, generation_config, kwargs)
    ids = input_ids if input_ids is not None else inputs
    if ids is None:
        raise ValueError("rheo generate: no prompt: pass input_ids (e.g. **tokenizer(text, return_tensors='pt'))")
    _refuse_unsupported(gc, ids, assistant_model, logits_processor, stopping_criteria)
    prompt = ids[0] if attention_mask is None else ids[0][attention_mask[0].bool()]  # [len], padding dropped
    max_new = gc.max_new_tokens if gc.max_new_tokens is not None else (gc.max_length or 20) - ids.shape[1]
    config = spec_config_for(gc, method, spec_config, m=m, k=k, depth=depth, tree_size=tree_size)
    if streamer is not None:
        streamer.put(ids.cpu())
    on_tokens = None if streamer is None else (lambda new: streamer.put(torch.tensor(new, dtype=torch.long)))
    out = speculative_generate(HFTarget(model), _drafter(model, drafter), prompt, max(0, int(max_new)), config,
                               generator=generator, eos_token_id=gc.eos_token_id, on_tokens=on_tokens)
    if streamer is not None:
        streamer.end()
    new = torch.tensor([out.tokens], dtype=ids.dtype, device=ids.device)  # [1, new]
    sequences = torch.cat([ids, new], dim=1)  # [1, len + new]
    if gc.return_dict_in_generate:
        return RheoGenerateOutput(sequences=sequences, accept_lengths=list(out.accept_lengths), tau=out.tau)
    return sequences


def _generation_config(model, given, kwargs: dict):
    """A copy of ``given`` (else the model's), updated with the generation arguments in ``kwargs``;
    anything else left in ``kwargs`` must be an argument generate passes along with nothing set."""
    gc = copy.deepcopy(given if given is not None else model.generation_config)
    unused = gc.update(**kwargs)
    stray = sorted(key for key, value in unused.items() if key not in MODEL_KWARGS and value is not None)
    if stray:
        raise TypeError(f"rheo generate: unknown argument(s) {stray}; its options are drafter, method, m, k, "
                        f"depth, tree_size, spec_config, generator, besides the generation config's fields")
    return gc


def _refuse_unsupported(gc, ids: torch.Tensor, assistant_model, logits_processor, stopping_criteria) -> None:
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"rheo generate decodes one sequence: input_ids must be [1, len], got {tuple(ids.shape)}; "
                         f"call generate once per prompt")
    if (gc.num_beams or 1) > 1 or (gc.num_return_sequences or 1) > 1:
        raise ValueError("rheo generate draws one sequence: set num_beams=1 and num_return_sequences=1")
    if assistant_model is not None:
        raise ValueError("rheo generate drafts with its EAGLE-3 drafter: pass drafter=..., not assistant_model")
    own = [type(p).__name__ for p in [*(logits_processor or []), *(stopping_criteria or [])]
           if not type(p).__module__.startswith("transformers.")]
    if own:
        raise ValueError(f"rheo generate cannot apply {own}: its tokens follow the target's distribution at the "
                         f"temperature; drop them (or decode with plain generate)")
    ignored = [f"{key}={getattr(gc, key)!r}" for key, neutral in NEUTRAL.items()
               if getattr(gc, key, None) not in neutral]
    if ignored and gc.do_sample:
        log.warning("rheo generate samples the target's full distribution at the temperature; not applied: %s",
                    ", ".join(ignored))


def _drafter(model, drafter):
    """A loaded drafter, or the EAGLE-3 head in folder ``drafter`` loaded for ``model`` (kept per model;
    loading leaves torch's global random stream as it was, so a seed means the same tokens)."""
    if drafter is None:
        raise ValueError("rheo generate needs drafter=: an EAGLE-3 head folder for this model "
                         "(or a drafter from rheo.models.eagle3.load_eagle3_drafter)")
    if not isinstance(drafter, (str, Path)):
        return drafter
    from rheo.models.eagle3 import load_eagle3_drafter

    cache = _DRAFTERS.setdefault(model, {})
    key = str(Path(drafter).expanduser().resolve())
    if key not in cache:
        param = next(model.parameters())
        with torch.random.fork_rng(devices=[]):  # building the head draws init weights: keep the caller's stream
            cache[key] = load_eagle3_drafter(key, model, str(param.device), param.dtype)
    return cache[key]
