"""Every field of ``transformers``' ``GenerationConfig``, as ``rheo.hf_generate`` treats it.

Each field of the installed ``GenerationConfig`` is in exactly one group (a test enumerates them):

* :data:`APPLIED`: read by the decoder or by ``generate``'s preparation of the prompt
  (sampling and its temperature, the length, eos, padding, the outputs it can return);
* :data:`THROUGH_PROCESSORS`: they act only through the logits processors and stopping
  criteria ``generate`` builds from them, each checked by class (``rheo.hf_policy``): applied
  exactly when the class is one rheo applies, refused otherwise (guidance, watermarks, ...);
* :data:`BY_MODE`: they choose ``transformers``' decoding mode
  (``GenerationConfig.get_generation_mode``), which must be greedy search or sampling;
* :data:`HARMLESS`: read only by modes refused here (beams, assisted decoding), by
  encoder-decoder models (the target is a decoder-only Llama), or for the speed and memory of
  ``generate``'s own forward (its cache, compilation), never for the tokens; or metadata;
* :data:`REFUSED`: refused in one line when set (:data:`INERT` lists the values that are not).

A field in none of them (one a later ``transformers`` adds) is refused in one line when its
value is neither None nor ``transformers``' own default: unknown settings are refused, never
dropped. Entries of a model's ``generation_config.json`` that are no field of the class are not
read by ``generate`` for a Llama, nor here.
"""

from __future__ import annotations

from typing import Any, Optional

from transformers import GenerationConfig
from transformers.generation.configuration_utils import GenerationMode

__all__ = ["APPLIED", "THROUGH_PROCESSORS", "BY_MODE", "HARMLESS", "REFUSED", "check_mode", "check_fields"]

APPLIED = frozenset({
    "do_sample", "temperature", "max_length", "max_new_tokens", "eos_token_id", "pad_token_id", "bos_token_id",
    "return_dict_in_generate", "num_return_sequences", "output_scores", "output_logits", "output_attentions",
    "output_hidden_states"})
THROUGH_PROCESSORS = frozenset({
    "min_length", "min_new_tokens", "max_time", "stop_strings", "top_k", "top_p", "min_p", "top_h", "typical_p",
    "epsilon_cutoff", "eta_cutoff", "repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "renormalize_logits", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "sequence_bias", "guidance_scale", "watermarking_config", "is_assistant",
    "assistant_confidence_threshold"})
BY_MODE = frozenset({
    "num_beams", "num_beam_groups", "penalty_alpha", "dola_layers", "constraints", "force_words_ids", "use_mtp",
    "prompt_lookup_num_tokens", "assistant_early_exit"})
HARMLESS = frozenset({
    "early_stopping", "length_penalty", "diversity_penalty", "low_memory",  # beam search (and contrastive) only
    "num_assistant_tokens", "num_assistant_tokens_schedule", "max_matching_ngram_size", "assistant_lookbehind",
    "target_lookbehind", "assistant_ensemble_weight", "speculation_type",  # assisted decoding only
    "decoder_start_token_id",  # encoder-decoder models only
    "use_cache", "cache_config", "max_cache_len", "compile_config", "disable_compile", "prefill_chunk_size",
    "continuous_batching_config",  # generate's own forward: speed and memory
    "transformers_version"})
#: refused when set (any value but those in INERT), with the reason; ``cache_implementation`` by value (CACHES)
REFUSED = {"token_healing": "it rewrites the prompt's last tokens", "cache_implementation": ""}
INERT: dict[str, tuple] = {"token_healing": (None, False)}
#: caches that change how generate's own forward runs, not its values (rheo's target keeps its own exact cache)
CACHES = frozenset({None, "dynamic", "offloaded", "static", "offloaded_static", "hybrid", "sliding_window",
                    "hybrid_chunked", "offloaded_hybrid", "offloaded_hybrid_chunked"})
REFUSED_CACHES = {"quantized": "a quantized cache changes the target's logits",
                  "paged": "generate hands a paged cache to continuous batching"}
KNOWN = APPLIED | THROUGH_PROCESSORS | BY_MODE | HARMLESS | set(REFUSED)
#: the modes rheo decodes
DECODED_MODES = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)
#: the fields that make each other mode, as get_generation_mode reads them
MODE_FIELDS = {
    GenerationMode.CONTRASTIVE_SEARCH: ("penalty_alpha", "top_k"),
    GenerationMode.DOLA_GENERATION: ("dola_layers",),
    GenerationMode.CONSTRAINED_BEAM_SEARCH: ("force_words_ids", "constraints"),
    GenerationMode.BEAM_SEARCH: ("num_beams",), GenerationMode.BEAM_SAMPLE: ("num_beams", "do_sample"),
    GenerationMode.GROUP_BEAM_SEARCH: ("num_beams", "num_beam_groups"),
    GenerationMode.ASSISTED_GENERATION: ("prompt_lookup_num_tokens", "assistant_early_exit", "use_mtp"),
}
BEAM_MODES = (GenerationMode.BEAM_SEARCH, GenerationMode.BEAM_SAMPLE, GenerationMode.GROUP_BEAM_SEARCH,
              GenerationMode.CONSTRAINED_BEAM_SEARCH)


def _shown(gc, names) -> str:
    return ", ".join(f"{name}={getattr(gc, name)!r}" for name in names if getattr(gc, name, None) is not None)


def check_mode(gc, assistant_model: Optional[Any] = None) -> None:
    """``transformers``' own decoding mode of ``gc``: greedy search or sampling, else one line."""
    mode = gc.get_generation_mode(assistant_model)
    if mode in DECODED_MODES:
        return
    asked = _shown(gc, MODE_FIELDS.get(mode, ())) or "its settings"
    fix = "set num_beams=1" if mode in BEAM_MODES and (gc.num_beams or 1) > 1 else "drop them"
    raise ValueError(f"rheo generate decodes greedily (do_sample=False) or by sampling (do_sample=True), not by "
                     f"transformers' {getattr(mode, 'value', mode)} ({asked}): {fix}, or decode with plain generate")


def check_fields(gc) -> None:
    """One line naming every field of ``gc`` that is refused (:data:`REFUSED`) or unknown and set."""
    try:
        fresh = type(gc)()
    except TypeError:  # a subclass that needs arguments: the installed class's fields
        fresh = GenerationConfig()
    fields = [name for name in vars(fresh) if not name.startswith("_")]
    defaults = GenerationConfig._get_default_generation_params()
    bad = []
    for name in fields:
        value = getattr(gc, name, None)
        if name == "cache_implementation":
            reason = "" if value in CACHES else REFUSED_CACHES.get(value, "a cache rheo does not know")
        elif name in REFUSED:
            reason = "" if value in INERT.get(name, (None,)) else REFUSED[name]
        elif name not in KNOWN:
            reason = "" if value is None or value == defaults.get(name) else "a setting rheo does not know"
        else:
            continue
        if reason:
            bad.append(f"{name}={value!r} ({reason})")
    if bad:
        raise ValueError(f"rheo generate cannot apply the generation setting(s) {'; '.join(bad)} exactly: drop "
                         f"them, or decode with plain generate")
