"""rheo's custom_generate prepares a request the way transformers' generate does, in every form
(function, folder, a direct call), and a spec_config's temperature is the one sampled at:

* a left-padded prompt with pad_token_id and no attention_mask, forced_eos_token_id with
  max_new_tokens or max_length: greedy equals generate's own greedy decode;
* max_length not above the prompt length: generate's own one-line ValueError;
* spec_config=SpecConfig(temperature=T) without do_sample (or with do_sample=True and no
  temperature, or over a model whose generation config samples at another temperature) samples
  at T: the tokens of speculative_generate with that SpecConfig for the same seed; a temperature
  or do_sample the call sets that disagrees with it is refused in one line.

On the tiny local pair (random Llama, word-level tokenizer, random EAGLE-3 head)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from local_pair import pair, prompt  # noqa: F401 (pair, prompt: fixtures)
from transformers import GenerationConfig

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.hf_generate import generate as rheo_generate

ROOT = Path(__file__).resolve().parents[1]
FORMS = ["function", "folder", "direct"]
NEW = 8


def call(pair, ids, form: str, **kwargs):
    """The sequences [1, len + new] of rheo's custom_generate in ``form``."""
    args = {"max_new_tokens": NEW, "drafter": pair.drafter, **kwargs}
    if form == "direct":
        return rheo_generate(pair.hf_model, input_ids=ids, **args)
    how = dict(custom_generate=rheo_generate) if form == "function" else dict(custom_generate=str(ROOT),
                                                                              trust_remote_code=True)
    return pair.hf_model.generate(ids, **how, **args)


PADDED = torch.tensor([[0, 0, 0, 5, 17, 33, 2, 99, 140, 7]])  # [1, 10]: three pads (id 0) on the left
PREPARED = [  # (prompt, settings): generate infers the mask, builds processors after the generated length
    (PADDED, dict(pad_token_id=0)),
    (PADDED, dict(pad_token_id=0, repetition_penalty=1.5)),
    (None, dict(forced_eos_token_id=9, max_new_tokens=4)),
    (None, dict(forced_eos_token_id=9, max_new_tokens=None, max_length=12)),
    (PADDED, dict(pad_token_id=0, forced_eos_token_id=9, max_new_tokens=5)),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("ids, settings", PREPARED, ids=lambda v: ",".join(v) if isinstance(v, dict) else "padded" if torch.is_tensor(v) else "prompt")
def test_greedy_is_generates_own_greedy_over_the_prepared_arguments(pair, prompt, form, ids, settings):
    ids = prompt if ids is None else ids
    want = pair.hf_model.generate(ids, do_sample=False, **{"max_new_tokens": NEW, **settings})
    if "pad_token_id" in settings:  # the padding changes the answer unless the mask is inferred
        masked = pair.hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                        **{"max_new_tokens": NEW, **settings})
        assert masked.tolist() != want.tolist()
    if "forced_eos_token_id" in settings:
        assert want[0, -1] == 9 and 9 not in want[0, :-1]  # forced at the last position, nowhere else
    assert call(pair, ids, form, do_sample=False, **settings).tolist() == want.tolist()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("max_length", [5, 7])
def test_a_max_length_not_above_the_prompt_raises_as_generate_does(pair, prompt, form, max_length):
    with pytest.raises(ValueError) as want:
        pair.hf_model.generate(prompt, max_length=max_length)
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, do_sample=False, max_new_tokens=None, max_length=max_length)
    assert str(err.value) == str(want.value) and "\n" not in str(err.value)
    assert f"`max_length` is set to {max_length}" in str(err.value)


SPEC = SpecConfig.preset("rheo_auto", temperature=0.7)


def _sampled(pair, prompt, form, seed: int, **settings) -> list[int]:
    torch.manual_seed(seed)
    out = call(pair, prompt, form, spec_config=SPEC, top_k=0, **settings)  # top_k=0: the full distribution
    return out[0, prompt.shape[1]:].tolist()


def _reference(pair, prompt, seed: int) -> list[int]:
    torch.manual_seed(seed)
    return speculative_generate(pair.target, pair.drafter, prompt[0], NEW, SPEC).tokens


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings", [{}, dict(do_sample=True), dict(temperature=0.7),
                                      dict(do_sample=True, temperature=0.7), "model samples at 0.5"],
                         ids=lambda s: s if isinstance(s, str) else ",".join(s) or "nothing")
def test_a_spec_configs_temperature_is_sampled_at(pair, prompt, form, settings):
    model_config = pair.hf_model.generation_config
    if settings == "model samples at 0.5":  # the model's own defaults yield to the spec_config
        pair.hf_model.generation_config = copy.deepcopy(model_config)
        pair.hf_model.generation_config.update(do_sample=True, temperature=0.5)
        settings = {}
    try:
        answers = [_sampled(pair, prompt, form, seed, **settings) for seed in range(5)]
    finally:
        pair.hf_model.generation_config = model_config
    assert answers == [_reference(pair, prompt, seed) for seed in range(5)]
    assert len({tuple(a) for a in answers}) > 1  # sampled, not greedy


@pytest.mark.parametrize("form", FORMS)
def test_a_greedy_spec_config_decodes_greedily_over_a_sampling_model_config(pair, prompt, form):
    want = pair.hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW)
    model_config = pair.hf_model.generation_config
    pair.hf_model.generation_config = copy.deepcopy(model_config)
    pair.hf_model.generation_config.update(do_sample=True, temperature=0.5)
    try:
        torch.manual_seed(0)
        got = call(pair, prompt, form, spec_config=SpecConfig.preset("rheo_auto", temperature=0.0))
    finally:
        pair.hf_model.generation_config = model_config
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("settings, needle", [
    (dict(temperature=0.5), "temperature=0.5 disagrees with spec_config.temperature=0.7"),
    (dict(do_sample=True, temperature=0.5), "temperature=0.5 disagrees with spec_config.temperature=0.7"),
    (dict(generation_config=GenerationConfig(do_sample=True, temperature=0.5)),
     "temperature=0.5 disagrees with spec_config.temperature=0.7"),
    (dict(do_sample=False), "do_sample=False disagrees with spec_config.temperature=0.7"),
    (dict(do_sample=True, spec_config=SpecConfig.preset("rheo_auto", temperature=0.0)),
     "do_sample=True disagrees with spec_config.temperature=0.0"),
], ids=["temperature", "do_sample+temperature", "generation_config", "do_sample=False", "greedy spec"])
def test_a_temperature_that_disagrees_with_the_spec_config_is_refused_in_one_line(pair, prompt, form, settings,
                                                                                   needle):
    settings = {"spec_config": SPEC, **settings}
    with pytest.raises(ValueError) as err:
        call(pair, prompt, form, **settings)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_prepared_config_outside_generate_cannot_be_resampled_and_says_what_to_pass(pair, prompt):
    """A generation config generate prepared, handed over outside generate: its processors cannot be
    rebuilt for the spec_config's sampling, so the settings to pass are named."""
    prepared = GenerationConfig(max_new_tokens=4)
    pair.hf_model._prepare_special_tokens(prepared, False, device="cpu")
    with pytest.raises(ValueError) as err:
        rheo_generate(pair.hf_model, input_ids=prompt, generation_config=prepared, drafter=pair.drafter,
                      spec_config=SPEC)
    assert "pass do_sample=True, temperature=0.7 to generate" in str(err.value) and "\n" not in str(err.value)
