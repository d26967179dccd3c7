"""The decoder on a target whose logits pass through transformers' processors (rheo.models.processed)
has exactly the distribution of sampling the processed target: every sequence of the next three
tokens is enumerated on toy pairs (vocabulary 5) and compared with ancestral sampling of the logits
that transformers' own processor list makes (temperature warper included), at TV <= 1e-12.
History-dependent processors (repetition penalty, n-gram ban, min_new_tokens) are included: each
tree node is processed with its own sequence."""

from __future__ import annotations

import pytest
import torch
from toys import toy_pair
from transformers import (LogitsProcessorList, MinNewTokensLengthLogitsProcessor, NoRepeatNGramLogitsProcessor,
                          RepetitionPenaltyLogitsProcessor, SuppressTokensLogitsProcessor, TemperatureLogitsWarper,
                          TopKLogitsWarper, TopPLogitsWarper)

from rheo.config import SpecConfig
from rheo.exact import decoder_distribution, target_distribution, total_variation
from rheo.hf_policy import _split_at_temperature
from rheo.models.processed import ProcessedTarget

PROMPT = (1, 2)
N = 3


def _cases():
    """(name, transformers' processor list at temperature T, T): as generate would build it."""
    t = 0.8
    return [
        ("top_k=2", [TemperatureLogitsWarper(t), TopKLogitsWarper(2)], t),
        ("suppress+repetition+top_p", [SuppressTokensLogitsProcessor([1]), RepetitionPenaltyLogitsProcessor(2.0),
                                       TemperatureLogitsWarper(t), TopPLogitsWarper(0.7)], t),
        ("min_new_tokens=2 (eos 0)", [MinNewTokensLengthLogitsProcessor(len(PROMPT), 2, torch.tensor([0]))], 1.0),
        ("no_repeat_ngram=2", [NoRepeatNGramLogitsProcessor(2)], 1.0),
    ]


def _reference(logits_fn, processors):
    """transformers' sampling distribution: softmax of the whole list's output (temperature inside)."""
    full = LogitsProcessorList(processors)

    def fn(prefix: tuple[int, ...]) -> torch.Tensor:
        return full(torch.tensor([prefix]), logits_fn(prefix)[None].clone())[0]
    return fn


@pytest.mark.parametrize("method", ["rheo", pytest.param("topk", marks=pytest.mark.slow)])  # Top-K: make test-slow
@pytest.mark.parametrize("name, processors, temperature",  # no_repeat_ngram: make test-slow
                         [pytest.param(*c, marks=pytest.mark.slow) if c[0].startswith("no_repeat") else c for c in _cases()],
                         ids=[c[0] for c in _cases()])
def test_decoding_a_processed_target_is_exactly_its_processed_distribution(name, processors, temperature, method):
    target, drafter, logits_fn = toy_pair(5, salt=3)
    pre, post = _split_at_temperature(LogitsProcessorList(processors), temperature)
    processed = ProcessedTarget(target, pre, post or None, temperature)
    cfg = SpecConfig.for_method(method=method, temperature=temperature, k=2, depth=2, tree_size=4, m=1, sparse_top=None)
    got = decoder_distribution(processed, drafter, PROMPT, N, cfg)
    want = target_distribution(_reference(logits_fn, processors), PROMPT, N, 1.0)
    plain = target_distribution(logits_fn, PROMPT, N, temperature)
    assert total_variation(plain, want) > 0.05  # the processors change the distribution: the test can fail
    assert total_variation(got, want) <= 1e-12
    assert abs(sum(got.values()) - 1.0) <= 1e-12


def test_greedy_on_a_processed_target_is_the_processed_argmax():
    target, drafter, logits_fn = toy_pair(5, salt=4)
    processors = [RepetitionPenaltyLogitsProcessor(3.0), SuppressTokensLogitsProcessor([0])]
    processed = ProcessedTarget(target, LogitsProcessorList(processors))
    got = decoder_distribution(processed, drafter, PROMPT, 6, SpecConfig(temperature=0.0, k=2, depth=2, tree_size=4))
    ref, seq = _reference(logits_fn, processors), PROMPT
    for _ in range(6):
        seq = seq + (int(ref(seq).argmax()),)
    assert got == {seq[len(PROMPT):]: 1.0}


def test_post_temperature_processors_need_a_temperature():
    target, _, _ = toy_pair(5)
    with pytest.raises(ValueError, match="need a temperature > 0"):
        ProcessedTarget(target, LogitsProcessorList(), LogitsProcessorList([TopKLogitsWarper(2)]), 0.0)
