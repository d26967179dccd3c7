"""The head's draft temperature (rheo.models.scaled, ``draft_temp``): tau = 1 is the head exactly,
other values divide its logits; decoding with a tempered drafter keeps the target's distribution
(exact enumeration); in the same-state harness ``draft_temp`` keys its own rows (the head's rows
keep their hashes), every row carries it, and a bad value is refused before anything is loaded."""

from __future__ import annotations

import pytest
import torch
from eagle3_heads import drafter, tiny  # noqa: F401 (fixtures)
from test_draft_dial import _run
from toys import toy_pair

import eval.store.state_archive as same_state_archive
from eval.store import keys
from rheo.config import SpecConfig
from rheo.decode import generate_with_source
from rheo.exact import decoder_distribution, enumerate_outcomes, target_distribution, total_variation
from rheo.models.base import TreeView
from rheo.models.hf_target import HFTarget
from rheo.models.scaled import ScaledDrafter

EXACT = 1e-9
PROMPT = [5, 17, 33, 2, 99, 140, 7]
TREE = TreeView(torch.tensor([7, 11, 42]), torch.tensor([-1, 0, 0]), torch.tensor([0, 1, 1]))


def _drafts(tiny, drafter, tau=None):
    """The root's and then the depth-1 nodes' draft logits of ``drafter`` (tempered by ``tau``)."""
    model = drafter if tau is None else ScaledDrafter(drafter, tau)
    sess = model.new_session()
    sess.prefill(PROMPT, HFTarget(tiny).new_session().prefill(PROMPT[:-1]))
    return [sess.draft(TREE, torch.tensor([0])), sess.draft(TREE, torch.tensor([1, 2]))]


@torch.no_grad()
def test_tau_one_is_the_head_exactly_and_tau_divides_its_logits(tiny, drafter):
    head = _drafts(tiny, drafter)
    for got, want in zip(_drafts(tiny, drafter, 1.0), head):
        assert torch.equal(got, want)
    for got, want in zip(_drafts(tiny, drafter, 2.5), head):
        assert torch.allclose(got, want / 2.5, rtol=1e-6, atol=0)
        assert not torch.allclose(torch.softmax(got, -1), torch.softmax(want, -1), atol=1e-3)
    scaled = ScaledDrafter(drafter, 2.5)
    assert scaled.vocab_size == drafter.vocab_size and torch.equal(scaled.draft_to_target, drafter.draft_to_target)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_a_draft_temperature_that_is_not_a_positive_number_is_refused(drafter, bad):
    with pytest.raises(ValueError, match="draft_temp must be a finite number > 0"):
        ScaledDrafter(drafter, bad)


@pytest.mark.parametrize("method,m", [("topk", 0), ("rheo", 0), ("rheo", 1)])
@pytest.mark.parametrize("temperature", [0.5, 1.0])
@pytest.mark.parametrize("tau", [0.4, 2.5])
def test_decoding_with_a_tempered_drafter_keeps_the_targets_distribution(method, m, temperature, tau):
    target, base, t_fn = toy_pair(4, salt=2)
    cfg = SpecConfig.for_method(method=method, k=2, m=m, depth=2, tree_size=4, temperature=temperature, sparse_top=None)
    scaled = ScaledDrafter(base, tau)
    got = decoder_distribution(target, scaled, [1, 2], 2, cfg)
    assert abs(sum(got.values()) - 1.0) < EXACT
    assert total_variation(got, target_distribution(t_fn, [1, 2], 2, temperature)) < EXACT


def test_the_whole_loop_with_a_tempered_drafter_is_exact_and_drafts_other_trees():
    """Enumerated end to end (commits included); the tempered drafter's accepted lengths are
    distributed otherwise than the head's, so the wrapper is not a no-op on the decode path."""
    target, base, t_fn = toy_pair(4, salt=7)
    cfg = SpecConfig(method="rheo", k=2, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None)

    def outcomes(drafter):
        out = enumerate_outcomes(lambda rng: _tokens_and_lengths(generate_with_source(target, drafter, [0, 1], 2, cfg, rng)))
        tokens, lengths = {}, {}
        for (tok, acc), prob in out.items():
            tokens[tok], lengths[acc] = tokens.get(tok, 0.0) + prob, lengths.get(acc, 0.0) + prob
        return tokens, lengths

    tokens, lengths = outcomes(ScaledDrafter(base, 3.0))
    assert total_variation(tokens, target_distribution(t_fn, [0, 1], 2, 1.0)) < EXACT
    assert total_variation(lengths, outcomes(base)[1]) > 1e-3


def _tokens_and_lengths(out) -> tuple:
    return tuple(out.tokens), tuple(out.accept_lengths)


def test_the_key_holds_draft_temp_only_when_set():
    spec, ar = SpecConfig(method="rheo", m=1, temperature=0.7), SpecConfig(method="ar", temperature=0.7)
    common = dict(model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=8)
    plain = keys.method_key(spec, **common)
    tempered = keys.method_key(spec, draft_temp=1.25, **common)
    assert "draft_temp" not in plain and tempered["draft_temp"] == 1.25
    assert {k: v for k, v in tempered.items() if k != "draft_temp"} == plain
    assert keys.config_hash(plain) != keys.config_hash(tempered)
    assert "draft_temp" not in keys.method_key(ar, draft_temp=1.25, **common)  # AR drafts nothing


def test_same_state_rows_are_keyed_and_labelled_by_draft_temp(tmp_path):
    _run(tmp_path)
    _run(tmp_path, "draft_temp=1.0")
    _run(tmp_path, "draft_temp=3.0")
    rows = same_state_archive.load_rows(tmp_path / "ss")
    assert rows["driver_hash"].nunique() == 3 and rows["config_hash"].nunique() == 6
    assert rows["draft_temp"].isna().sum() == len(rows) / 3  # the head as trained: nothing in the key
    by = {t: rows[rows["draft_temp"] == t] if t else rows[rows["draft_temp"].isna()] for t in (None, 1.0, 3.0)}
    order = ["variant", "state"]
    head, one, hot = (by[t].sort_values(order)["expected_emitted"].to_numpy() for t in (None, 1.0, 3.0))
    assert head == pytest.approx(one, abs=1e-9)  # tau = 1: the same trees
    assert len(hot) != len(head) or hot != pytest.approx(head, abs=1e-6)  # tau = 3: other trees


@pytest.mark.parametrize("bad", ["0", "-0.5", "nan"])
def test_a_bad_draft_temp_is_refused_before_loading(tmp_path, bad):
    with pytest.raises(ValueError, match="draft_temp must be null"):
        _run(tmp_path, f"draft_temp={bad}")


def test_draft_temp_is_refused_for_a_realized_run():
    from eval.conf.compose import compose_config
    from eval.conf.validate import check_values

    with pytest.raises(ValueError, match="draft_temp is read by measure=same_state only"):
        check_values(compose_config(["model=tiny_random", "draft_temp=1.2"]))
