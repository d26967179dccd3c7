"""EAGLE-3 drafting, against a tiny random Llama (CPU, fast).

A random head is written in exactly the official checkpoint layout (tests/eagle3_heads.py)
and loaded against make_tiny_llama; loading and refusing checkpoints: test_eagle3_checkpoint.py.
Numerical comparisons use atol 1e-4 on float32 logits (the batched and the
reference computation differ only in summation order).
"""

from __future__ import annotations

import pytest
import torch
from eagle3_heads import ATOL, DRAFT_VOCAB, VOCAB, H, drafter, official_state, tiny, write_head  # noqa: F401 (fixtures)
from toys import assert_greedy_match

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models.base import TreeView
from rheo.models.eagle3_head import attend
from rheo.models.hf_target import HFTarget


def reference_chain_logits(drafter, sess, chain_tokens):
    """Plain re-computation of the draft logits after a chain of drafted tokens, one at a time."""
    head = drafter.head
    keys, values, hidden = sess.keys, sess.values, sess.root_hidden[None, None]
    s = sess.committed_len
    for i, tok in enumerate(chain_tokens, start=1):
        emb = drafter.embed_weight[torch.tensor([[tok]])]
        q, k, v = head.qkv(emb, hidden, torch.tensor([[s - 1 + i]]))
        keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        hidden = head.finish(attend(q, keys, values, None), hidden)
    return head.logits(hidden[0, 0]).float()


@torch.no_grad()
def test_batched_tree_draft_equals_each_branch_alone(tiny, drafter):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99, 140, 7]
    feats = target.new_session().prefill(prompt[:-1])
    sess = drafter.new_session()
    sess.prefill(prompt, feats)
    #          node: 0   1   2   3   4   5   6   7   8
    parents = [-1, 0, 0, 0, 1, 2, 2, 5, 4]
    depths = [0, 1, 1, 1, 2, 2, 2, 3, 3]
    tokens = [prompt[-1], 11, 42, 200, 3, 64, 65, 128, 250]
    tree = TreeView(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))
    layers = [[0], [1, 2, 3], [4, 5, 6], [7, 8]]
    got = {}
    for layer in layers:
        logits = sess.draft(tree, torch.tensor(layer))
        assert logits.shape == (len(layer), DRAFT_VOCAB)
        got.update({n: logits[i] for i, n in enumerate(layer)})
    assert torch.allclose(got[0], sess.root_logits)
    for node in range(1, len(tokens)):
        chain, n = [], node
        while n > 0:
            chain.insert(0, tokens[n])
            n = parents[n]
        ref = reference_chain_logits(drafter, sess, chain)
        assert torch.allclose(got[node], ref, atol=ATOL), node


@torch.no_grad()
def test_commit_drops_tree_state_and_matches_fresh_prefill(tiny, drafter):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99]
    accepted = [11, 42, 7]
    t_sess = target.new_session()
    sess = drafter.new_session()
    sess.prefill(prompt, t_sess.prefill(prompt[:-1]))
    tree = TreeView(torch.tensor([prompt[-1], 11, 50]), torch.tensor([-1, 0, 1]), torch.tensor([0, 1, 2]))
    for layer in ([0], [1], [2]):
        sess.draft(tree, torch.tensor(layer))
    full = prompt + accepted
    feats_full = target.new_session().prefill(full[:-1])
    sess.commit(torch.tensor(accepted), feats_full[len(prompt) - 1:])
    fresh = drafter.new_session()
    fresh.prefill(full, feats_full)
    assert sess.committed_len == fresh.committed_len == len(full) - 1
    assert torch.allclose(sess.root_logits, fresh.root_logits, atol=ATOL)
    assert torch.allclose(sess.keys, fresh.keys, atol=ATOL)


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_greedy_speculative_equals_hf_generate(tiny, drafter, method):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99, 140, 7]
    n_new = 24
    ref = tiny.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                        max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new)[0, len(prompt):].tolist()
    cfg = SpecConfig.for_method(method=method, k=4, m=1, depth=4, tree_size=10, temperature=0.0, sparse_top=None)
    out = speculative_generate(target, drafter, prompt, n_new, config=cfg, generator=torch.Generator().manual_seed(0))
    assert_greedy_match(out.tokens, ref, tiny, prompt)
    assert sum(out.accept_lengths) == n_new


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_sampling_runs_and_is_seeded(tiny, drafter, method):
    target = HFTarget(tiny)
    cfg = SpecConfig.for_method(method=method, k=4, m=1, depth=4, tree_size=10, temperature=1.0, sparse_top=32)
    runs = [speculative_generate(target, drafter, [5, 17, 33], 20, config=cfg,
                                 generator=torch.Generator().manual_seed(3)).tokens for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 20
    assert all(0 <= t < VOCAB for t in runs[0])


@torch.no_grad()
def test_training_time_test_matches_tree_drafting(tiny, drafter):
    """Step k of the unrolled training forward at pair j == drafting x_{j+1} at depth k-1 along the true path."""
    from rheo.training.eagle3_train import ttt_steps

    target = HFTarget(tiny)
    x = [5, 17, 33, 2, 99, 140, 7, 61, 200, 9]
    feats = target.new_session().prefill(x[:-1])  # [N-1, 3H]: f_j for pairs j = 0..N-2
    embeds = drafter.embed_weight[torch.tensor(x[1:])][None]
    steps = 3
    train_logits = list(ttt_steps(drafter.head, feats[None], embeds, steps))
    for k in range(1, steps + 1):
        for j in range(k - 1, len(x) - 1):
            r = j - (k - 1)  # the root's pair
            sess = drafter.new_session()
            sess.prefill(x[: r + 2], feats[: r + 1])
            chain = x[r + 2 : j + 2]  # drafted tokens at depths 1..k-1
            n = len(chain) + 1
            tree = TreeView(torch.tensor(x[r + 1 : j + 2]), torch.arange(-1, n - 1), torch.arange(n))
            for depth in range(n):
                logits = sess.draft(tree, torch.tensor([depth]))
            assert torch.allclose(train_logits[k - 1][0, j], logits[0], atol=ATOL), (k, j)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fast_draft_step_has_the_reference_steps_bits(drafter, dtype):
    """qkv_at (one position, rotation from a table, norms in one pass, q and k rotated together) gives
    exactly the bits of Eagle3Head.qkv at that position: a faster draft step draws the same trees."""
    import copy

    from rheo.models.eagle3_fast import qkv_at, rope_table

    head = copy.deepcopy(drafter.head).to(dtype)
    gen = torch.Generator().manual_seed(3)
    f = 5
    embeds = torch.randn(f, 1, H, generator=gen).to(dtype)
    hidden = (3 * torch.randn(f, 1, H, generator=gen)).to(dtype)
    table = rope_table(head, 64, hidden)
    for position in (0, 1, 17, 63):
        want = head.qkv(embeds, hidden, torch.full((f, 1), position))
        got = qkv_at(head, embeds, hidden, table.row(position))
        for name, w, g in zip("qkv", want, got):
            assert w.shape == g.shape and torch.equal(w, g), f"{name} differs at position {position} ({dtype})"
