"""RheoSampling (and Top-K) as a ``transformers`` custom generation method.

    from rheo.hf_generate import generate as rheo_generate
    out = model.generate(**inputs, custom_generate=rheo_generate, drafter="path/to/eagle3_head",
                         do_sample=True, temperature=0.7, max_new_tokens=128)
    # or the folder of this repository (transformers runs custom_generate/generate.py):
    out = model.generate(**inputs, custom_generate="path/to/rheo", trust_remote_code=True,
                         drafter=head, streamer=TextStreamer(tok), do_sample=True, temperature=0.7)

Every token comes from :func:`rheo.decode.speculative_generate` (the project's decoder and
verifier) on the target's logits after the request's logits processors (:mod:`rheo.hf_policy`:
``top_k``, ``top_p``, ``repetition_penalty``, ``suppress_tokens``, ``min_new_tokens``, ... and
``transformers``' own processors passed as ``logits_processor``), applied at every tree node with
that node's own sequence; so the output has the distribution of ``generate`` with the same
settings (its greedy decode at ``do_sample=False``). Stopping criteria (``max_length``,
``max_time``, ``stop_strings``, eos, or passed as ``stopping_criteria``) are asked after every
token. Whatever cannot be applied exactly is refused in one line, never dropped.

Read from the generation config: ``do_sample``, ``temperature``, ``max_new_tokens`` (else
``max_length``), ``eos_token_id`` (one id or several), ``return_dict_in_generate`` and the
processors' and criteria's fields. One sequence at a time (batch 1; left padding in the
attention mask is dropped from the target's input, kept in what processors see), one beam.

Options, passed to ``generate`` as keyword arguments: ``drafter`` (an EAGLE-3 head folder,
or a loaded drafter for this model), ``method`` ("rheo" or "topk"), ``m``, ``k``, ``depth``,
``tree_size`` (the tree; defaults of :class:`rheo.config.SpecConfig`), ``spec_config`` (a
whole SpecConfig instead; a ``method`` that disagrees with it is refused) and ``generator``
(a ``torch.Generator``; default torch's global one, which ``torch.manual_seed`` seeds). With ``return_dict_in_generate=True`` the output
also holds ``accept_lengths`` (tokens emitted per target call) and ``tau``.

Streaming: ``streamer`` gets the prompt, then each cycle's tokens. ``transformers`` 5 does not
hand a function ``custom_generate`` its ``streamer`` (nor ``assistant_model``): they are read from
the ``generate`` call that called it, so both forms stream (and refuse ``assistant_model``).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.hf_policy import GenerationPlan, check_target, plan_generation, sampling_temperature

__all__ = ["generate", "RheoGenerateOutput", "spec_config_for"]

#: arguments generate hands a custom method that carry nothing rheo needs (left as they are)
MODEL_KWARGS = ("position_ids", "use_cache", "logits_to_keep", "cache", "past_key_values", "cache_position",
                "synced_gpus", "assistant_tokenizer", "output_attentions", "output_hidden_states")
_DRAFTERS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


@dataclass
class RheoGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate``'s output (``sequences`` [1, prompt + new]) plus the per-cycle accept lengths."""

    accept_lengths: Optional[list[int]] = None
    tau: Optional[float] = None


def spec_config_for(generation_config, method: Optional[str] = None, spec_config: Optional[SpecConfig] = None,
                    **tree: Optional[int]) -> SpecConfig:
    """The SpecConfig of a call: ``spec_config`` (or the defaults) with the method, the tree sizes
    that are set and the temperature of the generation config (0 when ``do_sample`` is off;
    ``do_sample`` with a temperature <= 0 is refused, as ``generate`` refuses it)."""
    temperature = sampling_temperature(generation_config)
    base = spec_config or SpecConfig()
    if spec_config is not None and method is not None and method != spec_config.method:
        raise ValueError(f"method={method!r} disagrees with spec_config.method={spec_config.method!r}: give one of "
                         f"them (or the same method in both)")
    changes = {key: value for key, value in tree.items() if value is not None}
    return dataclasses.replace(base, method=method or (base.method if spec_config is not None else "rheo"),
                               temperature=temperature, **changes)


@torch.no_grad()
def generate(model, input_ids: Optional[torch.Tensor] = None, generation_config=None, streamer=None,
             drafter=None, method: Optional[str] = None, m: Optional[int] = None, k: Optional[int] = None,
             depth: Optional[int] = None, tree_size: Optional[int] = None, spec_config: Optional[SpecConfig] = None,
             generator: Optional[torch.Generator] = None, inputs: Optional[torch.Tensor] = None,
             logits_processor=None, stopping_criteria=None, assistant_model=None, tokenizer=None, **kwargs):
    """Decode ``input_ids`` [1, len] with the target ``model`` and an EAGLE-3 ``drafter``; see the
    module doc. Returns the sequences [1, len + new] (or a :class:`RheoGenerateOutput`).

    ``attention_mask`` [1, len] arrives in ``kwargs`` (named here, generate would pass it twice)."""
    from rheo.models.hf_target import HFTarget
    from rheo.models.processed import ProcessedTarget

    attention_mask = kwargs.pop("attention_mask", None)
    extra = {key: kwargs.pop(key, None) for key in ("prefix_allowed_tokens_fn", "negative_prompt_ids",
                                                    "negative_prompt_attention_mask")}
    prepared = hasattr(generation_config, "_eos_token_tensor")  # generate prepared it: a function custom_generate
    gc = _generation_config(model, generation_config, kwargs, prepared)
    ids = input_ids if input_ids is not None else inputs
    if ids is None:
        raise ValueError("rheo generate: no prompt: pass input_ids (e.g. **tokenizer(text, return_tensors='pt'))")
    put_prompt = True
    if prepared and streamer is None:  # generate keeps its streamer from a function custom_generate
        streamer, put_prompt = _generate_argument("streamer"), False  # (it has put the prompt itself)
    if assistant_model is not None or (prepared and _generate_argument("assistant_model") is not None):
        raise ValueError("rheo generate drafts with its EAGLE-3 drafter: pass drafter=..., not assistant_model")
    check_target(model, tokenizer)
    plan = plan_generation(model, gc, ids, attention_mask, prepared, logits_processor, stopping_criteria,
                           tokenizer, **extra)
    keep = None if attention_mask is None else attention_mask[0].bool()  # [len]
    prompt = ids[0] if keep is None else ids[0][keep]  # [len'], padding dropped
    config = spec_config_for(gc, method, spec_config, m=m, k=k, depth=depth, tree_size=tree_size)
    target = HFTarget(model)
    if plan.processes:
        lead = [] if keep is None else ids[0][~keep].tolist()  # left padding, as generate's processors see it
        target = ProcessedTarget(target, plan.pre, plan.post or None, plan.temperature, lead)
    if streamer is not None and put_prompt:
        streamer.put(ids.cpu())
    on_tokens = None if streamer is None else (lambda new: streamer.put(torch.tensor(new, dtype=torch.long)))
    out = speculative_generate(target, _drafter(model, drafter), prompt, plan.max_new_tokens, config,
                               generator=generator, eos_token_id=gc.eos_token_id, on_tokens=on_tokens,
                               stop_when=_stop_rule(plan, ids))
    if streamer is not None:
        streamer.end()
    new = torch.tensor([out.tokens], dtype=ids.dtype, device=ids.device)  # [1, new]
    sequences = torch.cat([ids, new], dim=1)  # [1, len + new]
    if gc.return_dict_in_generate:
        return RheoGenerateOutput(sequences=sequences, accept_lengths=list(out.accept_lengths), tau=out.tau)
    return sequences


def _stop_rule(plan: GenerationPlan, ids: torch.Tensor):
    """The plan's stopping criteria as the decoder's stop rule: asked on input_ids [1, len + new]."""
    if not len(plan.criteria):
        return None
    head = ids[0].tolist()

    def stop_when(new: list[int]) -> bool:
        seq = torch.tensor([head + new], dtype=torch.long, device=ids.device)  # [1, len + new]
        return bool(plan.criteria(seq, None).any())

    return stop_when


def _generate_argument(name: str):
    """An argument of the ``transformers`` ``generate`` call that called this function, which a
    function ``custom_generate`` is not handed (``assistant_model``, ``streamer``): read from its
    frame."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "generate" and frame.f_code.co_filename.endswith(
                str(Path("generation") / "utils.py")):
            return frame.f_locals.get(name)
        frame = frame.f_back
    return None


def _generation_config(model, given, kwargs: dict, prepared: bool):
    """``given`` as ``generate`` would use it: when ``generate`` prepared it, a copy; otherwise (the
    folder form, a direct call) ``given`` or the model's, with transformers' global defaults filled
    in as ``generate`` fills them (``top_k`` 50 among them). Either way updated with the generation
    arguments in ``kwargs``; anything else left in ``kwargs`` must be an argument generate passes
    along with nothing set."""
    if prepared:
        gc = copy.deepcopy(given)
        unused = gc.update(**kwargs)
    else:
        gc, unused = model._prepare_generation_config(given, **kwargs)
    stray = sorted(key for key, value in unused.items() if key not in MODEL_KWARGS and value is not None)
    if stray:
        raise TypeError(f"rheo generate: unknown argument(s) {stray}; its options are drafter, method, m, k, "
                        f"depth, tree_size, spec_config, generator, besides the generation config's fields")
    return gc


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
