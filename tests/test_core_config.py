"""Bad input: SpecConfig validation, prompts, NaN logits."""

import math

import pytest
import torch

from rheo.decode import SpecConfig, speculative_generate
from rheo.models.toy import PrefixLM
from rheo.probs import NonFiniteLogitsError
from toys import toy_pair


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


def test_m_ignored_by_topk():
    assert SpecConfig(method="topk", k=3, m=7).method == "topk"


def test_error_lists_choices():
    with pytest.raises(ValueError, match=r"\['rheo', 'topk'\]"):
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
