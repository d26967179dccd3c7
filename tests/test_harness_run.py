"""Harness runs on the tiny test pair: rows, resume, failures, corrupt shards, MT-bench turns."""

from __future__ import annotations

import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.measure.realized as runner
import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.measure.pairs import load_pair
from eval.report.analysis import PAIR_KEY, add_variant, with_speedup
from eval.store import storage
from eval.store.storage import load_results

TINY = ["model=tiny_random", "max_new_tokens=5", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false"]
ROW_KEY = ["config_hash", "dataset", "item_id", "turn"]


def _cfg(tmp_path, *extra):
    return compose_config(TINY + [f"output_dir={tmp_path / 'out'}", *extra])


def _forbid_model_load(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("model loaded although every row was already stored")
    monkeypatch.setattr("eval.measure.loop.load_pair", forbidden)


def test_rows_baseline_and_resume(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "dataset=mt_bench", "limit=1", "warmup=true")
    summary = entry.run(cfg)
    assert summary.computed == 4 and summary.failed == 0  # (rheo, ar) x 2 turns
    df = load_results(tmp_path / "out")
    assert len(df) == 4 and not df.duplicated(ROW_KEY).any()
    assert set(df["method"]) == {"rheo", AR.name} and set(df["turn"]) == {0, 1}
    for r in df.itertuples():
        assert r.new_tokens == 5 == sum(r.accept_lengths)
        assert r.tau == pytest.approx(r.new_tokens / r.target_calls)
        assert r.wall_s > 0 and r.tokens_per_s == pytest.approx(r.new_tokens / r.wall_s)
        assert r.status == "ok" and r.error is None and r.device == "cpu" and r.dtype == "float32"
        assert r.torch_version and r.transformers_version and r.git_sha and r.config_hash
    ar = df[df["method"] == AR.name]
    assert (ar["target_calls"] == ar["new_tokens"]).all() and ar["m"].isna().all() and ar["k"].isna().all()
    rheo = df[df["method"] == "rheo"]
    assert (rheo["m"] == 1).all() and (rheo["tree_size"] == 6).all()
    # same generation seed for both methods of an (item, turn), different across turns
    seeds = df.groupby("turn")["gen_seed"].nunique()
    assert (seeds == 1).all() and df["gen_seed"].nunique() == 2
    speed = with_speedup(add_variant(df))
    assert len(speed) == 2 and speed["speedup"].notna().all()

    _forbid_model_load(monkeypatch)
    again = entry.run(cfg)
    assert again.computed == 0 and again.skipped == 4
    assert len(load_results(tmp_path / "out")) == 4


def test_mt_bench_second_turn_sees_its_own_first_answer(tmp_path, monkeypatch):
    seen = []
    real = runner.chat_messages

    def spy(item, turn, answers):
        seen.append((turn, list(answers)))
        return real(item, turn, answers)

    monkeypatch.setattr(runner, "chat_messages", spy)
    entry.run(_cfg(tmp_path, "dataset=mt_bench", "limit=1", "baseline=false"))
    df = load_results(tmp_path / "out")
    first = df[df["turn"] == 0].iloc[0]
    answer = load_pair("tiny_random").tokenizer.decode(first["output_tokens"])
    # (the loop, eval.measure.loop, builds the first turn's prompt once more before any generation, to check its length)
    assert seen == [(0, []), (1, [answer])]


def test_failed_item_is_recorded_as_failure_and_retried(tmp_path, monkeypatch):
    real = runner._generate

    def flaky(pair, job, prompt, cfg, generator, max_new_tokens=None, **kwargs):
        if job.method == "rheo" and flaky.calls == 1:
            flaky.calls += 1
            raise RuntimeError("simulated out-of-memory")
        flaky.calls += job.method == "rheo"
        return real(pair, job, prompt, cfg, generator, max_new_tokens, **kwargs)

    flaky.calls = 0
    monkeypatch.setattr(runner, "_generate", flaky)
    cfg = _cfg(tmp_path, "dataset=gsm8k", "limit=3", "baseline=false")
    summary = entry.run(cfg)
    assert (summary.computed, summary.failed) == (2, 1)
    everything = load_results(tmp_path / "out", include_failed=True)
    failed = everything[everything["status"] == "failed"]
    assert len(failed) == 1 and "simulated out-of-memory" in failed["error"].iloc[0]
    assert failed["tau"].isna().all() and failed["new_tokens"].isna().all()  # not data
    assert len(load_results(tmp_path / "out")) == 2  # failures are not read as data
    monkeypatch.setattr(runner, "_generate", real)
    retry = entry.run(cfg)
    assert (retry.computed, retry.failed, retry.skipped) == (1, 0, 2)
    assert len(load_results(tmp_path / "out")) == 3


def test_systematic_failure_aborts_loudly(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise NotImplementedError("decoder missing")

    monkeypatch.setattr(runner, "_generate", broken)
    with pytest.raises(RuntimeError, match="all failed"):
        entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=5", "baseline=false"))
    rows = load_results(tmp_path / "out", include_failed=True)
    assert len(rows) == 3 and (rows["status"] == "failed").all()


def test_corrupt_and_truncated_shards_are_detected_and_recomputed(tmp_path, caplog):
    cfg = _cfg(tmp_path, "dataset=gsm8k", "limit=3", "baseline=false")
    entry.run(cfg)
    shards = list(storage.iter_shards(tmp_path / "out"))
    assert len(shards) == 3
    data = shards[0].read_bytes()
    shards[0].write_bytes(data[: len(data) // 2])  # truncated
    shards[1].write_bytes(b"garbage, not parquet")  # corrupt
    # a valid parquet file with the wrong row for its path
    table = pq.read_table(shards[2])
    pq.write_table(table.set_column(table.column_names.index("item_id"), "item_id",
                                    pa.array([999], type=pa.int64())), shards[2])
    loaded = load_results(tmp_path / "out")
    assert loaded.empty and len(loaded.attrs["corrupt_shards"]) == 3
    assert all(str(p) in " ".join(loaded.attrs["corrupt_shards"]) for p in shards)
    caplog.clear()
    summary = entry.run(cfg)
    assert summary.computed == 3
    assert sum("corrupt shard" in r.message for r in caplog.records) == 3
    df = load_results(tmp_path / "out")
    assert len(df) == 3 and not df.attrs["corrupt_shards"] and not df.duplicated(ROW_KEY).any()


def test_stale_temporary_files_are_ignored_and_cleaned(tmp_path):
    cfg = _cfg(tmp_path, "dataset=gsm8k", "limit=1", "baseline=false")
    entry.run(cfg)
    shard = next(storage.iter_shards(tmp_path / "out"))
    host = socket.gethostname()
    stale = shard.parent / f"{storage.TMP_PREFIX}{shard.stem}@{host}@999999999.parquet"
    stale.write_bytes(b"half a row")
    remote = shard.parent / f"{storage.TMP_PREFIX}{shard.stem}@another-host@999999999.parquet"
    remote.write_bytes(b"another machine's row in flight")
    assert len(load_results(tmp_path / "out")) == 1  # never read as data
    entry.run(cfg)
    assert not stale.exists() and remote.exists()


def test_results_of_different_configs_never_mix(tmp_path):
    for m in (0, 1):
        entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=1", f"method.m={m}"))
    entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=1", "method=topk"))
    df = load_results(tmp_path / "out")
    # rheo m=0, rheo m=1, topk, and one shared AR config
    assert df["config_hash"].nunique() == 4 and len(df) == 4
    assert df.groupby("config_hash")[["method", "m"]].nunique(dropna=False).max().max() == 1
    assert not df.duplicated(PAIR_KEY + ["method", "m"]).any()


def test_paired_baseline_times_an_ar_row_next_to_each_config(tmp_path):
    for m in (0, 1):
        entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=1", f"method.m={m}", "paired_baseline=true"))
    entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=1", "method.m=2"))  # shared AR
    df = add_variant(load_results(tmp_path / "out"))
    rheo = df[df["method"] == "rheo"].set_index("m")
    ar = df[df["method"] == AR.name]
    assert len(ar) == 3 and set(ar["paired_with"].dropna()) == {rheo.loc[0, "config_hash"], rheo.loc[1, "config_hash"]}
    speed = with_speedup(df).set_index("m")
    for m in (0, 1, 2):
        partner = ar[ar["paired_with"] == rheo.loc[m, "config_hash"]] if m < 2 else ar[ar["paired_with"].isna()]
        assert len(partner) == 1
        assert speed.loc[m, "ar_wall_s"] == pytest.approx(partner["wall_s"].iloc[0])


def test_alongside_runs_other_methods_item_by_item_in_turning_order(tmp_path, monkeypatch):
    order = []
    one_turn = runner._one_turn

    def spy(cfg, pair, meta, job, item, turn, answers, versions):
        order.append((item.item_id, job.method))
        return one_turn(cfg, pair, meta, job, item, turn, answers, versions)

    monkeypatch.setattr(runner, "_one_turn", spy)
    entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=3", "baseline=false", "alongside=[topk]"))
    ids = sorted({i for i, _ in order})
    assert order == [(ids[0], "rheo"), (ids[0], "topk"), (ids[1], "topk"), (ids[1], "rheo"),
                     (ids[2], "rheo"), (ids[2], "topk")]
    both = load_results(tmp_path / "out")
    topk = both[both["method"] == "topk"].sort_values("item_id")
    assert topk["m"].isna().all() and (topk["tree_size"] == 6).all() and (topk["k"] == 4).all()
    # the same config hash and tokens as Top-K run on its own with the same tree
    entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'alone'}", "dataset=gsm8k", "limit=3",
                                      "baseline=false", "method=topk"]))
    alone = load_results(tmp_path / "alone").sort_values("item_id")
    assert list(alone["config_hash"]) == list(topk["config_hash"])
    assert [list(t) for t in alone["output_tokens"]] == [list(t) for t in topk["output_tokens"]]


@pytest.mark.parametrize("extra, needle", [
    (["alongside=[rheo]"], "the run's own method"),
    (["alongside=[topk,topk]"], "names a method twice"),
    (["alongside=[ar]"], "baseline=true already runs"),
    (["alongside=[beam]"], "unknown alongside method"),
])
def test_alongside_rejects_what_it_cannot_run(tmp_path, extra, needle):
    with pytest.raises(ValueError, match=needle):
        entry.run(_cfg(tmp_path, "dataset=gsm8k", "limit=1", *extra))
