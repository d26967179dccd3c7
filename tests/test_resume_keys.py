"""Every resumable measurement reuses a stored result only when everything that decides its value is the
same (rheo.resume_key): each field of its key, changed alone, makes the result computed again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store.storage import export_results, load_results

TINY = ["model=tiny_random", "max_new_tokens=12", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "record_expected=true", "temperature=1.0",
        "dataset=gsm8k", "limit=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "runs"
    for method in ("rheo", "topk"):
        entry.run(compose_config(TINY + [f"output_dir={out}", f"method={method}"]))
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_replay_of_another_variant_is_not_read_from_the_first_ones_lines(runs, tmp_path, capsys):
    from eval.measure.expected_replay import main

    lines = tmp_path / "r.jsonl"
    assert main([str(runs), "--rows", "0", "--mc", "0", "--jsonl", str(lines)]) == 0
    capsys.readouterr()
    assert main([str(runs), "--rows", "0", "--mc", "0", "--jsonl", str(lines), "--variant", "topk"]) == 0
    text = capsys.readouterr().out
    got = _lines(lines)
    assert [g["key"]["variant"] for g in got] == ["rheo m=1"] * 2 + ["topk"] * 2
    assert text.startswith("### topk: 2 rows") and "committed tokens reproduced: 2 / 2" in text


class _Counter:
    """A stand-in for replay_row that counts the rows it is asked to replay."""

    def __init__(self):
        self.calls = 0

    def __call__(self, pair, row, prompt, mc, seed_offset, dtype):
        self.calls += 1
        return dict(dataset=row["dataset"], item_id=int(row["item_id"]), turn=int(row["turn"]), seed_offset=seed_offset,
                    mc=mc, dtype=dtype, cycles=1, identical=True, replay_matches=True if mc else None,
                    expected_matches=True if mc else None, r_minus_e=0.0, mc_minus_e=0.0, mc_minus_e_var=0.0,
                    r_minus_mc=0.0)


def _edited_archive(runs: Path, path: Path, column: str, change) -> Path:
    export_results(runs, path)
    table = pq.read_table(path)
    values = [change(v) if m == "rheo" else v for v, m in zip(table.column(column).to_pylist(),
                                                               table.column("method").to_pylist())]
    pq.write_table(table.set_column(table.schema.get_field_index(column), column,
                                    pa.array(values, type=table.schema.field(column).type)), path)
    return path


@pytest.mark.parametrize("field", ["mc", "seed_offset", "dtype", "prompt", "weights", "output_tokens", "gen_seed",
                                   "config_hash"])
def test_each_field_of_a_replay_key_changed_alone_recomputes(runs, tmp_path, monkeypatch, field):
    import eval.measure.expected_replay as er

    counter = _Counter()
    monkeypatch.setattr(er, "replay_row", counter)
    lines = tmp_path / "r.jsonl"
    base = ["--rows", "0", "--mc", "0", "--jsonl", str(lines)]
    assert er.main([str(runs), *base]) == 0 and counter.calls == 2
    assert er.main([str(runs), *base]) == 0 and counter.calls == 2  # the same key: nothing again
    source, extra = str(runs), []
    if field == "mc":
        extra = ["--mc", "3"]
    elif field == "seed_offset":
        extra = ["--seed-offset", "1"]
    elif field == "dtype":
        extra = ["--dtype", "bfloat16"]
    elif field == "prompt":
        real = er.prompt_of
        monkeypatch.setattr(er, "prompt_of", lambda *a: real(*a) + [5])
    elif field == "weights":
        monkeypatch.setattr(er, "pair_weights", lambda model: {"head_sha": "another head"})
    elif field == "output_tokens":
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: v[:-1]))
    elif field == "gen_seed":
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: v + 1))
    elif field == "config_hash":  # another runs file whose rows share their places with these
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: "0" * 12))
    assert er.main([source, *base, *extra]) == 0
    assert counter.calls == 4, field


class _Pair:
    """A stand-in pair: the readings are stubbed, so only format_chat and the attributes are read."""

    drafter = target = None
    eos_token_ids = ()

    def format_chat(self, messages):
        return [len(m["content"]) for m in messages]


@pytest.fixture
def reading(monkeypatch):
    """head_reading's measure() with its pair and generations stubbed: returns the generation counter."""
    import eval.measure.head_reading as hr
    import eval.measure.pairs
    import rheo.models.mixture

    calls = []
    monkeypatch.setattr(eval.measure.pairs, "load_pair", lambda *a, **k: _Pair())
    monkeypatch.setattr(rheo.models.mixture, "MixedDrafter", lambda *a: None)
    monkeypatch.setattr(hr, "one_row", lambda pair, drafter, prompt, t, n, seed: calls.append(seed) or
                        {"cycles": 1, "m0_share": 0.0, "root_accept": 0.5, "tau": 1.0})
    return calls


def _measure(path, **changes):
    from eval.measure.head_reading import measure

    args = {"mixes": [0.0], "temperatures": [1.0], "per_suite": 1, "heldout": 0, "new_tokens": 4, **changes}
    return measure(args["mixes"], args["temperatures"], args["per_suite"], args["heldout"], args["new_tokens"], path)


@pytest.mark.parametrize("field", ["draft_mix", "temperature", pytest.param("new_tokens", marks=pytest.mark.slow),
                                   "prompt", pytest.param("spec", marks=pytest.mark.slow), "weights"])  # 2: test-slow
def test_each_field_of_a_head_reading_key_changed_alone_recomputes(reading, tmp_path, monkeypatch, field):
    import eval.measure.head_reading as hr
    import eval.prompts.suites as suites

    path = tmp_path / "rows.jsonl"
    n = len(_measure(path))
    assert len(reading) == n == 6  # one item of each of the six suites
    _measure(path)
    assert len(reading) == n  # the same keys: nothing again
    changes = {}
    if field == "draft_mix":
        changes = {"mixes": [0.5]}
    elif field == "temperature":
        changes = {"temperatures": [0.7]}
    elif field == "new_tokens":
        changes = {"new_tokens": 5}
    elif field == "prompt":  # another text of the same suite items
        real = suites.load_suite
        monkeypatch.setattr(suites, "load_suite", lambda *a, **k: [
            type(i)(i.suite, i.item_id, i.category, (i.turns[0] + " (edited)",) + i.turns[1:]) for i in real(*a, **k)])
    elif field == "spec":
        real_spec = hr.reading_spec
        monkeypatch.setattr(hr, "reading_spec", lambda t: dataclasses.replace(real_spec(t), probe_min=0.2))
    elif field == "weights":
        monkeypatch.setattr(hr, "pair_weights", lambda: {"head_sha": "another head"})
    _measure(path, **changes)
    assert len(reading) == 2 * n, field


def test_a_head_reading_file_whose_last_line_is_cut_names_it_and_goes_on(reading, tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    _measure(path)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the last line cut by a kill
    lines = len(path.read_text().splitlines())
    with caplog.at_level("WARNING"):
        rows = _measure(path)
    assert f"{path}:{lines}" in caplog.text and "cut by a kill" in caplog.text
    assert len(rows) == 6 and len(reading) == 7  # only the cut row measured again
    assert len(_measure(path)) == 6 and len(reading) == 7  # the new line is a line of its own


# ---- the draft corpus's generation shards and their features (scripts/gen_corpus.py, gen_selfinstruct.py,
# backfill_features.py): the model and generate() are stubbed; what is checked is which batches run again.

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def corpus_scripts(monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(SCRIPTS))
    import gen_corpus
    calls = []

    def generate(model, tok, convs, max_new, seed, layers=None):
        calls.append(seed)
        return [dict(prompt=[1, 2], response=[3] * 5, kind="k", temperature=c["temperature"], split="train",
                     key=c["key"]) for c in convs], None
    monkeypatch.setattr(gen_corpus, "generate_batch", generate)
    return sys.modules["gen_corpus"], calls


def _corpus_args(tmp_path, **changes):
    import argparse

    return argparse.Namespace(**{"seed": 0, "batch": 2, "max_new_tokens": 8, "target_tokens": 10 ** 6, "worker": 0,
                                 "workers": 1, "threads": 1, "dtype": "bfloat16", "device": "cpu", "features": False,
                                 "out": str(tmp_path / "shards"), **changes})


def _convs(text="q"):
    return [dict(messages=[{"role": "user", "content": f"{text}{i}"}], kind="k", split="train", key=f"{text}{i}",
                 n_chars=i, temperature=0.0) for i in range(4)]


@pytest.mark.parametrize("change", [{"seed": 1}, {"batch": 4}, {"max_new_tokens": 9}, {"dtype": "float32"},
                                    {"device": "cuda"}, {"text": "other"}])
def test_each_field_of_a_corpus_shard_key_changed_alone_regenerates(corpus_scripts, tmp_path, change):
    gen_corpus, calls = corpus_scripts
    shard_dir = tmp_path / "shards"
    shard_dir.mkdir()
    args = _corpus_args(tmp_path, target_tokens=20)  # the first run's 4 prompts x 5 tokens reach it exactly
    assert gen_corpus.run_pass("a", _convs(), None, None, args, shard_dir) and len(calls) == 2
    gen_corpus.run_pass("a", _convs(), None, None, args, shard_dir)
    assert len(calls) == 2  # the same keys: nothing again
    text = change.pop("text", "q")
    other = _corpus_args(tmp_path, target_tokens=20, **change)
    gen_corpus.run_pass("a", _convs(text), None, None, other, shard_dir)
    assert len(calls) == 2 + (1 if other.batch == 4 else 2), change  # old shards neither skipped nor counted


def test_each_field_of_a_self_instruct_shard_key_changed_alone_regenerates(corpus_scripts, tmp_path, monkeypatch):
    gen_corpus, calls = corpus_scripts
    import gen_selfinstruct

    from rheo.training.shard_keys import run_settings

    monkeypatch.setattr(gen_corpus, "complete_batch", lambda model, tok, convs, max_new, seed, stop:
                        calls.append(seed) or [dict(key=c["key"], text="t", temperature=c["temperature"]) for c in convs])
    out = tmp_path / "shards"
    out.mkdir()

    def runner(**changes):
        run = object.__new__(gen_selfinstruct.Runner)
        run.args, run.model, run.tok, run.out, run.layers = _corpus_args(tmp_path, **changes), None, None, out, None
        run.settings = run_settings(run.args)
        return run
    convs = [dict(text=f"t{i}", key=f"t{i}", temperature=0.8, n_chars=i) for i in range(4)]
    runner().run("t", convs, 60, [0])
    runner().run("t", convs, 60, [0])
    assert len(calls) == 2
    runner().run("t", convs, 61, [0])  # another length
    runner(seed=5).run("t", convs, 61, [0])  # another seed
    runner(seed=5).run("t", convs[:3] + [dict(convs[3], text="changed")], 61, [0])  # another prompt
    assert len(calls) == 2 + 2 + 2 + 1
    assert [len(gen_selfinstruct.samples_of(out, "t", s)) for s in (runner().settings, runner(seed=5).settings)] == [0, 4]


def test_backfilled_features_of_changed_sequences_are_computed_again(corpus_scripts, tmp_path, monkeypatch):
    import sys
    from types import SimpleNamespace

    import numpy as np
    gen_corpus, _ = corpus_scripts
    import backfill_features as bf

    shards = tmp_path / "shards"
    shards.mkdir()

    def shard(k, response):
        (shards / f"a_{k:05d}.json").write_text(json.dumps({"samples": [{"prompt": [1, 2], "response": response}]}))
    shard(0, [3, 4])
    shard(1, [5])
    forwards = []
    monkeypatch.setattr(bf, "load_smollm2", lambda dtype: (SimpleNamespace(config=SimpleNamespace(num_hidden_layers=8)),
                                                           None))
    monkeypatch.setattr(bf, "forward_features", lambda model, seqs, layers: forwards.append(len(seqs)) or [
        {"feats": np.zeros((len(q), 3)), "final": np.zeros((len(q), 1)), "argmax": np.zeros(len(q))} for q in seqs])
    monkeypatch.setattr(sys, "argv", ["backfill_features.py", "--shards", str(shards)])
    bf.main()
    assert len(forwards) == 2
    bf.main()
    assert len(forwards) == 2  # the same sequences: nothing again
    shard(1, [5, 6])  # the shard generated again with other tokens
    bf.main()
    assert len(forwards) == 3
    old = dict(np.load(shards / "a_00000.feats.npz"))
    np.savez(shards / "a_00000.feats.npz", **{k: v for k, v in old.items() if k != "key"})  # written without a key
    bf.main()
    assert len(forwards) == 4
