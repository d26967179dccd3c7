"""Per-phase timing (rheo.timing): off costs no records, on fills every phase; rows carry it;
shards written before the phase columns existed still read; the transformers generate row."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
import torch
from toys import toy_pair

import eval.run as entry
from baselines import AR, HF_GENERATE
from baselines.autoregressive import autoregressive_generate
from baselines.hf_generate import hf_generate
from eval.conf.compose import compose_config
from eval.measure.pairs import make_tiny_pair
from eval.store import storage
from eval.store.storage import load_results
from rheo.decode import SpecConfig, speculative_generate
from rheo.timing import NULL_TIMER, PHASES, PhaseTimer, phase_columns

TINY = ["model=tiny_random", "max_new_tokens=6", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "dataset=gsm8k", "limit=1"]


def test_null_timer_records_nothing_and_returns_the_function_itself():
    fn = lambda x: x + 1  # noqa: E731
    assert NULL_TIMER.wrap("draft", fn) is fn
    assert NULL_TIMER.phase("score") is NULL_TIMER.phase("verify")  # one shared no-op context


def test_phase_timer_splits_a_cycle_and_measures_sleeps():
    tm = PhaseTimer()
    with tm.phase("tree"):
        tm.wrap("draft", time.sleep)(0.02)
        time.sleep(0.01)
    with tm.phase("score"):
        time.sleep(0.03)
    s = tm.summary(cycles=1, total_ms=80.0)
    assert s["phase_draft_ms"] == pytest.approx(20, abs=15) and s["phase_build_ms"] == pytest.approx(10, abs=15)
    assert s["phase_score_ms"] == pytest.approx(30, abs=15)
    assert s["phase_other_ms"] == pytest.approx(80 - sum(s[f"phase_{p}_ms"] for p in PHASES[:-1]))
    assert tm.summary(cycles=0)["phase_score_ms"] is None


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_timer_leaves_the_output_unchanged(method):
    target, drafter, _ = toy_pair(6, salt=3)
    cfg = SpecConfig.for_method(method=method, k=3, m=1, depth=3, tree_size=6, temperature=1.0, sparse_top=None)
    plain = speculative_generate(target, drafter, [0, 1], 12, cfg, torch.Generator().manual_seed(5))
    tm = PhaseTimer()
    timed = speculative_generate(target, drafter, [0, 1], 12, cfg, torch.Generator().manual_seed(5), timer=tm)
    assert timed.tokens == plain.tokens and timed.accept_lengths == plain.accept_lengths
    s = tm.summary(timed.target_calls, total_ms=1e3)
    assert all(s[c] is not None and s[c] >= 0 for c in phase_columns() if c != "phase_other_ms")
    assert s["phase_draft_ms"] > 0 and s["phase_score_ms"] > 0 and s["phase_verify_ms"] > 0


def test_hf_generate_greedy_equals_our_ar():
    pair = make_tiny_pair()
    prompt = pair.format_chat([{"role": "user", "content": "timing"}])
    ours = autoregressive_generate(pair.target, prompt, 12, 0.0, timer=PhaseTimer())
    assert hf_generate(pair.hf_model, prompt, 12, 0.0).tokens == ours.tokens
    sampled = hf_generate(pair.hf_model, prompt, 12, 1.0, seed=3)
    assert sampled.tokens == hf_generate(pair.hf_model, prompt, 12, 1.0, seed=3).tokens
    assert len(sampled.tokens) == 12 == sampled.target_calls


def test_rows_carry_phases_unless_switched_off(tmp_path):
    entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'on'}"]))
    df = load_results(tmp_path / "on")
    assert len(df) == 2 and df["device_name"].notna().all()
    for c in phase_columns():
        assert df[c].notna().all(), c
    spec, ar = df[df["method"] == "rheo"].iloc[0], df[df["method"] == AR.name].iloc[0]
    assert spec["phase_draft_ms"] > 0 and ar["phase_draft_ms"] == 0 and ar["phase_score_ms"] > 0
    per_cycle = sum(spec[f"phase_{p}_ms"] for p in PHASES) * spec["target_calls"] + spec["phase_prefill_ms"]
    assert per_cycle == pytest.approx(spec["wall_s"] * 1e3, rel=1e-6)

    entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'off'}", "profile_phases=false"]))
    off = load_results(tmp_path / "off")
    assert len(off) == 2 and off[phase_columns()].isna().all().all()


def test_hf_generate_rows_are_timed_next_to_their_own_ar(tmp_path):
    entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'o'}", "method=hf_generate", "temperature=0",
                                      "paired_baseline=true"]))
    df = load_results(tmp_path / "o")
    assert sorted(df["method"]) == [AR.name, HF_GENERATE.name]
    hf, ar = df[df["method"] == HF_GENERATE.name].iloc[0], df[df["method"] == AR.name].iloc[0]
    assert hf["output_tokens"] == ar["output_tokens"] and ar["paired_with"] == hf["config_hash"]


def test_shards_without_the_new_columns_still_read(tmp_path):
    entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'o'}"]))
    path = next(storage.iter_shards(tmp_path / "o"))
    table = pq.read_table(path)
    old = table.drop([c for c in storage.OPTIONAL_COLUMNS])
    pq.write_table(old, path)
    row = storage.read_row(path, storage.expected_from_path(path))
    assert row["phase_score_ms"] is None and row["device_name"] is None and row["tau"] > 0
    pq.write_table(table.drop(["tau"]), path)  # a required column missing is still corrupt
    with pytest.raises(storage.CorruptShardError, match="tau"):
        storage.read_row(path)
