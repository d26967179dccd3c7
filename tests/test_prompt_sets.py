"""Prompt sets through `datasets`: the six suites as before, a user's own prompts in every format,
the SPEED-Bench preset from a local copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from eval.conf.compose import compose_config
from eval.conf.schema import method_key
from eval.conf.validate import validate
from eval.prompts.sources import load_prompts
from eval.prompts.suites import BenchmarkDataError, Item, builtin_datasets, load_suite, read_records
from eval.store.keys import SUITE_FILES, config_hash, generation_seed
from eval.store.storage import load_results
from rheo.paths import resolve_path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "benchmarks"
TINY = ["model=tiny_random", "max_new_tokens=3", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "baseline=false"]


def _cli(tmp_path, *overrides, multirun=False):
    cmd = [sys.executable, "-m", "eval.run", *(["-m"] if multirun else []), *TINY, *overrides,
           f"hydra.run.dir={tmp_path / 'h'}", f"hydra.sweep.dir={tmp_path / 'hm'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ the six suites
def test_six_suites_are_one_datasetdict_with_the_files_records_in_order():
    dd = builtin_datasets(DATA)
    assert list(dd) == list(SUITE_FILES) and all(dd[s].num_rows == 80 for s in dd)
    for suite, name in SUITE_FILES.items():
        lines = [json.loads(ln) for ln in (DATA / name).read_text().splitlines() if ln.strip()]
        assert dd[suite]["question_id"] == [r["question_id"] for r in lines]
        assert [list(t) for t in dd[suite]["turns"]] == [r["turns"] for r in lines]
        assert load_suite(DATA, suite) == read_records(DATA / name, suite)  # datasets path == line reader


def test_committed_archive_rows_are_reproduced():
    """Every row of results/runs.parquet: its config hash from the composed config, and its item's
    turns_sha, category and generation seed from the prompts as loaded now (same items, same order)."""
    rows = pd.read_parquet(ROOT / "results" / "runs.parquet")
    cfg0 = compose_config(["model=smollm2_135m", "dataset=all"])
    items = {s: {i.item_id: i for i in its} for s, its in load_prompts(cfg0, resolve_path).items()}
    ordered = {s: list(d) for s, d in items.items()}
    for (method, m, t, n), group in rows.groupby(["method", "m", "temperature", "max_new_tokens"], dropna=False):
        over = ["model=smollm2_135m", "dataset=all", f"method={method}", f"temperature={t}",
                f"max_new_tokens={n}", "dtype=bfloat16"] + ([f"method.m={int(m)}"] if method == "rheo" else [])
        assert set(group["config_hash"]) == {config_hash(method_key(compose_config(over)))}
        for suite, part in group.groupby("dataset"):
            ids = set(part["item_id"])  # (the archive is sorted by shard path, not by item)
            assert ids == set(ordered[suite][:len(ids)])  # the first `limit` items in file order
    for r in rows.itertuples():
        item = items[r.dataset][r.item_id]
        assert (r.turns_sha, r.category) == (item.turns_sha, item.category)
        assert r.gen_seed == generation_seed(r.dataset, r.item_id, r.turn, r.seed)


# ------------------------------------------------------------------ a user's own prompts
def _records(first_id: int) -> list[dict]:
    return [{"question_id": first_id, "category": "demo", "turns": [f"Say hello number {first_id}."]},
            {"question_id": first_id + 1, "category": "demo",
             "turns": [f"Count to {first_id}.", "Now backwards."]}]


def _write_formats(tmp_path) -> dict[str, Path]:
    from datasets import Dataset

    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in _records(1)))
    parquet = tmp_path / "p.parquet"
    pd.DataFrame(_records(11)).to_parquet(parquet)
    saved = tmp_path / "saved"
    Dataset.from_list(_records(21)).save_to_disk(str(saved))
    return {"jsonl": jsonl, "parquet": parquet, "saved": saved}


@pytest.mark.slow
def test_user_prompts_in_every_format_run_through_eval_run(tmp_path):
    paths = _write_formats(tmp_path)
    out = tmp_path / "out"
    done = _cli(tmp_path, "dataset=local", f"dataset.path={','.join(str(p) for p in paths.values())}",
                f"output_dir={out}", multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    df = load_results(out).sort_values(["item_id", "turn"])
    assert set(df["dataset"]) == {"local"} and (df["status"] == "ok").all()
    expected = {(r["question_id"], t): text for first in (1, 11, 21) for r in _records(first)
                for t, text in enumerate(r["turns"])}
    assert sorted(zip(df["item_id"], df["turn"])) == sorted(expected)  # 3 formats x (1 + 2 turns)
    for r in df.itertuples():
        turns = next(x["turns"] for f in (1, 11, 21) for x in _records(f) if x["question_id"] == r.item_id)
        assert r.turns_sha == Item("local", r.item_id, "demo", tuple(turns)).turns_sha and r.category == "demo"


def test_user_prompts_name_their_fields_and_string_ids_become_positions(tmp_path):
    path = tmp_path / "q.parquet"
    pd.DataFrame({"uid": ["x-7", "y-3"], "prompt": ["one?", "two?"]}).to_parquet(path)
    cfg = compose_config(["dataset=local", f"dataset.path={path}", "dataset.turns_field=prompt",
                          "dataset.id_field=uid", "dataset.category_field=null", "dataset.suites=[mine]"])
    validate(cfg)
    items = load_prompts(cfg, resolve_path)["mine"]
    assert [(i.item_id, i.turns, i.category) for i in items] == [(0, ("one?",), ""), (1, ("two?",), "")]


def test_arrow_files_of_either_ipc_format_are_read(tmp_path):
    import pyarrow as pa

    table = pa.Table.from_pylist(_records(5))
    for name, writer in (("file.arrow", pa.ipc.new_file), ("stream.arrow", pa.ipc.new_stream)):
        with writer(str(tmp_path / name), table.schema) as w:
            w.write_table(table)
        cfg = compose_config(["dataset=local", f"dataset.path={tmp_path / name}"])
        items = load_prompts(cfg, resolve_path)["local"]
        assert [(i.item_id, i.turns) for i in items] == [(r["question_id"], tuple(r["turns"])) for r in _records(5)]


@pytest.mark.parametrize("line, needle", [
    ('{"question_id": 2, "turns": []}', "turns must be a non-empty list"),
    ('{"question_id": 1, "turns": ["again"]}', "question_id 1 already used on line 1"),
    ('{"question_id": 2.5, "turns": ["a"]}', "must be an integer or a non-empty string"),
    ('{"question_id": 2, "turns": ["a"]', "not a JSON object"),
])
def test_bad_user_jsonl_names_file_and_line(tmp_path, line, needle):
    path = tmp_path / "p.jsonl"
    path.write_text('{"question_id": 1, "turns": ["a"]}\n' + line + "\n")
    cfg = compose_config(["dataset=local", f"dataset.path={path}"])
    with pytest.raises(BenchmarkDataError) as err:
        load_prompts(cfg, resolve_path)
    assert f"{path}:2: " in str(err.value) and needle in str(err.value) and len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("overrides, needle", [
    (["dataset.path=/no/such/prompts.jsonl"], "dataset.path /no/such/prompts.jsonl does not exist"),
    (["dataset.path=PATH", "dataset.suites=[gsm8k]"], "none of the built-in suites"),
    (["dataset.path=PATH", "dataset.suites=[a,b]"], "must name the one suite"),
])
def test_bad_user_dataset_config_is_rejected_up_front(tmp_path, overrides, needle):
    paths = _write_formats(tmp_path)
    cfg = compose_config(["dataset=local"] + [o.replace("PATH", str(paths["jsonl"])) for o in overrides])
    with pytest.raises(ValueError, match=needle):
        validate(cfg)


def test_missing_turns_field_and_unreachable_hub_say_what_to_do(tmp_path, monkeypatch):
    paths = _write_formats(tmp_path)
    cfg = compose_config(["dataset=local", f"dataset.path={paths['parquet']}", "dataset.turns_field=prompt"])
    with pytest.raises(BenchmarkDataError, match=r"no field 'prompt' .*dataset.turns_field="):
        load_prompts(cfg, resolve_path)
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'org/prompts' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    cfg = compose_config(["dataset=local", "dataset.hub=org/prompts"])
    with pytest.raises(BenchmarkDataError, match=r"without network, put a local copy .*set dataset.path="):
        load_prompts(cfg, resolve_path)


# ------------------------------------------------------------------ SPEED-Bench preset
def speed_bench_copy(folder: Path) -> Path:
    """A 2-domain stand-in for a local copy of nvidia/SPEED-Bench in the hub's layout: the README's
    `configs` entry and the qualitative split's parquet, with the published schema's fields."""
    rows = []
    for domain, n in (("coding", 2), ("math", 3)):
        for i in range(n):
            rows.append({"question_id": f"{domain}-{i:03d}", "category": domain, "sub_category": f"{domain}-sub",
                         "turns": [f"A {domain} question number {i}?"] + (["And a follow-up?"] if i == 1 else []),
                         "source": "fixture", "src_id": str(i), "difficulty": "easy", "multiturn": i == 1})
    (folder / "qualitative").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "qualitative" / "test-00000-of-00001.parquet")
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: qualitative\n  data_files:\n  - split: test\n"
                                      "    path: qualitative/test-*\n---\nfixture\n")
    return folder


@pytest.mark.slow
def test_speed_bench_preset_runs_from_a_local_copy(tmp_path):
    copy = speed_bench_copy(tmp_path / "speed_bench")
    cfg = compose_config(["dataset=speed_bench", f"dataset.path={copy}"])
    validate(cfg)
    prompts = load_prompts(cfg, resolve_path)
    assert list(prompts) == ["speed_coding", "speed_math"]
    assert [(i.item_id, i.category, len(i.turns)) for i in prompts["speed_math"]] == \
        [(0, "math-sub", 1), (1, "math-sub", 2), (2, "math-sub", 1)]
    out = tmp_path / "out"
    done = _cli(tmp_path, "dataset=speed_bench", f"dataset.path={copy}", "limit=1", f"output_dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    df = load_results(out)
    assert sorted(zip(df["dataset"], df["item_id"])) == [("speed_coding", 0), ("speed_math", 0)]


def test_speed_bench_without_a_local_copy_says_what_to_download(tmp_path):
    cfg = compose_config(["dataset=speed_bench", f"dataset.path={tmp_path / 'nothing'}"])
    with pytest.raises(ValueError) as err:
        validate(cfg)
    text = str(err.value)
    assert "hf download nvidia/SPEED-Bench --repo-type dataset" in text and "qualitative" in text
    assert len(text.splitlines()) == 1


def test_a_second_prompt_file_under_the_same_suite_name_replaces_nothing(tmp_path):
    """Two prompt files of one suite name into one folder: the second run is refused in one line
    before any model loads, and the first file's rows stay; under its own suite name it runs beside."""
    import eval.run as entry
    from eval.store.resume import OtherPromptsError

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in _records(1)))
    second.write_text("".join(json.dumps({**r, "turns": [t + " Briefly." for t in r["turns"]]}) + "\n"
                              for r in _records(1)))
    out = [f"output_dir={tmp_path / 'out'}", "dataset=local"]
    assert entry.run(compose_config(TINY + out + [f"dataset.path={first}"])).computed == 3
    kept = load_results(tmp_path / "out")
    with pytest.raises(OtherPromptsError, match=r"suite 'local' item 1 made from other text") as err:
        entry.run(compose_config(TINY + out + [f"dataset.path={second}"]))
    assert "\n" not in str(err.value)
    pd.testing.assert_frame_equal(load_results(tmp_path / "out"), kept)
    assert entry.run(compose_config(TINY + out + [f"dataset.path={second}", "dataset.suites=[briefly]"])).computed == 3
    assert set(load_results(tmp_path / "out")["dataset"]) == {"local", "briefly"}
