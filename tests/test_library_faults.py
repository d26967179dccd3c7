"""Library edge cases: the default randomness, stop ids of the wrong kind, a drafter whose
vocabulary the target cannot score. Each is refused (or fixed) before the first forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toys import random_logits_fn, toy_pair

from baselines.autoregressive import autoregressive_generate
from rheo.config import SpecConfig
from rheo.decode import eos_set, speculative_generate
from rheo.models.toy import PrefixLM

CFG = SpecConfig(method="rheo", k=3, m=1, depth=3, tree_size=6, temperature=1.0)


class _Counting(PrefixLM):
    """A toy model that counts its forwards (sessions opened)."""

    def __init__(self, vocab: int, salt: int) -> None:
        super().__init__(random_logits_fn(vocab, salt), vocab)
        self.sessions = 0

    def new_session(self):
        self.sessions += 1
        return super().new_session()


def test_without_a_generator_torch_manual_seed_drives_the_sampling():
    target, drafter, _ = toy_pair(12)
    outs = []
    for seed in range(10):
        torch.manual_seed(seed)
        outs.append(tuple(speculative_generate(target, drafter, [1, 2], 8, config=CFG).tokens))
    assert len(set(outs)) >= 5  # a fixed private seed gave 1 distinct output in 10
    torch.manual_seed(3)
    again = speculative_generate(target, drafter, [1, 2], 8, config=CFG).tokens
    assert tuple(again) == outs[3]
    torch.manual_seed(3)
    ar = [autoregressive_generate(target, [1, 2], 8, 1.0).tokens for _ in range(2)]
    torch.manual_seed(3)
    assert autoregressive_generate(target, [1, 2], 8, 1.0).tokens == ar[0] and ar[0] != ar[1]


@pytest.mark.parametrize("bad", ["01", b"\x01", True, 2.7, [1, 2.0], [True], torch.tensor([1.0]), object()])
def test_stop_ids_of_the_wrong_kind_are_a_type_error_naming_eos_token_id(bad):
    target, drafter, _ = toy_pair(12)
    with pytest.raises(TypeError, match="eos_token_id must be None, an integer token id"):
        speculative_generate(target, drafter, [1, 2], 4, config=CFG, eos_token_id=bad)
    with pytest.raises(TypeError, match="eos_token_id"):
        autoregressive_generate(target, [1, 2], 4, 1.0, eos_token_id=bad)


@pytest.mark.parametrize("good, ids", [(None, set()), (3, {3}), (np.int64(3), {3}), ([1, np.int32(4)], {1, 4}),
                                       ((5,), {5}), (torch.tensor(2), {2}), (torch.tensor([2, 7]), {2, 7})])
def test_integer_stop_ids_are_accepted(good, ids):
    assert eos_set(good) == ids


def test_a_drafter_with_a_larger_vocabulary_and_no_map_is_refused_before_the_first_forward():
    target, drafter = _Counting(10, 1), _Counting(16, 2)
    with pytest.raises(ValueError, match=r"drafter's vocabulary \(16 tokens\) is larger than the target's \(10\)"):
        speculative_generate(target, drafter, [1, 2], 4, config=CFG, generator=torch.Generator().manual_seed(0))
    assert target.sessions == drafter.sessions == 0
    smaller = _Counting(8, 2)  # a smaller one is fine: its ids are target ids
    out = speculative_generate(target, smaller, [1, 2], 4, config=CFG, generator=torch.Generator().manual_seed(0))
    assert len(out.tokens) == 4 and max(out.tokens) < 10
