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
processors' and criteria's fields; every other field is harmless or refused
(:mod:`rheo.hf_fields`), and ``transformers``' own decoding mode must be greedy search or
sampling (contrastive search, DoLa, beams, constrained beams, assisted decoding are refused).
One sequence at a time (batch 1; left padding in the attention mask is dropped from the
target's input, kept in what processors see). Both forms are prepared by ``generate`` itself:
a call of the folder form (or a direct call) is checked, then handed to ``generate`` with this
function as ``custom_generate``, so the attention mask is inferred from ``pad_token_id``, the
processors are built for the prepared length and ``max_length`` is checked as ``generate`` does.

Options, passed to ``generate`` as keyword arguments: ``drafter`` (an EAGLE-3 head folder,
or a loaded drafter for this model), ``method`` ("rheo" or "topk"), ``m``, ``k``, ``depth``,
``tree_size`` (the tree; defaults of :class:`rheo.config.SpecConfig`), ``spec_config`` (a
whole SpecConfig instead; a ``method`` that disagrees with it is refused) and ``generator``
(a ``torch.Generator``; default torch's global one, which ``torch.manual_seed`` seeds). With ``return_dict_in_generate=True`` the output
also holds ``accept_lengths`` (tokens emitted per target call) and ``tau``.

A ``spec_config``'s temperature T is sampled at (T = 0: greedy), as if ``do_sample`` and
``temperature`` had been passed: it overrides the model's own generation config, and a
``do_sample`` or ``temperature`` the call sets (a keyword argument, or a value of its
generation config other than the model's) that disagrees with T is refused in one line.

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
from transformers import StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.hf_policy import (GenerationPlan, asked_sampling, check_request, check_target, plan_generation,
                            sampling_temperature, spec_sampling)

__all__ = ["generate", "RheoGenerateOutput", "spec_config_for"]

#: arguments of generate (its own, or model kwargs it hands a custom method) that are no generation settings
MODEL_KWARGS = ("position_ids", "use_cache", "logits_to_keep", "cache", "past_key_values", "cache_position",
                "synced_gpus", "assistant_tokenizer", "output_attentions", "output_hidden_states", "attention_mask",
                "prefix_allowed_tokens_fn", "negative_prompt_ids", "negative_prompt_attention_mask")
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

    Called by ``generate`` as a function ``custom_generate``, the request arrives prepared. Any
    other call (the folder form, a direct call) is checked, then handed to ``generate`` with this
    function as ``custom_generate``: both forms are prepared by ``generate`` itself (attention
    mask inferred from ``pad_token_id``, lengths, processors, its own refusals)."""
    tree = dict(drafter=drafter, method=method, m=m, k=k, depth=depth, tree_size=tree_size, spec_config=spec_config,
                generator=generator)
    ids = input_ids if input_ids is not None else inputs
    if ids is None:
        raise ValueError("rheo generate: no prompt: pass input_ids (e.g. **tokenizer(text, return_tensors='pt'))")
    prepared = hasattr(generation_config, "_eos_token_tensor")  # generate prepared it: a function custom_generate
    if assistant_model is not None or (prepared and _generate_argument("assistant_model") is not None):
        raise ValueError("rheo generate drafts with its EAGLE-3 drafter: pass drafter=..., not assistant_model")
    check_target(model, tokenizer)
    if not prepared:
        return _through_generate(model, ids, generation_config, streamer, logits_processor, stopping_criteria,
                                 tokenizer, tree, kwargs)
    return _decode(model, ids, generation_config, logits_processor, stopping_criteria, tree, kwargs)


def _decode(model, ids: torch.Tensor, generation_config, logits_processor, stopping_criteria, tree: dict,
            kwargs: dict):
    """A request ``generate`` prepared (``ids`` [1, len], padded as ``kwargs``' ``attention_mask``
    says), decoded by :func:`rheo.decode.speculative_generate`."""
    from rheo.models.hf_target import HFTarget
    from rheo.models.processed import ProcessedTarget

    attention_mask = kwargs.pop("attention_mask", None)
    gc = _generation_config(generation_config, kwargs)
    spec_config = tree["spec_config"]
    if spec_config is not None:
        changes = spec_sampling(spec_config, asked_sampling(model, gc, _generate_argument("kwargs") or {}))
        if any(getattr(gc, key) != value for key, value in changes.items()):  # generate prepared other sampling
            for key, value in changes.items():
                setattr(gc, key, value)
            logits_processor = _processors_for(model, gc, changes)
    plan = plan_generation(gc, ids, logits_processor, stopping_criteria)
    keep = None if attention_mask is None else attention_mask[0].bool()  # [len]
    prompt = ids[0] if keep is None else ids[0][keep]  # [len'], padding dropped
    config = _spec_config(gc, tree)
    target = HFTarget(model)
    if plan.processes:
        lead = [] if keep is None else ids[0][~keep].tolist()  # left padding, as generate's processors see it
        target = ProcessedTarget(target, plan.pre, plan.post or None, plan.temperature, lead)
    streamer = _generate_argument("streamer")  # generate keeps it from a function custom_generate (and put the prompt)
    on_tokens = None if streamer is None else (lambda new: streamer.put(torch.tensor(new, dtype=torch.long)))
    out = speculative_generate(target, _drafter(model, tree["drafter"]), prompt, plan.max_new_tokens, config,
                               generator=tree["generator"], eos_token_id=gc.eos_token_id, on_tokens=on_tokens,
                               stop_when=_stop_rule(plan, ids))
    if streamer is not None:
        streamer.end()
    new = torch.tensor([out.tokens], dtype=ids.dtype, device=ids.device)  # [1, new]
    sequences = torch.cat([ids, new], dim=1)  # [1, len + new]
    if gc.return_dict_in_generate:
        return RheoGenerateOutput(sequences=sequences, accept_lengths=list(out.accept_lengths), tau=out.tau)
    return sequences


def _through_generate(model, ids: torch.Tensor, generation_config, streamer, logits_processor, stopping_criteria,
                      tokenizer, tree: dict, kwargs: dict):
    """The folder form and direct calls: the request as ``generate`` reads it is checked (one-line
    refusals), the ``spec_config``'s sampling is folded in, ``stop_strings`` become a criterion
    (``generate`` does not hand a function ``custom_generate`` the tokenizer), then ``generate``
    prepares it and calls this function with the result."""
    gc, unused = model._prepare_generation_config(generation_config, **kwargs)
    _refuse_stray(unused)
    changes = {} if tree["spec_config"] is None else spec_sampling(tree["spec_config"],
                                                                  asked_sampling(model, gc, kwargs))
    for key, value in changes.items():
        setattr(gc, key, value)
    check_request(gc, ids)
    _spec_config(gc, tree)  # its refusals (a method that disagrees, a tree out of range) before generate runs
    criteria, overrides = StoppingCriteriaList(stopping_criteria or []), dict(changes)
    if gc.stop_strings is not None:
        if tokenizer is None:
            raise ValueError(f"stop_strings={gc.stop_strings!r} need the tokenizer: pass tokenizer=... to generate")
        criteria.append(StopStringCriteria(stop_strings=gc.stop_strings, tokenizer=tokenizer))
        overrides["stop_strings"] = None
    if changes and generation_config is not None:  # set where the call sets them (generate warns about both)
        generation_config = copy.deepcopy(generation_config)
        for key, value in changes.items():
            setattr(generation_config, key, value)
    kwargs = {**kwargs, **{key: value for key, value in overrides.items()  # None: kwargs (a config's None is unset)
                           if generation_config is None or key in kwargs or value is None}}
    return model.generate(inputs=ids, generation_config=generation_config, logits_processor=logits_processor,
                          stopping_criteria=criteria, streamer=streamer, custom_generate=generate, **tree, **kwargs)


def _spec_config(gc, tree: dict) -> SpecConfig:
    """The call's SpecConfig (:func:`spec_config_for`) from its options ``tree``."""
    return spec_config_for(gc, tree["method"], tree["spec_config"], m=tree["m"], k=tree["k"], depth=tree["depth"],
                           tree_size=tree["tree_size"])


def _processors_for(model, gc, changes: dict):
    """The logits processors ``generate`` builds for ``gc``, from the arguments it built its own
    with (read from its frame): a ``spec_config`` asked for other sampling than it prepared."""
    frame = _generate_frame()
    names = ("input_ids_length", "inputs_tensor", "prefix_allowed_tokens_fn", "logits_processor", "model_kwargs",
             "negative_prompt_ids", "negative_prompt_attention_mask")
    if frame is None or any(name not in frame.f_locals for name in names):
        asked = ", ".join(f"{key}={value!r}" for key, value in changes.items())
        raise ValueError(f"rheo generate cannot rebuild generate's logits processors for the spec_config's "
                         f"sampling: pass {asked} to generate as well")
    local = frame.f_locals
    return model._get_logits_processor(
        generation_config=gc, input_ids_seq_length=local["input_ids_length"], encoder_input_ids=local["inputs_tensor"],
        prefix_allowed_tokens_fn=local["prefix_allowed_tokens_fn"], logits_processor=local["logits_processor"],
        device=local["inputs_tensor"].device, model_kwargs=local["model_kwargs"],
        negative_prompt_ids=local["negative_prompt_ids"],
        negative_prompt_attention_mask=local["negative_prompt_attention_mask"])


def _stop_rule(plan: GenerationPlan, ids: torch.Tensor):
    """The plan's stopping criteria as the decoder's stop rule: asked on input_ids [1, len + new]."""
    if not len(plan.criteria):
        return None
    head = ids[0].tolist()

    def stop_when(new: list[int]) -> bool:
        seq = torch.tensor([head + new], dtype=torch.long, device=ids.device)  # [1, len + new]
        return bool(plan.criteria(seq, None).any())

    return stop_when


def _generate_frame():
    """The frame of the ``transformers`` ``generate`` call that called this module (None if none)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "generate" and frame.f_code.co_filename.endswith(
                str(Path("generation") / "utils.py")):
            return frame
        frame = frame.f_back
    return None


def _generate_argument(name: str):
    """An argument of the ``transformers`` ``generate`` call that called this function, which a
    function ``custom_generate`` is not handed (``assistant_model``, ``streamer``, its ``kwargs``):
    read from its frame."""
    frame = _generate_frame()
    return None if frame is None else frame.f_locals.get(name)


def _generation_config(given, kwargs: dict):
    """A copy of the generation config ``generate`` prepared, updated with the generation
    arguments in ``kwargs``; anything else left in ``kwargs`` must be an argument generate passes
    along with nothing set."""
    gc = copy.deepcopy(given)
    _refuse_stray(gc.update(**kwargs))
    return gc


def _refuse_stray(unused: dict) -> None:
    """Arguments that are neither rheo's options, generation settings nor ``generate``'s own."""
    stray = sorted(key for key, value in unused.items() if key not in MODEL_KWARGS and value is not None)
    if stray:
        raise TypeError(f"rheo generate: unknown argument(s) {stray}; its options are drafter, method, m, k, "
                        f"depth, tree_size, spec_config, generator, besides the generation config's fields")


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
