"""Engines that start clean and stay quiet (rheo.engine, rheo.models.static_eagle3, rheo.captured_build), on
the tiny fp32 pair; ``graphs`` is compiled by Dynamo with its eager backend (the graph counts, breaks,
warnings and traced calls are Dynamo's own, without Inductor's minutes):

* a new static or graphs session starts from a new eager session's state: a one-token prompt (whose tree
  drafts from the head's root row alone) gives the eager engine's tokens for the same seed, whatever
  ran before;
* a second head session adds no graph, and a generation under graphs raises no warning;
* a deep tree (10 layers) decodes under graphs as under eager on a later request in another cache bucket
  (the head's buffers grow before the compiled build, never inside it);
* the static engine runs under a ``generate`` request's logits processors (generate's default top_k=50
  wraps the target), seed for seed as the eager engine;
* a target the engines cannot run is refused with what is wrong with it; the static engine times its draft
  phase; a truncated kernel in Inductor's cache is removed and named in one line.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from static_pair import eager_compiler, eagle_pair, fresh_dynamo, graph_counts

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.timing import PhaseTimer

SHAPE = dict(k=3, depth=4, tree_size=8, sparse_top=None)
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
PAIR = dict(vocab=16, seed=4)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr("rheo.engine.graphs_compiler", lambda device: eager_compiler)
    fresh_dynamo()
    yield
    fresh_dynamo()


def _cfg(engine: str, temperature: float = 1.0, **shape) -> SpecConfig:
    return SpecConfig(m=1, temperature=temperature, engine=engine, **{**SHAPE, **shape})


def _run(pair, prompt, cfg, seed, new=16):
    return speculative_generate(*pair, prompt, new, cfg, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("engine", ["static", pytest.param("graphs", marks=pytest.mark.slow)])
def test_a_one_token_prompt_gives_the_eager_tokens_whatever_ran_before(engine):
    pair = eagle_pair(**PAIR)
    want = _run(pair, [5], _cfg("eager"), seed=3)
    for before in (PROMPT, [7, 7, 2]):  # leaves the head's shared root row as its last cycle left it
        _run(pair, before, _cfg(engine), seed=0)
        got = _run(pair, [5], _cfg(engine), seed=3)
        assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths


@pytest.mark.slow  # Dynamo traces the five functions (about 30 s on a loaded 2-core CPU)
def test_a_second_head_session_adds_no_graph_and_graphs_warn_nothing():
    pair = eagle_pair(**PAIR)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _run(pair, PROMPT, _cfg("graphs"), seed=0, new=24)
        after_first = graph_counts()
        second = _run(pair, PROMPT[:5] + [7, 7, 2], _cfg("graphs"), seed=1, new=24)
    assert first.target_calls > 2 and len(second.tokens) == 24
    assert after_first[1] == 0 and graph_counts() == after_first  # no break; the second session: no new graph
    assert [str(w.message).splitlines()[0] for w in caught] == []


@pytest.mark.slow  # Dynamo traces two cache buckets
def test_a_deep_tree_decodes_as_eager_on_a_later_request_in_another_cache_bucket():
    pair = eagle_pair(**PAIR)
    cfg = dict(temperature=0.0, k=2, depth=10, tree_size=12)  # chains padded past MAX_DEPTH = 8
    long = (PROMPT * 40)[:300]  # past the 256-row cache bucket
    for prompt in (PROMPT, long):
        got = _run(pair, prompt, _cfg("graphs", **cfg), seed=0, new=12)
        assert got.tokens == _run(pair, prompt, _cfg("eager", **cfg), seed=0, new=12).tokens
    assert graph_counts()[1] == 0


@pytest.mark.parametrize("top_k", [None, 3])  # None: generate's default, 50
def test_the_static_engine_runs_under_the_requests_processors(top_k):
    from rheo.hf_generate import generate as rheo_generate

    target, drafter = eagle_pair(**PAIR)
    ids = torch.tensor([PROMPT])
    extra = {} if top_k is None else dict(top_k=top_k, repetition_penalty=1.3)
    outs = []
    for engine in ("eager", "static"):
        torch.manual_seed(5)
        out = target.hf_model.generate(ids, custom_generate=rheo_generate, drafter=drafter, spec_config=_cfg(engine),
                                       do_sample=True, temperature=1.0, max_new_tokens=12, pad_token_id=0, **extra)
        outs.append(out[0, len(PROMPT):].tolist())
    assert outs[1] == outs[0] and len(outs[0]) == 12


def test_a_target_without_a_static_twin_is_refused_with_what_is_wrong():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rheo.engine import engine_target
    from rheo.models.hf_target import HFTarget

    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2,
                                        attn_implementation="sdpa"))
    with pytest.raises(ValueError, match="its model is a Qwen2ForCausalLM, not a LlamaForCausalLM") as e:
        engine_target(HFTarget(qwen), "static")
    assert "\n" not in str(e.value) and "engine='eager'" in str(e.value)


@pytest.mark.parametrize("engine", ["static", pytest.param("graphs", marks=pytest.mark.slow)])
def test_the_draft_phase_is_timed_under_static_and_said_to_be_inside_the_build_under_graphs(engine):
    pair = eagle_pair(**PAIR)
    _run(pair, PROMPT, _cfg(engine), seed=0)  # the first build of a configuration runs eagerly
    timer = PhaseTimer()
    out = speculative_generate(*pair, PROMPT, 16, _cfg(engine), generator=torch.Generator().manual_seed(1),
                               timer=timer)
    phases = timer.summary(out.target_calls)
    assert phases["phase_build_ms"] > 0
    if engine == "static":
        assert phases["phase_draft_ms"] > 0
    else:
        assert phases["phase_draft_ms"] is None


def test_a_truncated_inductor_kernel_is_removed_and_named(tmp_path, monkeypatch):
    from rheo.engine import checked_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (tmp_path / "ab").mkdir()
    empty, whole = tmp_path / "ab" / "c1.so", tmp_path / "ab" / "c2.so"
    empty.write_bytes(b"")
    whole.write_bytes(b"\x7fELF")

    def interrupted(*args):
        raise OSError(f"{empty}: file too short")

    with pytest.raises(RuntimeError, match="truncated compiled kernel.*removed 1 empty kernel file") as e:
        checked_cache(interrupted)(1)
    assert "\n" not in str(e.value) and not empty.exists() and whole.exists()
    with pytest.raises(ValueError, match="other"):  # any other failure passes through unchanged
        checked_cache(lambda: (_ for _ in ()).throw(ValueError("other")))()
