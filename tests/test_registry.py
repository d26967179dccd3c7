"""Model registry: lookup order, the one clear error, mismatch rejection, chat formats.

Weights are a tiny random Llama saved to a temporary folder with a word-level
tokenizer; the EAGLE-3 loader is replaced by a stub drafter (its own tests live
with it), so these tests check the registry's logic only.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from rheo.models import loading, locate
from rheo.models.catalog import MODELS, VICUNA_SYSTEM
from rheo.models.hf_target import HFTarget
from rheo.models.loading import ModelMismatchError, load_model_pair
from rheo.models.locate import ModelWeightsNotFoundError, resolve_paths
from rheo.models.tiny import make_tiny_llama

HUB_ENTRIES = ["llama31_8b_instruct", "vicuna_13b_v13", "r1_distill_llama_8b"]
WORDS = ["<unk>", "<s>", "</s>", "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"] + sorted(
    set((VICUNA_SYSTEM + " USER: ASSISTANT: user: assistant: hi there how are you ok").split()))
LLAMA3_STYLE_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}<|eot_id|>"
                         "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.fixture(autouse=True)
def no_local_models(tmp_path, monkeypatch):
    """Nothing found unless a test puts it there: empty hub cache, no RHEO_* paths."""
    empty = tmp_path / "hf_cache"
    empty.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    monkeypatch.delenv("RHEO_MODEL_DIR", raising=False)
    for entry in MODELS.values():
        monkeypatch.delenv(entry.env_var("target"), raising=False)
        monkeypatch.delenv(entry.env_var("head"), raising=False)


def make_tokenizer(bos: str, eos: str, template=None):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token=bos, eos_token=eos)
    tok.add_special_tokens({"additional_special_tokens": [w for w in WORDS[1:6] if w not in (bos, eos)]})
    if template:
        tok.chat_template = template
    return tok


def write_target(folder, bos="<s>", eos="</s>", template=None, hidden=64):
    make_tiny_llama(seed=0, vocab_size=256, hidden_size=hidden).save_pretrained(folder)
    make_tokenizer(bos, eos, template).save_pretrained(folder)
    return folder


def write_head(folder, hidden=64, vocab=256, draft_vocab=100):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(
        {"hidden_size": hidden, "vocab_size": vocab, "draft_vocab_size": draft_vocab}))
    save_file({"stub": torch.zeros(1)}, str(folder / "model.safetensors"))  # the loader is stubbed
    return folder


@pytest.fixture
def stub_drafter(monkeypatch):
    """Replace the EAGLE-3 loader (its id-map checks are tested with it, in test_eagle3_checkpoint.py)."""
    calls = []
    state = {"d2t": torch.arange(100) * 2}

    def load(head_dir, hf_model, device, dtype):
        calls.append((head_dir, hf_model, device, dtype))
        return SimpleNamespace(vocab_size=int(state["d2t"].numel()), draft_to_target=state["d2t"])

    monkeypatch.setattr(loading, "_load_drafter", load)
    return SimpleNamespace(calls=calls, state=state)


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError) as err:
        load_model_pair("llama2_7b")
    assert all(name in str(err.value) for name in MODELS)


@pytest.mark.parametrize("name", HUB_ENTRIES)
def test_missing_weights_give_one_clear_error(name):
    entry = MODELS[name]
    with pytest.raises(ModelWeightsNotFoundError) as err:
        load_model_pair(name)
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert err.value.entry == name and err.value.missing == ("target", "head")
    for needle in (name, entry.target, entry.head, entry.env_var("target"), entry.env_var("head"),
                   "RHEO_MODEL_DIR", "local_files_only"):
        assert needle in msg, f"{needle!r} missing from:\n{msg}"


def test_explicit_path_that_does_not_exist_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    entry = MODELS["llama31_8b_instruct"]
    models_dir = tmp_path / "models"
    write_head(models_dir / entry.name / "head")
    monkeypatch.setenv("RHEO_MODEL_DIR", str(models_dir))
    monkeypatch.setenv(entry.env_var("target"), str(tmp_path / "nowhere"))
    with pytest.raises(ModelWeightsNotFoundError) as err:
        resolve_paths(entry)
    assert err.value.missing == ("target",)  # the head was found under RHEO_MODEL_DIR
    assert str(tmp_path / "nowhere") in str(err.value) and "no such folder" in str(err.value)


def test_smollm2_head_asset_absent_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path)  # a checkout without the trained head
    with pytest.raises(ModelWeightsNotFoundError) as err:
        resolve_paths(MODELS["smollm2_135m"])
    msg = str(err.value)
    assert err.value.missing == ("head",)  # the target is the built-in GGUF loader
    assert "eagle3_smollm2_135m" in msg and "RHEO_SMOLLM2_135M_HEAD" in msg


@pytest.mark.parametrize("name, recipe", [("smollm2_135m_mid_head", "make head-mid"),
                                          ("smollm2_135m_broad_head", "make head-broad")])
def test_a_head_built_by_a_recipe_names_it_when_absent(tmp_path, monkeypatch, name, recipe):
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path)  # a fresh checkout: nothing in .cache/
    with pytest.raises(ModelWeightsNotFoundError) as err:
        resolve_paths(MODELS[name])
    msg = str(err.value)
    assert err.value.missing == ("head",) and recipe in msg and MODELS[name].env_var("head") in msg


def test_load_from_model_dir_vicuna_format(tmp_path, monkeypatch, stub_drafter):
    entry = MODELS["vicuna_13b_v13"]
    models_dir = tmp_path / "models"
    write_target(models_dir / entry.name / "target")
    write_head(models_dir / entry.name / "head")
    monkeypatch.setenv("RHEO_MODEL_DIR", str(models_dir))
    pair = load_model_pair(entry.name, dtype=torch.float32)
    assert isinstance(pair.target, HFTarget) and pair.target.vocab_size == 256
    assert stub_drafter.calls[0][0] == models_dir / entry.name / "head"
    assert pair.eos_token_ids == [WORDS.index("</s>")]
    messages = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "how are you"}]
    text = pair.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == f"<s>{VICUNA_SYSTEM} USER: hi there ASSISTANT: ok</s>USER: how are you ASSISTANT:"
    ids = pair.format_chat(messages)
    assert ids[0] == WORDS.index("<s>") and ids[-1] == WORDS.index("ASSISTANT:")
    assert pair.tokenizer.decode(ids) .replace(" ", "") == text.replace(" ", "")
    custom = pair.tokenizer.apply_chat_template([{"role": "system", "content": "Be concise."}] + messages[:1],
                                                add_generation_prompt=True, tokenize=False)
    assert custom == "<s>Be concise. USER: hi there ASSISTANT:"


def test_load_with_explicit_paths_template_format(tmp_path, stub_drafter):
    target = write_target(tmp_path / "t", bos="<|begin_of_text|>", eos="<|end_of_text|>",
                          template=LLAMA3_STYLE_TEMPLATE)
    head = write_head(tmp_path / "h")
    pair = load_model_pair("llama31_8b_instruct", target_path=str(target), head_path=str(head))
    assert pair.hf_model.dtype == torch.bfloat16  # the entry's default dtype
    assert pair.eos_token_ids == [WORDS.index("<|eot_id|>"), WORDS.index("<|end_of_text|>")]
    ids = pair.format_chat([{"role": "user", "content": "hi"}])
    assert ids == [WORDS.index(w) for w in ("<|begin_of_text|>", "user:", "hi", "<|eot_id|>", "assistant:")]


def test_template_entry_without_chat_template_is_rejected_before_loading(tmp_path, stub_drafter, monkeypatch):
    import rheo.models.loading as loading

    target = write_target(tmp_path / "t", bos="<|begin_of_text|>", eos="<|end_of_text|>", template=None)

    def no_load(*args, **kwargs):
        raise AssertionError("the target's weights were read before the chat format was checked")
    monkeypatch.setattr(loading, "_load_target", no_load)
    with pytest.raises(ValueError, match="no chat template"):
        load_model_pair("llama31_8b_instruct", dtype=torch.float32, target_path=str(target),
                        head_path=str(write_head(tmp_path / "h")))


@pytest.mark.parametrize("head_kwargs, needle", [
    (dict(hidden=128), "hidden size 128"),
    (dict(vocab=32000), "vocabulary 32000"),
    (dict(draft_vocab=300), "draft vocabulary 300"),
])
def test_head_config_mismatch_rejected_before_loading_weights(tmp_path, monkeypatch, stub_drafter,
                                                              head_kwargs, needle):
    target = write_target(tmp_path / "t")
    head = write_head(tmp_path / "h", **head_kwargs)
    monkeypatch.setattr(loading, "_load_target", lambda *a: pytest.fail("loaded weights of a mismatched pair"))
    with pytest.raises(ModelMismatchError, match=needle):
        load_model_pair("vicuna_13b_v13", target_path=str(target), head_path=str(head))


# ------------------------------------------------------------------ bad input
def test_truncated_target_weights_name_the_file_and_the_fix(tmp_path, stub_drafter):
    from rheo.models.weights import CorruptWeightsError

    target = write_target(tmp_path / "t")
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CorruptWeightsError) as err:
        load_model_pair("vicuna_13b_v13", dtype=torch.float32, target_path=str(target),
                        head_path=str(write_head(tmp_path / "h")))
    msg = str(err.value)
    assert str(weights) in msg and "re-download lmsys/vicuna-13b-v1.3" in msg and "RHEO_VICUNA_13B_V13_TARGET" in msg


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(dtype="float16"), None, None),  # a dtype name is accepted (the harness passes names)
    (dict(dtype="fp8"), ValueError, "dtype must be one of"),
    (dict(dtype=torch.int8), ValueError, "dtype must be one of"),
    (dict(dtype=16), TypeError, "dtype must be a torch.dtype"),
    (dict(device="gpu"), ValueError, "device 'gpu' is not a device name"),
])
def test_dtype_and_device_checked_before_anything_loads(tmp_path, monkeypatch, stub_drafter, kwargs, error, needle):
    loaded = []
    real = loading._load_target
    monkeypatch.setattr(loading, "_load_target", lambda *a: loaded.append(a) or real(*a))
    call = lambda: load_model_pair("vicuna_13b_v13", target_path=str(write_target(tmp_path / "t")),  # noqa: E731
                                   head_path=str(write_head(tmp_path / "h")), **kwargs)
    if error is None:
        assert call().hf_model.dtype == torch.float16
        return
    with pytest.raises(error, match=needle):
        call()
    assert not loaded


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_cuda_on_a_cpu_build_is_refused_before_loading(tmp_path, monkeypatch, stub_drafter):
    monkeypatch.setattr(loading, "_load_target", lambda *a: pytest.fail("loaded a model for an unusable device"))
    with pytest.raises(ValueError, match="device='cuda' but CUDA is not usable here"):
        load_model_pair("vicuna_13b_v13", device="cuda", target_path=str(write_target(tmp_path / "t")),
                        head_path=str(write_head(tmp_path / "h")))


def test_model_names_are_defined_once():
    """The registry is the one list: the harness schema and the model config group follow it."""
    from pathlib import Path

    from eval.conf import schema
    assert schema.PAPER_MODELS == tuple(MODELS)
    group = Path(__file__).resolve().parents[1] / "configs" / "model"
    assert {p.stem for p in group.glob("*.yaml")} == set(MODELS) | set(schema.TEST_MODELS) | {schema.LOCAL_MODEL}


def test_truncated_head_weights_are_found_before_the_target_loads(tmp_path, monkeypatch, stub_drafter):
    from rheo.models.weights import CorruptWeightsError

    head = write_head(tmp_path / "h")
    (head / "model.safetensors").write_bytes((head / "model.safetensors").read_bytes()[:20])
    monkeypatch.setattr(loading, "_load_target", lambda *a: pytest.fail("loaded the target before checking the head"))
    with pytest.raises(CorruptWeightsError, match=f"EAGLE-3 head: {head / 'model.safetensors'} is unreadable"):
        load_model_pair("vicuna_13b_v13", target_path=str(write_target(tmp_path / "t")), head_path=str(head))
