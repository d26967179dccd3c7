"""The static engine run eagerly is the eager engine: on a tiny fp32 pair its logits are within 1e-5
and its features within 1e-4 of the eager sessions' (across cache buckets), AR, Top-K and Rheo emit
the same greedy tokens (the target's own greedy decode), the same tokens for the same seed at T = 1
(only the sessions change, not the random stream), and Top-K and Rheo m=1 through ``engine="static"``
pass a seeded chi-square against the target's exact distribution."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from static_pair import eagle_pair
from toys import chi_square_pvalue

from baselines.autoregressive import autoregressive_generate
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.engine import engine_drafter, engine_pair, engine_target
from rheo.exact import target_distribution
from rheo.models.static_target import StaticHFTarget
from rheo.models.toy import PrefixLM

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
TREE = dict(k=4, depth=4, tree_size=10, sparse_top=None)


@pytest.fixture(scope="module")
def pair():
    return eagle_pair()


def _generate(pair, method, temperature, engine, seed=7, new=24):
    cfg = SpecConfig.for_method(method=method, temperature=temperature, m=1, engine=engine, **TREE)
    return speculative_generate(*pair, PROMPT, new, cfg, generator=torch.Generator().manual_seed(seed))


def test_scored_logits_and_features_match_the_eager_session_across_cache_buckets(pair):
    target, drafter = pair
    eager = target.new_session()
    static = StaticHFTarget(target, min_capacity=16).new_session()  # 16 rows: the cache moves up twice
    feats = eager.prefill(PROMPT[:-1])
    assert (static.prefill(PROMPT[:-1]) - feats).abs().max() <= 1e-4
    d_sess = drafter.new_session()
    d_sess.prefill(PROMPT, feats)
    cfg = SpecConfig(method="topk", temperature=0.0, **TREE)
    from rheo.methods import get_method
    method, root, capacities = get_method("topk"), PROMPT[-1], set()
    for _ in range(10):
        built = method.build_tree(d_sess.draft, root, cfg, None, drafter.draft_to_target)
        want, got = eager.score_tree(built.tree), static.score_tree(built.tree)
        assert (got.logits.materialize() - want.logits.materialize()).abs().max() <= 1e-5
        assert (got.features - want.features).abs().max() <= 1e-4
        result = method.verify_tree(built, want.logits, cfg, None)
        eager.commit(result.path)
        static.commit(result.path)
        d_sess.commit(torch.tensor(result.tokens), want.features[result.path])
        root = result.tokens[-1]
        capacities.add(static.capacity)
    assert len(capacities) >= 2 and static.past_len == eager.past_len  # it moved up a bucket on the way


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_greedy_tokens_are_the_eager_engines_and_the_targets_own(pair, method):
    target = pair[0]
    want = autoregressive_generate(target, PROMPT, 24, temperature=0.0).tokens
    got = _generate(pair, method, 0.0, "static")
    assert got.tokens == want == _generate(pair, method, 0.0, "eager").tokens
    assert max(got.accept_lengths) >= 2  # trees were accepted past the root: the commits moved rows
    assert autoregressive_generate(engine_target(target, "static"), PROMPT, 24, temperature=0.0).tokens == want


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_same_seed_same_tokens_at_temperature_one(pair, method):
    eager, static = _generate(pair, method, 1.0, "eager"), _generate(pair, method, 1.0, "static")
    assert static.tokens == eager.tokens and static.accept_lengths == eager.accept_lengths
    ar = [autoregressive_generate(t, PROMPT, 16, 1.0, torch.Generator().manual_seed(5)).tokens
          for t in (pair[0], engine_target(pair[0], "static"))]
    assert ar[0] == ar[1]


#: the chi-square's level: a lossless decoder fails one fresh seed in 10,000
ALPHA = 1e-4


@pytest.mark.parametrize("method", [pytest.param("topk", marks=pytest.mark.slow), "rheo"])  # Top-K: make test-slow
def test_chi_square_through_the_static_engine(method):
    """Top-K and Rheo m=1 on a 6-token pair through engine="static": the first two tokens of 400
    seeded runs against the target's exact distribution (false alarm 1e-4 per test)."""
    target, drafter = eagle_pair(vocab=6, layers=3, seed=2)
    hf = target.hf_model

    @torch.no_grad()
    def logits_fn(prefix):
        return hf(input_ids=torch.tensor([list(prefix)])).logits[0, -1].double()

    prompt = [0, 1]
    cfg = SpecConfig.for_method(method=method, temperature=1.0, m=1, k=3, depth=2, tree_size=5, sparse_top=None,
                                engine="static")
    g = torch.Generator().manual_seed(11)
    counts = Counter(tuple(speculative_generate(target, drafter, prompt, 2, cfg, g).tokens) for _ in range(400))
    want = target_distribution(logits_fn, prompt, 2, 1.0)
    p, dof = chi_square_pvalue(counts, want)
    assert dof >= 5 and p > ALPHA, (p, dof)


def test_models_without_a_static_twin_are_refused_in_one_line(pair):
    toy = PrefixLM(lambda prefix: torch.zeros(4), 4)
    refusal = r"^engine='static' drafts with an EAGLE-3 head .* got PrefixLM: use engine='eager'$"
    with pytest.raises(ValueError, match=refusal):
        engine_drafter(toy, "static")
    with pytest.raises(ValueError, match=r"^engine='graphs' needs a transformers Llama target .* got PrefixLM"):
        engine_pair(toy, pair[1], "graphs")
    with pytest.raises(ValueError, match=r"^engine must be one of \['eager', 'static', 'graphs'\], got 'fast'$"):
        SpecConfig(engine="fast")
    assert engine_pair(toy, toy, "eager") == (toy, toy)  # eager: any pair, as it is


def test_graphs_on_a_cpu_says_once_that_it_runs_without_cuda_graphs(capsys, monkeypatch):
    import rheo.engine

    monkeypatch.setattr(rheo.engine, "_NOTED", set())
    rheo.engine.graphs_compiler("cpu")
    rheo.engine.graphs_compiler("cpu")
    assert capsys.readouterr().err == "engine=graphs on cpu: Inductor without CUDA graphs (a cpu has none to replay)\n"


def test_the_static_twin_is_made_once_and_one_session_holds_its_cache(pair):
    target = pair[0]
    static = engine_target(target, "static")
    assert engine_target(target, "static") is static
    assert engine_drafter(pair[1], "static") is engine_drafter(pair[1], "static")
    first = static.new_session()
    first.prefill(PROMPT[:-1])
    static.new_session()
    with pytest.raises(RuntimeError, match="a newer session of this static target holds its cache"):
        first.prefill(PROMPT[:2])


def test_a_discarded_tree_leaves_the_committed_past_as_it_was(pair):
    target, drafter = pair
    from rheo.methods import get_method

    cfg = SpecConfig(method="topk", temperature=0.0, **TREE)
    eager, static = target.new_session(), engine_target(target, "static").new_session()
    feats = eager.prefill(PROMPT[:-1])
    static.prefill(PROMPT[:-1])
    d_sess = drafter.new_session()
    d_sess.prefill(PROMPT, feats)
    built = get_method("topk").build_tree(d_sess.draft, PROMPT[-1], cfg, None, drafter.draft_to_target)
    static.score_tree(built.tree)
    static.discard()  # same-state evaluation scores trees it does not verify
    want, got = eager.score_tree(built.tree), static.score_tree(built.tree)
    assert (got.logits.materialize() - want.logits.materialize()).abs().max() <= 1e-5
    assert static.past_len == len(PROMPT) - 1
