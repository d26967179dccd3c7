"""Adaptive Rheo (adapt="root", rheo_adaptive; adapt="level", rheo_level): lossless by exact enumeration of the whole loop, history
included; the rule's evidence by hand; a twin whose choice sees the drawn token is caught."""

import dataclasses

import pytest
import torch
from toys import constant_pair, random_logits_fn

from rheo import adaptive
from rheo.candidates import select_rheo
from rheo.config import SpecConfig
from rheo.decode import generate_with_source
from rheo.exact import cycle_distribution, decoder_distribution, enumerate_outcomes, target_distribution, total_variation
from rheo.methods import get_method
from rheo.methods.registry import register, unregister
from rheo.models.toy import PrefixLM
from rheo.random import TorchRandom

EXACT = 1e-9


def _pair(vocab: int, salt: int, closeness: float):
    """(target, drafter, target_logits_fn): the drafter's logits are the target's plus noise of scale
    1 - closeness (closeness 1: the target itself, so the sampled child is always accepted)."""
    t_fn = random_logits_fn(vocab, 2 * salt + 1)
    noise = random_logits_fn(vocab, 2 * salt + 2)

    def d_fn(prefix):
        return t_fn(prefix) + (1.0 - closeness) * noise(prefix)

    return PrefixLM(t_fn, vocab), PrefixLM(d_fn, vocab), t_fn


def _whole_loop(cfg: SpecConfig, vocab: int, salt: int, closeness: float, n_tokens: int, seen: set,
                monkeypatch) -> float:
    target, drafter, t_fn = _pair(vocab, salt, closeness)
    config = adaptive.CyclePolicy.config

    def spy(self):  # which arms the enumeration visits
        cfg_cycle = config(self)
        seen.add(cfg_cycle.m)
        return cfg_cycle

    monkeypatch.setattr(adaptive.CyclePolicy, "config", spy)
    got = enumerate_outcomes(lambda rng: tuple(generate_with_source(target, drafter, [0, 1], n_tokens, cfg, rng).tokens))
    want = target_distribution(t_fn, [0, 1], n_tokens, cfg.temperature)
    assert abs(sum(got.values()) - 1.0) < EXACT
    return total_variation(got, want)


RULES = ("root", "level")


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("temperature,closeness", [(0.5, 1.0), (1.0, 0.6)])
def test_adaptive_rule_is_lossless_over_the_whole_loop(temperature, closeness, rule, monkeypatch):
    """Every random choice of three tokens' decoding enumerated, the rule's history with them."""
    cfg = SpecConfig(k=2, m=1, depth=1, tree_size=2, temperature=temperature, sparse_top=None, proxy="tempered",
                     adapt=rule)
    seen: set = set()  # depth 1: a cycle emits at most two tokens, so three take two cycles or more
    assert _whole_loop(cfg, vocab=3, salt=4, closeness=closeness, n_tokens=3, seen=seen,
                       monkeypatch=monkeypatch) < EXACT
    assert 1 in seen  # the first cycle has no history: the configured arm
    if closeness == 1.0:
        assert 0 in seen  # the drafter is the target: its sample is always accepted, so m=0 is chosen


@pytest.mark.parametrize("rule,closeness", [("root", 0.7), ("level", 0.75)])
def test_both_arms_are_enumerated_in_one_request(rule, closeness, monkeypatch):
    """A drafter right at some prefixes and wrong at others: the rule switches inside the enumeration,
    and the output is still the target's."""
    seen: set = set()
    cfg = SpecConfig(k=2, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None, adapt=rule)
    assert _whole_loop(cfg, vocab=4, salt=9, closeness=closeness, n_tokens=3, seen=seen,
                       monkeypatch=monkeypatch) < EXACT
    assert seen == {0, 1}


@pytest.mark.parametrize("rule", RULES)
def test_greedy_adaptive_is_the_targets_greedy_decode(rule):
    target, drafter, t_fn = _pair(6, salt=2, closeness=0.5)
    cfg = SpecConfig(k=3, m=1, depth=3, tree_size=6, temperature=0.0, sparse_top=None, proxy="tempered",
                     adapt=rule)
    got = enumerate_outcomes(lambda rng: tuple(generate_with_source(target, drafter, [0, 1], 6, cfg, rng).tokens))
    want = target_distribution(t_fn, [0, 1], 6, 0.0)
    assert len(got) == 1 and total_variation(got, want) < EXACT
    out = generate_with_source(target, drafter, [0, 1], 6, cfg, TorchRandom(torch.Generator().manual_seed(0)))
    assert out.cycle_m and len(out.cycle_m) == out.target_calls and out.cycle_m[0] == 1
    if rule == "root":
        assert set(out.cycle_m) == {1}  # T = 0: a - b = 0


def test_root_evidence_by_hand():
    """a = sum_x min(p_T, q_T), b = p_T(x1): the draft's top token x1 is token 0."""
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    cfg = SpecConfig(k=3, m=1, temperature=1.0, sparse_top=None, adapt="root")
    a = float(torch.minimum(p, q).sum())  # 0.2 + 0.2 + 0.2
    assert float(adaptive.root_evidence(q.log(), p.log(), cfg)) == pytest.approx(a - 0.2, abs=1e-12)
    cold = dataclasses.replace(cfg, temperature=0.5)
    p_t, q_t = torch.softmax(p.log() / 0.5, -1), torch.softmax(q.log() / 0.5, -1)
    want = float(torch.minimum(p_t, q_t).sum() - p_t[0])
    assert float(adaptive.root_evidence(q.log(), p.log(), cold)) == pytest.approx(want, abs=1e-12)
    greedy = dataclasses.replace(cfg, temperature=0.0)  # argmax match on both sides: 0 either way
    assert float(adaptive.root_evidence(q.log(), p.log(), greedy)) == 0.0
    assert float(adaptive.root_evidence(q.log(), q.log(), greedy)) == 0.0
    assert adaptive.root_terms(q.log(), p.log(), cfg).tolist() == pytest.approx([a - 0.2, a], abs=1e-12)
    assert float(adaptive.root_terms(q.log(), q.log(), cfg)[1]) == pytest.approx(1.0, abs=1e-12)  # q = p


def test_policy_switches_on_the_sign_of_the_evidence():
    cfg = SpecConfig(m=1, proxy="tempered", adapt="root")
    policy = adaptive.CyclePolicy(cfg)
    first = policy.config()
    assert (first.m, first.proxy, first.adapt) == (1, "tempered", "none")
    same = torch.tensor([3.0, 1.0, 0.0, -1.0])
    policy.observe(same, same)  # the drafter is the target: a = 1 > b
    second = policy.config()
    assert (second.m, second.proxy, second.adapt) == (0, "rheo", "none")
    assert policy.chosen == [1, 0] and policy.observed == 1 and policy.accepts == [pytest.approx(1.0)]
    # a flat drafter whose top token is the target's near-certain one: its sample is often rejected
    policy.observe(torch.tensor([0.1, 0.0, 0.0, 0.0]), torch.tensor([3.0, -3.0, -3.0, -3.0]))
    assert policy.margin < 0 and policy.config().m == 1


def test_the_level_rule_switches_on_the_mean_acceptance_of_a_sampled_child():
    cfg = SpecConfig(m=1, proxy="tempered", adapt="level")
    policy = adaptive.CyclePolicy(cfg)
    assert policy.config().m == 1  # nothing observed: the configured setting
    same = torch.tensor([3.0, 1.0, 0.0, -1.0])
    policy.observe(same, same)  # a = 1
    assert policy.config().m == 0
    # q uniform over four tokens, p nearly one-hot on the draft's own top token: a = 0.25, a - b < 0
    flat, sharp = torch.zeros(4), torch.tensor([9.0, -9.0, -9.0, -9.0])
    policy.observe(flat, sharp)  # mean (1 + 0.25) / 2 = 0.625 < LEVEL
    assert policy.accepts[-1] == pytest.approx(0.25, abs=1e-3) and adaptive.LEVEL > 0.63
    assert policy.config().m == 1 and policy.margin < 0
    policy.observe(same, same)  # mean 0.75
    assert policy.config().m == 0 and policy.chosen == [1, 0, 1, 0]
    root = adaptive.CyclePolicy(dataclasses.replace(cfg, adapt="root"))  # the same evidence under "root"
    for d, t in ((same, same), (flat, sharp), (flat, sharp)):
        root.observe(d, t)
    assert root.config().m == 1 and root.margin < 0


@pytest.mark.parametrize("rule", RULES)
def test_adapt_is_refused_where_it_means_nothing(rule):
    with pytest.raises(ValueError, match="adapt must be one of"):
        SpecConfig(adapt="roots")
    with pytest.raises(ValueError, match="give m >= 1"):
        SpecConfig(m=0, adapt=rule)
    with pytest.raises(ValueError, match="enumerate the whole loop"):
        target, drafter = constant_pair(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
        cycle_distribution(target, drafter, [0], SpecConfig(k=2, depth=1, tree_size=2, adapt=rule))


def test_adapt_is_keyed_only_when_set():
    from eval.store.keys import method_key

    run = dict(model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=8)
    plain = SpecConfig(m=1, proxy="tempered")
    assert "adapt" not in method_key(plain, **run)
    assert method_key(dataclasses.replace(plain, adapt="root"), **run)["adapt"] == "root"
    assert get_method("rheo").variant(dataclasses.replace(plain, adapt="root")) == "rheo_adaptive"  # the presets
    assert get_method("rheo").variant(dataclasses.replace(plain, adapt="level")) == "rheo_level"
    assert get_method("rheo").variant(dataclasses.replace(plain, m=2, adapt="root")) == "rheo m=2 proxy=tempered adapt=root"


# ------------------------------------------------------------------ a lossy twin is caught
class _Replay:
    """A RandomSource that returns fixed categorical picks (the draw already made)."""

    def __init__(self, picks: torch.Tensor) -> None:
        self.picks = picks

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return self.picks


def _peeking_candidates(dist, cfg, rng, layer):
    """The choice sees the drawn token: draw m=0's sample; where it is the draft's top token keep m=0's
    children, elsewhere rebuild the node as m=1 around the same draw."""
    m0 = select_rheo(dist, cfg.k, 0, cfg.temperature, rng, "rheo")
    pick = torch.argmax((dist.ids == m0.tokens[:, :1]).long(), dim=1)  # [n] slot of the draw
    m1 = select_rheo(dist, cfg.k, 1, cfg.temperature, _Replay((pick - 1).clamp(min=0)), "rheo")
    top = (pick == 0)[:, None]
    pick_rows = lambda a, b: torch.where(top if a.dim() == 2 else top[:, 0], a, b)  # noqa: E731
    return dataclasses.replace(m0, tokens=pick_rows(m0.tokens, m1.tokens), log_score=pick_rows(m0.log_score, m1.log_score),
                               kind=pick_rows(m0.kind, m1.kind), resid_probs=pick_rows(m0.resid_probs, m1.resid_probs),
                               sample_prob=pick_rows(m0.sample_prob, m1.sample_prob),
                               slot_prob=pick_rows(m0.slot_prob, m1.slot_prob))


@pytest.mark.parametrize("rule", RULES)
def test_a_twin_whose_choice_sees_the_drawn_token_is_caught(rule):
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    target, drafter = constant_pair(p.log(), q.log())
    name = register(dataclasses.replace(get_method("rheo"), name="peeking_rheo", candidates=_peeking_candidates),
                    replace=True).name
    try:
        cfg = SpecConfig.for_method(method=name, k=2, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None)
        got = decoder_distribution(target, drafter, [0], 1, cfg)
    finally:
        unregister(name)
    want = {(i,): float(v) for i, v in enumerate(p)}
    assert total_variation(got, want) > 1e-2
    honest = SpecConfig(k=2, m=1, depth=1, tree_size=2, temperature=1.0, sparse_top=None, adapt=rule)
    got = enumerate_outcomes(lambda rng: tuple(generate_with_source(target, drafter, [0], 1, honest, rng).tokens))
    assert total_variation(got, want) < EXACT


# ------------------------------------------------------------------ same states
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("closeness", [1.0, 0.3])
def test_at_each_state_the_adaptive_tree_is_the_chosen_arms_tree(closeness, rule, monkeypatch):
    """Same-state rows: the policy sees the driver's states in order, and with common random numbers its
    tree at a state is the tree of the arm it chose there (the same expected tokens, to the last bit)."""
    from rheo.same_state import same_state_generate

    target, drafter, _ = _pair(8, salt=3, closeness=closeness)
    shape = dict(k=3, depth=3, tree_size=6, sparse_top=None, temperature=0.7)
    arms = {1: SpecConfig(m=1, proxy="tempered", **shape), 0: SpecConfig(m=0, **shape)}
    adaptive_cfg = SpecConfig(m=1, proxy="tempered", adapt=rule, **shape)
    from rheo import same_state

    policies: list = []
    make = same_state.cycle_policy
    monkeypatch.setattr(same_state, "cycle_policy", lambda cfg: policies.append(make(cfg)) or policies[-1])
    got = same_state_generate(target, drafter, [1, 2], 20, arms[1], [arms[1], arms[0], adaptive_cfg],
                              torch.Generator().manual_seed(4), key="k")
    by = {(t.state, t.method): t.columns["expected_emitted"] for t in got.trees}
    states = got.output.target_calls
    chosen = policies[2].chosen
    assert policies[:2] == [None, None] and len(chosen) == states and chosen[0] == 1
    for s, m in enumerate(chosen):
        assert by[(s, 2)] == by[(s, 0 if m == 1 else 1)]
    if closeness == 1.0:
        assert set(chosen[1:]) == {0}  # the drafter is the target


def test_a_row_records_the_rules_m0_share_and_the_acceptance_of_a_sampled_child_at_its_roots():
    from eval.measure.rows import metrics
    from rheo.decode import GenerationOutput

    out = GenerationOutput(tokens=[1, 2, 3, 4, 5], accept_lengths=[2, 1, 1, 1], cycle_m=[1, 0, 0, 0],
                           root_accept=[0.5, 0.25, 0.75])
    assert metrics(out, 1.0)["m0_share"] == 0.75 and metrics(out, 1.0)["root_accept"] == 0.5
    plain = metrics(GenerationOutput(tokens=[1], accept_lengths=[1]), 1.0)  # not adaptive
    assert plain["m0_share"] is None and plain["root_accept"] is None
