"""Same-state evaluation (rheo.same_state): the driver's tokens are untouched by the compared
methods (toy pair and the tiny random Llama behind the real HFTarget), a compared method's rows
do not depend on the others, and the recorded columns are those of rheo.expected on the state."""

from __future__ import annotations

import pytest
import torch
from toys import toy_pair

from rheo.decode import SpecConfig, speculative_generate
from rheo.same_state import draw_key, same_state_generate, stream_key

COMPARED = [SpecConfig(method="topk", k=3, depth=3, tree_size=6, sparse_top=None),
            SpecConfig(method="rheo", k=3, m=1, depth=3, tree_size=6, sparse_top=None),
            SpecConfig(method="rheo", k=3, m=0, depth=3, tree_size=6, sparse_top=None),
            SpecConfig(method="static", branching=(2, 2), sparse_top=None),
            SpecConfig(method="static", branching=(2, 2), replacement=True, sparse_top=None),
            SpecConfig(method="chain", depth=3, sparse_top=None)]


def _with_temperature(configs, t):
    return [SpecConfig(**{**c.__dict__, "temperature": t}) for c in configs]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("driver", [0, 1, 3])
def test_driver_tokens_unchanged_on_a_toy_pair(driver, temperature):
    target, drafter, _ = toy_pair(8, salt=1)
    compared = _with_temperature(COMPARED, temperature)
    drv = compared[driver]
    got = same_state_generate(target, drafter, [1, 2], 24, drv, compared, torch.Generator().manual_seed(5), key="k")
    alone = speculative_generate(target, drafter, [1, 2], 24, drv, torch.Generator().manual_seed(5),
                                 record_expected=True)
    assert got.output.tokens == alone.tokens and got.output.accept_lengths == alone.accept_lengths
    assert got.output.expected_accept_lengths == alone.expected_accept_lengths
    states = alone.target_calls
    assert [(t.state, t.method) for t in got.trees] == [(s, i) for s in range(states) for i in range(len(compared))]
    for tree in got.trees:
        cols = tree.columns
        assert 1.0 <= cols["expected_emitted"] <= 1 + cols["kept_nodes"] + 1e-12
        assert abs(cols["expected_emitted"] - 1 - sum(cols["depth_accept"])) < 1e-12
        assert all(a >= b - 1e-12 for a, b in zip(cols["depth_accept"], cols["depth_accept"][1:]))
        assert sum(cols["calib_n"]) == cols["kept_nodes"] and 0 <= cols["sampled_share"] <= 1
    if drv.method == "topk":  # a deterministic tree: the compared copy is the driver's own tree
        own = [t.columns["expected_emitted"] for t in got.trees if t.method == driver]
        assert own == pytest.approx(alone.expected_accept_lengths, abs=1e-12)


def test_a_compared_methods_rows_do_not_depend_on_the_others():
    """Common random numbers are keyed by (key, state, token path): a method's rows are the same
    whichever methods are compared beside it, and another key gives other rows."""
    target, drafter, _ = toy_pair(8, salt=1)
    driver = COMPARED[1]
    full = same_state_generate(target, drafter, [1, 2], 16, driver, COMPARED, torch.Generator().manual_seed(2), key="a")
    subset = same_state_generate(target, drafter, [1, 2], 16, driver, COMPARED[1:2], torch.Generator().manual_seed(2),
                                 key="a")
    assert [t.columns for t in full.trees if t.method == 1] == [t.columns for t in subset.trees]
    other_key = same_state_generate(target, drafter, [1, 2], 16, driver, COMPARED[1:2],
                                    torch.Generator().manual_seed(2), key="b")
    assert [t.columns for t in other_key.trees] != [t.columns for t in subset.trees]
    assert stream_key("a", 0) != stream_key("a", 1) != stream_key("b", 0)


def test_draws_are_the_keys_own_draws_scored_together():
    """``draws=3``: draw 0 is the single draw of the key, draw d that of ``draw_key(key, d)``; the
    driver is untouched; the chains differ between draws (else nothing is averaged)."""
    target, drafter, _ = toy_pair(8, salt=1)
    driver, compared = COMPARED[1], [COMPARED[5], SpecConfig(**{**COMPARED[5].__dict__, "verifier": "traversal"})]
    many = same_state_generate(target, drafter, [1, 2], 16, driver, compared, torch.Generator().manual_seed(2),
                               key="a", draws=3)
    for d in range(3):
        one = same_state_generate(target, drafter, [1, 2], 16, driver, compared, torch.Generator().manual_seed(2),
                                  key=draw_key("a", d))
        assert one.output.tokens == many.output.tokens
        got = [(t.state, t.method, t.columns["expected_emitted"]) for t in many.trees if t.draw == d]
        want = [(t.state, t.method, t.columns["expected_emitted"]) for t in one.trees]
        assert [g[:2] for g in got] == [w[:2] for w in want]
        assert [g[2] for g in got] == pytest.approx([w[2] for w in want], abs=1e-9)
    per_draw = {d: [t.columns["expected_emitted"] for t in many.trees if t.draw == d] for d in range(3)}
    assert per_draw[0] != per_draw[1] and draw_key("a", 0) == "a" != draw_key("a", 1)
    with pytest.raises(ValueError, match="draws must be a positive integer"):
        same_state_generate(target, drafter, [1, 2], 4, driver, compared, key="a", draws=0)


def test_probe_counts_rheo_samples_and_top_k_has_none():
    target, drafter, _ = toy_pair(8, salt=3)
    got = same_state_generate(target, drafter, [1, 2], 12, COMPARED[0], COMPARED[:2], torch.Generator().manual_seed(0))
    topk = [t.columns for t in got.trees if t.method == 0]
    rheo = [t.columns for t in got.trees if t.method == 1]
    assert all(sum(c["probe_drawn"]) == 0 and c["sampled_share"] == 0 for c in topk)
    assert all(c["probe_drawn"][0] == 1 and c["probe_kept"][0] <= 1 for c in rheo)
    assert all(k <= d for c in rheo for k, d in zip(c["probe_kept"], c["probe_drawn"]))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_driver_tokens_unchanged_on_the_tiny_llama(temperature):
    from eval.measure.pairs import make_tiny_pair

    pair = make_tiny_pair()
    prompt = pair.format_chat([{"role": "user", "content": "same state"}])
    compared = [SpecConfig(method="topk", k=4, depth=3, tree_size=8, temperature=temperature, sparse_top=32),
                SpecConfig(method="rheo", k=4, m=1, depth=3, tree_size=8, temperature=temperature, sparse_top=32),
                SpecConfig(method="static", branching=(3, 1), temperature=temperature, sparse_top=32)]
    driver = compared[1]
    with torch.inference_mode():
        got = same_state_generate(pair.target, pair.drafter, prompt, 20, driver, compared,
                                  torch.Generator().manual_seed(4), key="x")
        alone = speculative_generate(pair.target, pair.drafter, prompt, 20, driver, torch.Generator().manual_seed(4))
    assert got.output.tokens == alone.tokens and got.output.accept_lengths == alone.accept_lengths
    assert len(got.trees) == 3 * alone.target_calls
    topk = [t.columns["expected_emitted"] for t in got.trees if t.method == 0]
    assert all(e >= 1.0 for e in topk)


def test_hf_discard_restores_the_cache():
    from eval.measure.pairs import make_tiny_pair
    from rheo.models.base import DraftTree
    from rheo.tree import ancestor_mask

    pair = make_tiny_pair()
    parents = torch.tensor([-1, 0, 0, 1])
    tree = DraftTree(tokens=torch.tensor([5, 6, 7, 8]), parents=parents, depths=torch.tensor([0, 1, 1, 2]),
                     ancestor_mask=ancestor_mask(parents, 2))
    other = DraftTree(tokens=torch.tensor([5, 9]), parents=torch.tensor([-1, 0]), depths=torch.tensor([0, 1]),
                      ancestor_mask=ancestor_mask(torch.tensor([-1, 0]), 1))
    sess = pair.target.new_session()
    sess.prefill([1, 2, 3])
    before = sess.score_tree(tree).logits.materialize()
    sess.discard()
    sess.score_tree(other)
    sess.discard()
    assert sess.cache.get_seq_length() == 3
    assert torch.equal(sess.score_tree(tree).logits.materialize(), before)
    sess.commit(torch.tensor([0]))
    with pytest.raises(RuntimeError, match="discard without a scored tree"):
        sess.discard()
