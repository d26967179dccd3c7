"""Bad input: SpecConfig validation, prompts, NaN logits."""

import math

import numpy as np
import pytest
import torch
from toys import toy_pair

from baselines.autoregressive import autoregressive_generate
from rheo.decode import SpecConfig, speculative_generate
from rheo.models.toy import PrefixLM
from rheo.probs import NonFiniteLogitsError


def test_defaults_match_contract():
    cfg = SpecConfig()
    assert (cfg.method, cfg.k, cfg.m, cfg.depth, cfg.tree_size, cfg.temperature, cfg.sparse_top, cfg.proxy,
            cfg.proxy_value, cfg.verify_order) == ("rheo", 10, 1, 8, 60, 1.0, 128, "rheo", 0.25, "stochastic_first")


@pytest.mark.parametrize("kwargs,name", [
    (dict(k=0), "k"), (dict(m=-1), "m"), (dict(k=3, m=3), "m"), (dict(depth=0), "depth"),
    (dict(tree_size=0), "tree_size"), (dict(temperature=-0.1), "temperature"),
    (dict(temperature=math.nan), "temperature"), (dict(k=10, sparse_top=5), "sparse_top"),
    (dict(method="greedy"), "method"), (dict(proxy="median"), "proxy"),
    (dict(verify_order="random"), "verify_order"), (dict(k=2.5), "k"),
])
def test_invalid_settings_raise_naming_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SpecConfig(**kwargs)


def test_m_refused_by_topk():
    """Top-K has no leads: an m set away from its default means nothing and is refused by name."""
    with pytest.raises(ValueError, match=r"method='topk' does not read m=7"):
        SpecConfig(method="topk", k=3, m=7)
    assert SpecConfig.for_method(method="topk", k=3, m=7) == SpecConfig(method="topk", k=3)


def test_error_lists_choices():
    with pytest.raises(ValueError, match=r"dynamic trees \['rheo', .*'topk'\].*got 'eagle'"):
        SpecConfig(method="eagle")


def test_bad_prompts_and_lengths():
    target, drafter, _ = toy_pair(4)
    cfg = SpecConfig(k=2, depth=1, tree_size=2)
    with pytest.raises(ValueError, match="prompt"):
        speculative_generate(target, drafter, [], 3, cfg)
    with pytest.raises(ValueError, match="prompt"):
        speculative_generate(target, drafter, [9], 3, cfg)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, drafter, [1], -1, cfg)
    with pytest.raises(ValueError, match="draft vocabulary"):
        speculative_generate(target, drafter, [1], 3, SpecConfig(k=5, depth=1))
    assert speculative_generate(target, drafter, [1], 0, cfg).tokens == []


@pytest.mark.parametrize("who", ["target", "drafter"])
def test_nan_logits_raise(who):
    good = PrefixLM(lambda p: torch.zeros(4, dtype=torch.float64), 4)
    bad = PrefixLM(lambda p: torch.full((4,), math.nan), 4)
    target, drafter = (bad, good) if who == "target" else (good, bad)
    for temperature in (0.0, 1.0):
        with pytest.raises(NonFiniteLogitsError, match="NaN"):
            speculative_generate(target, drafter, [0], 4, SpecConfig(k=2, depth=2, temperature=temperature))


@pytest.mark.parametrize("method", ["ar", "topk", "rheo"])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_nan_logits_past_the_root_raise_before_a_token_is_emitted_from_them(method, temperature):
    """The verifier reads a node's NaN flag with its first draw (one host read, rheo.verify): a target
    whose rows turn NaN three tokens in still raises, wherever the walk meets them (uniform draft and
    target: every draft is accepted at T > 0, so the walk reaches deep nodes)."""
    def logits(prefix):
        return torch.full((4,), math.nan) if len(prefix) >= 3 else torch.zeros(4, dtype=torch.float64)
    target, drafter = PrefixLM(logits, 4), PrefixLM(lambda p: torch.zeros(4, dtype=torch.float64), 4)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(NonFiniteLogitsError, match="NaN"):
        if method == "ar":
            autoregressive_generate(target, [0], 6, temperature=temperature, generator=generator)
        else:
            speculative_generate(target, drafter, [0], 6, SpecConfig(method=method, k=2, depth=3, tree_size=6,
                                                                     sparse_top=None, temperature=temperature),
                                 generator=generator)


# ------------------------------------------------------------------ wrong types
@pytest.mark.parametrize("prompt, needle", [
    ("123", "prompt must be token ids .* got str"),  # would otherwise be decoded as ids 1, 2, 3
    ([1.0, 2.0], "integer token ids, got float 1.0"),  # would otherwise be truncated
    ([True, 1], "integer token ids, got bool True"),  # would otherwise be 1
    (torch.tensor([1.0, 2.0]), "integer dtype"),
    (torch.tensor([[1, 2]]), "1-D"),
    (3, "sequence of token ids, got int"),
])
def test_prompts_that_are_not_token_ids_raise_type_error(prompt, needle):
    target, drafter, _ = toy_pair(4)
    with pytest.raises(TypeError, match=needle):
        speculative_generate(target, drafter, prompt, 3, SpecConfig(k=2, depth=1, tree_size=2))


def test_integer_arrays_are_token_ids():
    target, drafter, _ = toy_pair(4)
    cfg = SpecConfig(k=2, depth=1, tree_size=2)
    runs = [speculative_generate(target, drafter, p, 5, cfg, torch.Generator().manual_seed(0)).tokens
            for p in ([1, 2], np.array([1, 2]), torch.tensor([1, 2]), [np.int64(1), np.int64(2)])]
    assert all(r == runs[0] for r in runs)


@pytest.mark.parametrize("config", [None, {"k": 2}, "rheo"])
def test_a_config_that_is_not_a_spec_config_raises_type_error(config):
    target, drafter, _ = toy_pair(4)
    with pytest.raises(TypeError, match="config must be a rheo.config.SpecConfig"):
        speculative_generate(target, drafter, [1], 3, config)


def test_max_new_tokens_of_the_wrong_type_raises_type_error():
    target, drafter, _ = toy_pair(4)
    with pytest.raises(TypeError, match="max_new_tokens must be an integer"):
        speculative_generate(target, drafter, [1], 3.0, SpecConfig(k=2, depth=1, tree_size=2))
    with pytest.raises(TypeError, match="temperature must be a number"):
        autoregressive_generate(target, [1], 3, temperature="1")


def test_integral_numbers_are_accepted_and_stored_as_int():
    cfg = SpecConfig(k=np.int64(3), m=np.int32(1), depth=np.uint8(2), tree_size=np.int64(4), sparse_top=np.int64(8),
                     temperature=np.float32(0.5))
    assert (cfg.k, cfg.m, cfg.depth, cfg.tree_size, cfg.sparse_top) == (3, 1, 2, 4, 8)
    assert all(type(v) is int for v in (cfg.k, cfg.m, cfg.depth, cfg.tree_size, cfg.sparse_top))
    assert type(cfg.temperature) is float and cfg == SpecConfig(k=3, m=1, depth=2, tree_size=4, sparse_top=8,
                                                                temperature=0.5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=3.0), r"k must be an integer >= 1, got 3.0 \(float\)"),
    (dict(k=True), r"k must be an integer >= 1, got True \(bool\)"),
    (dict(m=1.0), r"m must be an integer in \[0, k-1\] = \[0, 9\], got 1.0 \(float\)"),
    (dict(temperature=True), r"temperature must be a finite number >= 0, got True \(bool\)"),
])
def test_non_integral_values_say_what_is_wanted_and_what_was_given(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**kwargs)


def test_prompt_plus_new_tokens_beyond_the_context_is_refused():
    target, drafter, _ = toy_pair(4)
    target.context_length = 8
    with pytest.raises(ValueError, match=r"prompt \(3 tokens\) \+ max_new_tokens \(6\) exceeds .* \(8 positions\)"):
        speculative_generate(target, drafter, [1, 2, 3], 6, SpecConfig(k=2, depth=1, tree_size=2))
    with pytest.raises(ValueError, match="context length"):
        autoregressive_generate(target, [1, 2, 3], 6)
    assert len(speculative_generate(target, drafter, [1, 2, 3], 5, SpecConfig(k=2, depth=1, tree_size=2)).tokens) == 5
