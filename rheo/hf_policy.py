"""What ``rheo.hf_generate`` does with each part of a ``transformers`` generation request.

The one rule: every setting is either applied exactly or refused in one line; nothing is
dropped. A setting is applied when it is a fixed function of the sequence so far:

* **logits processors** (from the generation config or passed as ``logits_processor``) whose
  output row depends on that row's own sequence only: :data:`APPLIED_PROCESSORS`. They run on
  the target's logits at every tree node with that node's own sequence
  (:class:`rheo.models.processed.ProcessedTarget`), in ``transformers``' order, so decoding
  keeps the exact distribution of ``generate`` with the same processors (its greedy decode at
  ``do_sample=False``). This covers ``top_k``, ``top_p``, ``min_p``, ``typical_p``,
  ``epsilon_cutoff``, ``eta_cutoff``, ``repetition_penalty``, ``no_repeat_ngram_size``,
  ``bad_words_ids``, ``sequence_bias``, ``suppress_tokens``, ``begin_suppress_tokens``,
  ``min_length``, ``min_new_tokens``, ``forced_bos_token_id``, ``forced_eos_token_id``,
  ``exponential_decay_length_penalty``, ``renormalize_logits``, ``remove_invalid_values`` and
  ``prefix_allowed_tokens_fn``. The draft is not processed: verification corrects any draft,
  so this costs acceptance, never exactness.
* **stopping criteria** that read the tokens or the clock: :data:`APPLIED_CRITERIA`
  (``max_length``, ``max_time``, ``stop_strings``, eos); asked after every emitted token.

Refused, each with its own line: any other processor or criterion (one of your own, guidance,
watermarks, encoder-side ones), a decoding mode other than greedy search or sampling
(``transformers``' own, ``GenerationConfig.get_generation_mode``: beams, contrastive search,
DoLa, constrained beams, assisted decoding), a generation setting :mod:`rheo.hf_fields` refuses
or does not know, several return sequences, ``output_scores`` / ``output_logits`` /
``output_attentions`` / ``output_hidden_states``, ``do_sample=True`` with a temperature <= 0
(as ``generate`` refuses it), a ``do_sample`` or ``temperature`` that disagrees with the
``spec_config``'s temperature (:func:`spec_sampling`), ``stop_strings`` without a tokenizer, a
tokenizer larger than the target's vocabulary and targets other than full-attention Llama.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

from rheo.hf_fields import check_fields, check_mode
from rheo.models.pair_check import LLAMA_TYPES

__all__ = ["APPLIED_PROCESSORS", "APPLIED_CRITERIA", "GenerationPlan", "plan_generation", "check_target",
           "sampling_temperature", "asked_sampling", "spec_sampling"]

#: transformers processors whose row depends on its own sequence only (applied at every tree node)
APPLIED_PROCESSORS = frozenset({
    "TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper", "TypicalLogitsWarper",
    "EpsilonLogitsWarper", "EtaLogitsWarper", "TopHLogitsWarper", "RepetitionPenaltyLogitsProcessor",
    "NoRepeatNGramLogitsProcessor", "NoBadWordsLogitsProcessor", "SequenceBiasLogitsProcessor",
    "SuppressTokensLogitsProcessor", "SuppressTokensAtBeginLogitsProcessor", "MinLengthLogitsProcessor",
    "MinNewTokensLengthLogitsProcessor", "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor",
    "ExponentialDecayLengthPenalty", "LogitNormalization", "InfNanRemoveLogitsProcessor",
    "PrefixConstrainedLogitsProcessor"})
#: transformers stopping criteria that read the tokens (or the clock) only
APPLIED_CRITERIA = frozenset({"MaxLengthCriteria", "MaxTimeCriteria", "StopStringCriteria", "EosTokenCriteria"})
#: generation-config outputs a tree decoder does not produce (they would come back None)
REFUSED_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
#: the settings a spec_config's temperature decides
SAMPLING = ("do_sample", "temperature")


@dataclass(frozen=True)
class GenerationPlan:
    """What one call does: sampling ``temperature`` (0 = greedy), at most ``max_new_tokens``,
    ``pre`` processors on the raw logits and ``post`` ones after the temperature (both empty:
    the target as it is), ``criteria`` asked after each token on ``input_ids`` [1, L]."""

    temperature: float
    max_new_tokens: int
    pre: LogitsProcessorList
    post: LogitsProcessorList
    criteria: StoppingCriteriaList

    @property
    def processes(self) -> bool:
        return len(self.pre) + len(self.post) > 0


def sampling_temperature(gc) -> float:
    """The temperature the verifier samples at (0 = greedy, ``do_sample=False``); ``do_sample=True``
    with a temperature <= 0 is refused, as ``generate`` refuses it (None means 1)."""
    if not gc.do_sample:
        return 0.0
    if gc.temperature is not None and float(gc.temperature) <= 0:
        raise ValueError(f"do_sample=True with temperature={gc.temperature}: the temperature must be > 0 (or "
                         f"do_sample=False for greedy decoding)")
    return 1.0 if gc.temperature is None else float(gc.temperature)


def check_request(gc, ids: torch.Tensor) -> None:
    """One-line refusals of what a single tree-decoded sequence cannot give: several sequences,
    a decoding mode other than greedy or sampling, a generation setting it cannot apply
    (:mod:`rheo.hf_fields`), a batch, a temperature <= 0 to sample at, scores or hidden states."""
    if (gc.num_return_sequences or 1) > 1:
        raise ValueError(f"rheo generate returns one sequence per call, got num_return_sequences="
                         f"{gc.num_return_sequences}: call it once per sample (torch.manual_seed between calls)")
    check_mode(gc)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"rheo generate decodes one sequence: input_ids must be [1, len], got {tuple(ids.shape)}; "
                         f"call generate once per prompt")
    check_fields(gc)
    sampling_temperature(gc)
    asked = [key for key in REFUSED_OUTPUTS if getattr(gc, key, False)]
    if asked:
        raise ValueError(f"rheo generate returns sequences (and accept_lengths, tau), not {asked}: set them False, "
                         f"or decode with plain generate to get them")


def asked_sampling(model, gc, call_kwargs: dict) -> dict:
    """``do_sample`` and ``temperature`` as the call itself sets them: keyword arguments of its
    ``generate`` call (``call_kwargs``), or values of its generation config ``gc`` that differ from
    the model's own defaults (its ``generation_config``, else transformers' global defaults). The
    model's defaults are not the call's: a ``spec_config`` overrides them."""
    defaults = GenerationConfig._get_default_generation_params()
    asked = {}
    for name in SAMPLING:
        own = getattr(getattr(model, "generation_config", None), name, None)
        default = own if own is not None else defaults.get(name)
        if call_kwargs.get(name) is not None:
            asked[name] = call_kwargs[name]
        elif getattr(gc, name, None) is not None and getattr(gc, name) != default:
            asked[name] = getattr(gc, name)
    return asked


def spec_sampling(spec_config, asked: dict) -> dict:
    """The ``do_sample`` (and ``temperature``) that a ``spec_config``'s temperature T means:
    sampling at T (T > 0) or greedy decoding (T = 0). ``asked``: the call's own settings
    (:func:`asked_sampling`); one that disagrees with T is refused in one line."""
    t = float(spec_config.temperature)
    do_sample, temperature = asked.get("do_sample"), asked.get("temperature")
    if t > 0:
        if do_sample is not None and not do_sample:
            raise ValueError(f"do_sample=False disagrees with spec_config.temperature={t} (it samples): drop "
                             f"do_sample, or give a spec_config with temperature=0 for greedy decoding")
        if temperature is not None and float(temperature) != t:
            raise ValueError(f"temperature={temperature} disagrees with spec_config.temperature={t}: give one of "
                             f"them (or the same temperature in both)")
        return {"do_sample": True, "temperature": t}
    if do_sample:
        raise ValueError(f"do_sample=True disagrees with spec_config.temperature={t} (greedy): drop do_sample, or "
                         f"give the spec_config the temperature to sample at")
    if do_sample is None and temperature is not None and float(temperature) != 0:
        raise ValueError(f"temperature={temperature} disagrees with spec_config.temperature={t} (greedy): drop the "
                         f"temperature, or give the spec_config the temperature to sample at")
    return {"do_sample": False}


def check_target(model, tokenizer=None) -> None:
    """A full-attention Llama-family target (the tree adapter's), and a tokenizer that fits it."""
    config = model.config
    kind = getattr(config, "model_type", None)
    if kind not in LLAMA_TYPES:
        raise ValueError(f"rheo generate decodes Llama-family targets (model_type {list(LLAMA_TYPES)}), got "
                         f"model_type {kind!r} ({type(model).__name__}): use plain generate for this model")
    if getattr(config, "sliding_window", None) or getattr(config, "layer_types", None) and any(
            t != "full_attention" for t in config.layer_types):
        raise ValueError(f"rheo generate needs full attention in every layer; this {kind} target uses sliding-window "
                         f"attention: use plain generate for this model")
    if tokenizer is not None and len(tokenizer) > int(config.vocab_size):
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the target's vocabulary has "
                         f"{config.vocab_size}: pass the target's own tokenizer")


def plan_generation(gc, ids: torch.Tensor, logits_processor, stopping_criteria) -> GenerationPlan:
    """The plan of a call on ``ids`` [1, len] (with padding) that ``generate`` prepared: ``gc``, the
    full ``logits_processor`` and ``stopping_criteria`` lists are those of its preparation."""
    check_request(gc, ids)
    temperature = sampling_temperature(gc)
    processors = LogitsProcessorList(logits_processor or [])
    criteria = StoppingCriteriaList(stopping_criteria or [])
    _refuse_unknown(processors, APPLIED_PROCESSORS, "logits processor")
    _refuse_unknown(criteria, APPLIED_CRITERIA, "stopping criterion")
    pre, post = _split_at_temperature(processors, temperature)
    max_new = gc.max_new_tokens if gc.max_new_tokens is not None else (gc.max_length or 20) - ids.shape[1]
    return GenerationPlan(temperature, max(0, int(max_new)), pre, post, criteria)


def _refuse_unknown(items, applied: frozenset, what: str) -> None:
    """transformers' own classes (exact type, not a subclass) in ``applied``; anything else is refused."""
    bad = [type(p).__name__ for p in items
           if not (type(p).__module__.startswith("transformers.") and type(p).__name__ in applied)]
    if bad:
        raise ValueError(f"rheo generate cannot apply the {what}(s) {bad} exactly on a draft tree (it applies "
                         f"{sorted(applied)}): drop them, or decode with plain generate")


def _split_at_temperature(processors: LogitsProcessorList, temperature: float):
    """(before, after) the temperature warper of ``temperature``, which the verifier applies itself."""
    for i, p in enumerate(processors):
        if type(p).__name__ == "TemperatureLogitsWarper" and temperature > 0 and float(p.temperature) == temperature:
            return LogitsProcessorList(processors[:i]), LogitsProcessorList(processors[i + 1:])
    return LogitsProcessorList(processors), LogitsProcessorList()
