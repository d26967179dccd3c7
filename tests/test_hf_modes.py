"""Which decoding modes and generation settings rheo's custom_generate takes: transformers' own mode
(GenerationConfig.get_generation_mode) must be greedy search or sampling, and every field of the
installed GenerationConfig is either applied exactly, harmless, or refused in one line; a field
rheo.hf_fields does not list is refused when it is set. Function and folder forms alike, on the
tiny local pair (random Llama, random EAGLE-3 head)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from local_pair import pair, prompt  # noqa: F401 (pair, prompt: fixtures)
from transformers import GenerationConfig
from transformers.generation.configuration_utils import GenerationMode

from rheo.hf_generate import generate as rheo_generate
from rheo.models.loading import load_model_pair

ROOT = Path(__file__).resolve().parents[1]
FORMS = ["function", "folder", "direct"]


def call(pair, prompt, form: str, **kwargs):
    """rheo's custom_generate in ``form``: through generate (function or folder), or called directly."""
    args = {"max_new_tokens": 4, "drafter": pair.drafter, "k": 4, "depth": 3, "tree_size": 8, **kwargs}
    if form == "direct":
        return rheo_generate(pair.hf_model, input_ids=prompt, **args)
    how = dict(custom_generate=rheo_generate) if form == "function" else dict(custom_generate=str(ROOT),
                                                                              trust_remote_code=True)
    return pair.hf_model.generate(prompt, **how, **args)


def test_every_generation_config_field_is_applied_harmless_or_refused():
    from rheo import hf_fields

    fields = {name for name in vars(GenerationConfig()) if not name.startswith("_")}
    listed = hf_fields.APPLIED | hf_fields.THROUGH_PROCESSORS | hf_fields.BY_MODE | hf_fields.HARMLESS | set(
        hf_fields.REFUSED)
    assert len(fields) > 60  # the installed GenerationConfig was read
    assert sorted(fields - listed) == []  # a field neither applied, harmless nor refused
    assert sorted(listed - fields) == []  # a listed name that is no field (renamed in transformers?)
    groups = [hf_fields.APPLIED, hf_fields.THROUGH_PROCESSORS, hf_fields.BY_MODE, hf_fields.HARMLESS,
              set(hf_fields.REFUSED)]
    assert sum(map(len, groups)) == len(listed)  # each field in one group only


MODES = [  # (settings, transformers' mode, what the refusal names)
    (dict(penalty_alpha=0.6, top_k=4), GenerationMode.CONTRASTIVE_SEARCH, "penalty_alpha=0.6, top_k=4"),
    (dict(dola_layers="low"), GenerationMode.DOLA_GENERATION, "dola_layers='low'"),
    (dict(force_words_ids=[[9]]), GenerationMode.CONSTRAINED_BEAM_SEARCH, "force_words_ids=[[9]]"),
    (dict(num_beams=2), GenerationMode.BEAM_SEARCH, "set num_beams=1"),
    (dict(num_beams=2, do_sample=True), GenerationMode.BEAM_SAMPLE, "num_beams=2"),
    (dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5), GenerationMode.GROUP_BEAM_SEARCH,
     "num_beams=4, num_beam_groups=2"),
    (dict(prompt_lookup_num_tokens=3), GenerationMode.ASSISTED_GENERATION, "prompt_lookup_num_tokens=3"),
    (dict(assistant_early_exit=1), GenerationMode.ASSISTED_GENERATION, "assistant_early_exit=1"),
    (dict(use_mtp=True), GenerationMode.ASSISTED_GENERATION, "use_mtp=True"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings, mode, names", MODES, ids=lambda v: v.value if isinstance(v, GenerationMode)
                         else None)
def test_decoding_modes_other_than_greedy_and_sampling_are_refused_in_one_line(pair, prompt, form, settings, mode,
                                                                                names):
    assert GenerationConfig(**settings).get_generation_mode() == mode  # what transformers would decode
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, **settings)
    assert mode.value in str(err.value) and names in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings, needle", [
    (dict(token_healing=True), "token_healing=True"),
    (dict(cache_implementation="quantized"), "cache_implementation='quantized'"),
    (dict(cache_implementation="paged"), "cache_implementation='paged'"),
])
def test_refused_fields_are_refused_in_one_line(pair, prompt, form, settings, needle):
    if form == "function" and "cache_implementation" in settings:  # generate acts on it before it calls the function
        pytest.skip("generate hands a paged cache to continuous batching, and builds a quantized one (optimum-quanto), "
                    "before it calls a custom_generate function")
    if form == "function" and "token_healing" in settings:
        needle = "token healing"  # generate heals before it calls the function: its own refusal (no tokenizer)
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, **settings)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings, needle", [
    (dict(is_assistant=True), "stopping criterion(s) ['ConfidenceCriteria']"),
    (dict(encoder_repetition_penalty=1.3), "['EncoderRepetitionPenaltyLogitsProcessor']"),
    (dict(encoder_no_repeat_ngram_size=2), "['EncoderNoRepeatNGramLogitsProcessor']"),
])
def test_fields_that_act_through_processors_rheo_cannot_apply_are_refused_by_them(pair, prompt, form, settings,
                                                                                   needle):
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, **settings)
    assert needle in str(err.value) and "\n" not in str(err.value)


class Newer(GenerationConfig):
    """A GenerationConfig with a field rheo has never seen, as a later transformers may add one."""

    def __init__(self, **kwargs):
        self.future_knob = kwargs.pop("future_knob", None)
        super().__init__(**kwargs)


@pytest.mark.parametrize("form", ["function", "folder"])
def test_a_field_rheo_does_not_know_is_refused_when_set(pair, prompt, form):
    quiet = call(pair, prompt, form, generation_config=Newer(do_sample=False), max_new_tokens=3)
    assert quiet.shape == (1, prompt.shape[1] + 3)  # unset: nothing to refuse
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, generation_config=Newer(future_knob=3), max_new_tokens=3)
    assert "future_knob=3" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings", [dict(penalty_alpha=0.6), dict(length_penalty=2.0), dict(early_stopping=True),
                                      dict(use_cache=False), dict(cache_implementation="static")],
                         ids=lambda d: ",".join(d))
def test_settings_that_change_nothing_here_are_taken(pair, prompt, form, settings):
    """Read by beam search or by the cache only (penalty_alpha: contrastive search only, not at do_sample=True)."""
    sampled = dict(do_sample=True, top_k=4)
    torch.manual_seed(0)
    want = call(pair, prompt, form, **sampled)
    torch.manual_seed(0)
    assert call(pair, prompt, form, **sampled, **settings).tolist() == want.tolist()
