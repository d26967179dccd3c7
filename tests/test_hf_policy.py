"""transformers' generation settings through rheo's custom_generate on a tiny local pair (random Llama,
word-level tokenizer, random EAGLE-3 head): each is applied exactly or refused in one line, in the
function form (custom_generate=generate) and the folder form (custom_generate="<repository>").

Applied: greedy with processors gives transformers' own greedy decode with the same processors;
sampled tokens lie in the processed support (top_k, explicit TopKLogitsWarper); stopping criteria
end where generate ends (stop_strings, which need a real tokenizer: test_hf_generate.py). The
distribution itself: tests/test_hf_exact.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from local_pair import write_local_head, write_target
from transformers import (LogitsProcessor, MaxLengthCriteria, RepetitionPenaltyLogitsProcessor, TopKLogitsWarper)

from rheo.hf_generate import generate as rheo_generate
from rheo.models.loading import load_model_pair

ROOT = Path(__file__).resolve().parents[1]
TREE = dict(k=4, depth=3, tree_size=8)
NEW = 12


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    target = write_target(tmp_path_factory.mktemp("target"))
    return load_model_pair(target_path=str(target), head_path=str(write_local_head(tmp_path_factory.mktemp("h"))))


@pytest.fixture(scope="module")
def prompt():
    return torch.tensor([[5, 17, 33, 2, 99, 140, 7]])  # [1, 7]


def rheo(pair, prompt, form="function", **kwargs):
    """New tokens of rheo's custom_generate in ``form``."""
    how = dict(custom_generate=rheo_generate) if form == "function" else dict(custom_generate=str(ROOT),
                                                                              trust_remote_code=True)
    out = pair.hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), drafter=pair.drafter, **how,
                                 **{**TREE, "max_new_tokens": NEW, **kwargs})
    return out[0, prompt.shape[1]:].tolist()


def plain(pair, prompt, **kwargs):
    out = pair.hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), **{"max_new_tokens": NEW, **kwargs})
    return out[0, prompt.shape[1]:].tolist()


def outside_top_k(pair, prompt, tokens: list[int], k: int) -> int:
    """How many of ``tokens`` are not among the target's k likeliest after their prefix."""
    seq = torch.tensor([prompt[0].tolist() + tokens])  # [1, len + new]
    logits = pair.hf_model(seq).logits[0, prompt.shape[1] - 1:-1]  # [new, V]
    top = logits.topk(k, dim=-1).indices  # [new, k]
    return sum(int(t not in row) for t, row in zip(tokens, top.tolist()))


GREEDY_PROCESSORS = [dict(repetition_penalty=1.5), dict(no_repeat_ngram_size=2), dict(suppress_tokens=[213]),
                     dict(bad_words_ids=[[213]]), dict(begin_suppress_tokens=[14]),
                     dict(sequence_bias={(213,): -20.0}), dict(min_new_tokens=6, eos_token_id=252)]


@pytest.mark.parametrize("settings", GREEDY_PROCESSORS, ids=lambda d: ",".join(d))
def test_greedy_with_processors_is_generates_own_greedy(pair, prompt, settings):
    want = plain(pair, prompt, do_sample=False, **settings)
    assert want != plain(pair, prompt, do_sample=False, **({"eos_token_id": 252} if "eos_token_id" in settings
                                                          else {}))  # the setting changes the answer
    assert rheo(pair, prompt, do_sample=False, **settings) == want


@pytest.mark.parametrize("settings", [dict(repetition_penalty=1.5), dict(min_new_tokens=6, eos_token_id=252)],
                         ids=lambda d: ",".join(d))
def test_the_folder_form_applies_them_too(pair, prompt, settings):
    assert rheo(pair, prompt, "folder", do_sample=False, **settings) == plain(pair, prompt, do_sample=False,
                                                                              **settings)


@pytest.mark.parametrize("form", ["function", "folder"])
@pytest.mark.parametrize("k", [2, 50])
def test_sampling_with_top_k_stays_in_the_top_k(pair, prompt, form, k):
    torch.manual_seed(0)
    tokens = rheo(pair, prompt, form, do_sample=True, temperature=1.5, top_k=k, max_new_tokens=24)
    assert len(tokens) == 24 and outside_top_k(pair, prompt, tokens, k) == 0


@pytest.mark.parametrize("form", ["function", "folder"])
def test_transformers_processors_and_criteria_passed_explicitly_are_applied(pair, prompt, form):
    torch.manual_seed(1)
    tokens = rheo(pair, prompt, form, do_sample=True, temperature=1.5, logits_processor=[TopKLogitsWarper(2)],
                  max_new_tokens=24)
    assert outside_top_k(pair, prompt, tokens, 2) == 0
    penalty = [RepetitionPenaltyLogitsProcessor(1.5)]
    assert rheo(pair, prompt, form, do_sample=False, logits_processor=penalty) == plain(
        pair, prompt, do_sample=False, repetition_penalty=1.5)
    two = [MaxLengthCriteria(max_length=prompt.shape[1] + 2)]
    assert rheo(pair, prompt, form, do_sample=False, stopping_criteria=two) == plain(pair, prompt, do_sample=False)[:2]


def test_max_time_is_a_stopping_check(pair, prompt):
    assert len(rheo(pair, prompt, do_sample=False, max_time=0.0)) == 1


class Mine(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


@pytest.mark.parametrize("form", ["function", "folder"])
@pytest.mark.parametrize("settings, needle", [
    (dict(logits_processor=[Mine()]), "cannot apply the logits processor(s) ['Mine']"),
    (dict(guidance_scale=2.0), "['UnbatchedClassifierFreeGuidanceLogitsProcessor']"),
    (dict(output_scores=True, return_dict_in_generate=True), "not ['output_scores']"),
    (dict(output_logits=True, return_dict_in_generate=True), "not ['output_logits']"),
    (dict(do_sample=True, num_return_sequences=2), "returns one sequence per call, got num_return_sequences=2"),
    (dict(assistant_model="the target"), "not assistant_model"),
    (dict(method="topk", spec_config="rheo"), "method='topk' disagrees with spec_config.method='rheo'"),
])
def test_what_cannot_be_applied_is_refused_in_one_line(pair, prompt, form, settings, needle):
    from rheo.config import SpecConfig

    settings = dict(settings)
    if settings.get("assistant_model") == "the target":
        settings["assistant_model"] = pair.hf_model
    if settings.get("spec_config") == "rheo":
        settings["spec_config"] = SpecConfig(method="rheo")
    with pytest.raises(ValueError) as err:
        rheo(pair, prompt, form, **settings)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("form", ["folder", "direct"])
def test_sampling_at_temperature_zero_is_refused(pair, prompt, form):
    with pytest.raises(ValueError) as err:
        if form == "direct":
            rheo_generate(pair.hf_model, input_ids=prompt, drafter=pair.drafter, do_sample=True, temperature=0.0)
        else:
            rheo(pair, prompt, form, do_sample=True, temperature=0.0)
    assert "do_sample=True with temperature=0.0" in str(err.value) and "\n" not in str(err.value)
