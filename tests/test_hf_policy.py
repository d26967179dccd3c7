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
from local_pair import pair, prompt, write_local_head, write_target  # noqa: F401 (pair, prompt: fixtures)
from transformers import (LogitsProcessor, MaxLengthCriteria, RepetitionPenaltyLogitsProcessor, TopKLogitsWarper)

from rheo.hf_generate import generate as rheo_generate
from rheo.models.loading import load_model_pair

ROOT = Path(__file__).resolve().parents[1]
TREE = dict(k=4, depth=3, tree_size=8)
NEW = 12


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


def _tiny_model(arch: str):
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=256)).eval()
    return MistralForCausalLM(MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                            num_attention_heads=2, num_key_value_heads=1, vocab_size=256,
                                            sliding_window=16)).eval()


@pytest.mark.parametrize("arch", ["gpt2", "mistral"])
def test_targets_the_tree_adapter_cannot_decode_are_refused_before_decoding(pair, prompt, arch):
    with pytest.raises(ValueError) as err:
        _tiny_model(arch).generate(prompt, custom_generate=rheo_generate, drafter=pair.drafter, max_new_tokens=2)
    assert f"model_type {arch!r}" in str(err.value) and "\n" not in str(err.value)


def _larger_tokenizer():
    from local_pair import make_tokenizer

    tok = make_tokenizer()
    tok.add_tokens([f"extra{i}" for i in range(4)])
    return tok


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(pair, prompt, tmp_path):
    with pytest.raises(ValueError) as err:
        rheo_generate(pair.hf_model, input_ids=prompt, drafter=pair.drafter, tokenizer=_larger_tokenizer())
    assert "the tokenizer has 260 tokens but the target's vocabulary has 256" in str(err.value)
    target = write_target(tmp_path / "t")
    _larger_tokenizer().save_pretrained(target)
    with pytest.raises(ValueError, match="the tokenizer has 260 tokens but the target's vocabulary has 256"):
        load_model_pair(target_path=str(target), head_path=str(write_local_head(tmp_path / "h")))


@pytest.mark.parametrize("eos_tokens, ids", [("</s>", [2]), ([2], [2]), (2, [2]), ([1, "</s>"], [1, 2])])
def test_eos_tokens_take_one_token_string_or_ids(pair, eos_tokens, ids):
    folders = dict(target_path=pair.entry.target, head_path=pair.entry.head)
    assert load_model_pair(**folders, eos_tokens=eos_tokens).eos_token_ids == ids


def test_other_eos_tokens_are_refused_in_one_line(pair):
    with pytest.raises(TypeError, match=r"eos_tokens must be token strings or ids .* got float 2.5"):
        load_model_pair(target_path=pair.entry.target, head_path=pair.entry.head, eos_tokens=[2.5])


def test_the_function_form_streams(pair, prompt):
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.tokens, self.ended = [], False

        def put(self, value):
            self.tokens.append(value.flatten().tolist())

        def end(self):
            self.ended = True

    streamer = Collect()
    tokens = rheo(pair, prompt, do_sample=False, streamer=streamer)
    assert streamer.ended and streamer.tokens[0] == prompt[0].tolist()
    assert sum(streamer.tokens[1:], []) == tokens and len(tokens) == NEW
