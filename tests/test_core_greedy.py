"""Layer 4 (toy): at T = 0 the output is the target's greedy decode, token for token."""

import pytest
import torch
from toys import toy_pair

from baselines.autoregressive import autoregressive_generate
from rheo.decode import SpecConfig, speculative_generate
from rheo.models.toy import PrefixLM

VOCAB = 7


def greedy_reference(t_fn, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(torch.as_tensor(t_fn(tuple(seq))).argmax()))
    return seq[len(prompt):]


def drafters(t_fn, d_fn):
    right = PrefixLM(t_fn, VOCAB)

    def wrong_fn(prefix):  # never proposes the target's argmax
        out = d_fn(prefix).clone()
        out[int(t_fn(prefix).argmax())] = -torch.inf
        return out

    return {"right": right, "wrong": PrefixLM(wrong_fn, VOCAB), "partly": PrefixLM(d_fn, VOCAB)}


@pytest.mark.parametrize("method,m", [("topk", 0), ("rheo", 0), ("rheo", 1), ("rheo", 2)])
@pytest.mark.parametrize("kind", ["right", "wrong", "partly"])
def test_greedy_equals_target_greedy(method, m, kind):
    target, _, t_fn = toy_pair(VOCAB, salt=11)
    d_fn = toy_pair(VOCAB, salt=12)[2]
    drafter = drafters(t_fn, d_fn)[kind]
    cfg = SpecConfig.for_method(method=method, k=3, m=m, depth=4, tree_size=10, temperature=0.0, sparse_top=5)
    out = speculative_generate(target, drafter, [1, 2, 3], 40, cfg, torch.Generator().manual_seed(0))
    want = greedy_reference(t_fn, [1, 2, 3], 40)
    assert out.tokens == want
    assert autoregressive_generate(target, [1, 2, 3], 40, temperature=0.0).tokens == want
    if kind == "right":
        assert out.tau >= 3.0  # the target's own chain may still be pruned now and then
    if kind == "wrong":
        assert set(out.accept_lengths) == {1}


def greedy_run(cfg: SpecConfig, kind: str, n: int = 30):
    """(the decoder's output, the target's own greedy tokens) at T = 0 on the shared toy pair, with the drafter
    that is always ``right``, always ``wrong`` or ``partly`` right: what each method's greedy-identity test checks."""
    target, _, t_fn = toy_pair(VOCAB, salt=11)
    drafter = drafters(t_fn, toy_pair(VOCAB, salt=12)[2])[kind]
    out = speculative_generate(target, drafter, [1, 2, 3], n, cfg, torch.Generator().manual_seed(0))
    return out, greedy_reference(t_fn, [1, 2, 3], n)
