"""Refusals that name the cause, the input and the fix instead of an internal exception: generators,
compared methods, prompts without order, empty prompt files, head configs and weights, context checks."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from toys import toy_pair

from eval.prompts.suites import BenchmarkDataError, read_records
from rheo.decode import SpecConfig, check_prompt, speculative_generate
from rheo.models.config_checks import HeadConfigError
from rheo.models.eagle3_checkpoint import Eagle3LoadError, load_head
from rheo.models.eagle3_head import Eagle3Config
from rheo.same_state import same_state_generate

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "rheo" / "assets" / "eagle3_smollm2_135m_small"
GREEDY = SpecConfig(method="topk", k=3, depth=2, tree_size=4, sparse_top=None, temperature=0.0)


@pytest.mark.parametrize("generator", [42, np.random.default_rng(0)])
def test_a_generator_that_is_not_a_torch_generator_is_refused_even_greedy(generator):
    target, drafter, _ = toy_pair(8)
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator or None, got .*manual_seed"):
        speculative_generate(target, drafter, [1, 2], 4, GREEDY, generator)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        same_state_generate(target, drafter, [1, 2], 4, GREEDY, [GREEDY], generator)


def test_compared_entries_must_be_spec_configs():
    target, drafter, _ = toy_pair(8)
    with pytest.raises(TypeError, match=r"every compared entry must be a rheo.config.SpecConfig, got dict"):
        same_state_generate(target, drafter, [1, 2], 4, GREEDY, [{"method": "topk"}])


@pytest.mark.parametrize("prompt", [{1, 2, 3}, {1: 0, 2: 0}, frozenset([1])])
def test_a_prompt_without_order_is_refused(prompt):
    with pytest.raises(TypeError, match="no defined order"):
        check_prompt(prompt, 4, 8)


def test_context_messages_never_suggest_a_negative_length():
    with pytest.raises(ValueError, match=r"choose a shorter prompt") as info:
        check_prompt(list(range(8)) * 4, 4, 8, context_length=16)
    assert "-" not in str(info.value).split("choose")[1]
    with pytest.raises(ValueError, match="max_position_embeddings must be >= 1"):
        check_prompt([1, 2], 4, 8, context_length=0)


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_prompt_file_is_named(tmp_path, text):
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(BenchmarkDataError, match=rf"{path}: no records .*one JSON object per line"):
        read_records(path, "local")


BASE = json.loads((HEAD / "config.json").read_text())


@pytest.mark.parametrize("change, needle", [
    ({"num_attention_heads": 0}, r"num_attention_heads must be an integer in \[1, 1024\], got int 0"),
    ({"hidden_size": "576"}, r"hidden_size must be an integer .*got str '576'"),
    ({"vocab_size": None}, r"no vocab_size"),
    ({"draft_vocab_size": 10**11}, r"draft_vocab_size must be an integer in \[1, 4194304\]"),
    ({"max_position_embeddings": 0}, r"max_position_embeddings must be an integer in \[1,"),
    ({"rope_scaling": {"rope_type": "bogus", "factor": 2.0}}, r"rope_scaling.rope_type 'bogus' is not one of"),
])
def test_head_config_values_are_checked_before_allocation(tmp_path, change, needle):
    head = tmp_path / "head"
    shutil.copytree(HEAD, head)
    (head / "config.json").write_text(json.dumps({**BASE, **change}))
    with pytest.raises(HeadConfigError, match=f"{head / 'config.json'}: {needle}"):
        load_head(head, None)  # refused before the target is looked at
    with pytest.raises(HeadConfigError, match="must be a JSON object"):
        Eagle3Config.from_dict([])


def test_integer_head_weights_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    head = tmp_path / "head"
    shutil.copytree(HEAD, head)
    from rheo.models.eagle3_head import dequantize_int8

    state = dequantize_int8(load_file(str(head / "model.safetensors")))
    save_file({k: v.to(torch.int64) if k == "fc.weight" else v.contiguous() for k, v in state.items()},
              str(head / "model.safetensors"))
    with pytest.raises(Eagle3LoadError, match=r"weights \['fc.weight'\] are stored as torch.int64"):
        load_head(head, None)


def test_generation_runs_without_autograd_outside_inference_mode():
    target, drafter, _ = toy_pair(8)
    seen = []
    real = target.new_session

    def session():
        seen.append(torch.is_grad_enabled())
        return real()

    target.new_session = session
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        speculative_generate(target, drafter, [1, 2], 4, GREEDY, torch.Generator().manual_seed(0))
        same_state_generate(target, drafter, [1, 2], 4, GREEDY, [GREEDY], torch.Generator().manual_seed(0))
    assert seen and not any(seen)


@pytest.mark.parametrize("args, needle", [
    (["--threads", "0"], "--threads"), (["--nodes", "0,-3"], "--nodes '0,-3': give integers >= 1"),
    (["--shapes", "0x0x0"], "needs K, DEPTH and R >= 1"), (["--out", "FILE"], "is an existing file"),
])
def test_tune_tree_refuses_bad_arguments_up_front(tmp_path, args, needle, capsys):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import tune_tree

    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as info:
        tune_tree.parse([a.replace("FILE", str(tmp_path / "f")) for a in args])
    assert needle in str(info.value) + capsys.readouterr().err


def test_a_tiny_temperature_is_named_as_the_cause_not_nan_logits():
    from rheo.probs import NonFiniteLogitsError, target_probs

    with pytest.raises(NonFiniteLogitsError, match=r"temperature 1e-300 is too small .*use temperature=0"):
        target_probs(torch.tensor([1.0, 2.0, -float("inf")]), 1e-300)
    with pytest.raises(NonFiniteLogitsError, match="target model returned NaN logits"):
        target_probs(torch.tensor([1.0, float("nan")]), 1.0)


def test_an_id_beyond_64_bits_is_shown_as_an_integer_with_its_fix(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question_id": 2**70, "turns": ["hi"]}) + "\n")
    with pytest.raises(BenchmarkDataError, match=rf"{path}:1: question_id 1180591620717411303424 is outside the "
                                                 r"64-bit range .*use smaller ids"):
        read_records(path, "local")


def test_the_run_checks_a_context_length_of_zero_and_never_suggests_a_negative_length():
    from types import SimpleNamespace

    from eval.conf.compose import compose_config
    from eval.conf.validate import validate
    from eval.measure.loop import check_against_pair

    cfg = compose_config(["model=tiny_random", "max_new_tokens=4"])
    spec = validate(cfg)
    pair = SimpleNamespace(drafter=SimpleNamespace(vocab_size=1000), target=SimpleNamespace(context_length=0))
    with pytest.raises(ValueError, match="context length of 0: its config.json max_position_embeddings must be >= 1"):
        check_against_pair(cfg, spec, pair, [[1, 2]])
    pair.target.context_length = 16
    with pytest.raises(ValueError, match="shorten or leave out that prompt") as info:
        check_against_pair(cfg, spec, pair, [list(range(20))])
    assert "<= -" not in str(info.value)
