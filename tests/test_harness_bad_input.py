"""Harness bad input: each case is rejected before anything loads, or once the pair is
loaded and before the first generation, or recorded and reported, with the key and the fix named."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import eval.measure.realized as runner
import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.prompts.suites import BenchmarkDataError, load_suite
from eval.store import storage
from eval.store.storage import OutputDirError, load_results

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "benchmarks"
TINY = ["model=tiny_random", "max_new_tokens=4", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "dataset=gsm8k", "limit=1"]


def _cfg(tmp_path, *extra):
    return compose_config(TINY + [f"output_dir={tmp_path / 'out'}", *extra])


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr("eval.measure.loop.load_pair", lambda *a, **k: pytest.fail("a model was loaded"))


# ------------------------------------------------------------------ 2. keys outside the schema
@pytest.mark.parametrize("override, key", [("+max_new_token=4", "max_new_token"), ("+method.kk=3", "method.kk"),
                                           ("+model.revision=main", "model.revision")])
def test_keys_added_with_plus_are_rejected_before_anything_loads(tmp_path, no_model, override, key):
    with pytest.raises(ValueError, match=rf"unknown config key\(s\) \['{key}'\]"):
        entry.run(_cfg(tmp_path, override))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ 3. values that pass the types
@pytest.mark.parametrize("override, needle", [
    (f"seed={2**63}", "seed must fit in a signed 64-bit integer"),
    ("num_threads=0", "num_threads must be null"),
    ("num_threads=-2", "num_threads must be null"),
    ("device=tpu", "device 'tpu' is not a device name"),
    ("max_consecutive_failures=0", "max_consecutive_failures"),
])
def test_unusable_values_are_rejected_up_front_naming_the_key(tmp_path, no_model, override, needle):
    with pytest.raises(ValueError, match=needle):
        entry.run(_cfg(tmp_path, override))
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only build")
def test_cuda_on_a_cpu_build_is_rejected_up_front(tmp_path, no_model):
    with pytest.raises(ValueError, match="device='cuda' but CUDA is not usable here"):
        entry.run(_cfg(tmp_path, "device=cuda"))


@pytest.mark.parametrize("max_new, needle", [(1024, "max_new_tokens=1024 >= the context length"),
                                             (1000, "max_new_tokens=1000 plus the longest prompt")])
def test_max_new_tokens_beyond_the_context_is_rejected_before_the_first_generation(tmp_path, max_new, needle):
    with pytest.raises(ValueError, match=needle):  # the tiny target has 1024 positions
        entry.run(_cfg(tmp_path, f"max_new_tokens={max_new}"))
    assert not list(storage.iter_shards(tmp_path / "out"))


# ------------------------------------------------------------------ 4. failures: checked, counted, exit status
def test_k_beyond_the_draft_vocabulary_is_rejected_before_the_first_generation(tmp_path):
    with pytest.raises(ValueError, match=r"method.k=300 exceeds the draft vocabulary .* \(256 tokens\)"):
        entry.run(_cfg(tmp_path, "method.k=300", "method.sparse_top=null"))
    assert not list(storage.iter_shards(tmp_path / "out"))  # no row stored, AR rows included


def _fail_rheo(monkeypatch):
    real = runner._generate

    def fail(pair, job, *args, **kwargs):
        if job.method == "rheo":
            raise RuntimeError("simulated failure of the method under test")
        return real(pair, job, *args, **kwargs)

    monkeypatch.setattr(runner, "_generate", fail)


def test_failures_are_counted_per_method(tmp_path, monkeypatch):
    _fail_rheo(monkeypatch)
    summary = entry.run(_cfg(tmp_path, "limit=2"))
    assert summary.failed_by_method == {"rheo": 2, AR.name: 0} and summary.computed == 2
    assert summary.failure_report() == "rheo: 2 of 2 rows failed"
    assert "simulated failure" in summary.first_error


_PATCHED_CLI = """
import sys, eval.measure.realized as r
real = r._generate
def fail(pair, job, *a, **k):
    if job.method == "rheo":
        raise RuntimeError("simulated failure of the method under test")
    return real(pair, job, *a, **k)
r._generate = fail
import runpy
sys.argv = ["eval/run.py"] + sys.argv[1:]
runpy.run_module("eval.run", run_name="__main__", alter_sys=True)
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_cli_exits_non_zero_with_a_summary_when_rows_failed(tmp_path):
    done = subprocess.run([sys.executable, "-c", _PATCHED_CLI, *TINY, f"output_dir={tmp_path / 'out'}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    out = done.stdout + done.stderr  # (Hydra logs to stdout)
    assert done.returncode == 1, out[-2000:]
    assert "exit status 1: rheo: 1 of 1 rows failed" in out and "simulated failure" in out


@pytest.mark.slow
def test_sweep_runs_every_job_then_exits_non_zero_when_rows_failed(tmp_path):
    done = subprocess.run([sys.executable, "-c", _PATCHED_CLI, "-m", *TINY, "method=topk,rheo",
                           f"output_dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert "rheo: 1 of 1 rows failed" in out and "1 row(s) FAILED in 1 sweep job(s)" in out
    rows = load_results(tmp_path / "out", include_failed=True)
    assert set(zip(rows["method"], rows["status"])) == {("topk", "ok"), (AR.name, "ok"), ("rheo", "failed")}


@pytest.mark.slow  # a real `python -m eval.run` process (test_entry_points.py keeps one per kind of refusal): make test-slow
def test_sweep_validates_every_combination_before_the_first_job(tmp_path):
    cmd = [sys.executable, "-m", "eval.run", "-m", *TINY, "method=rheo", "method.m=0,1,10",
           f"output_dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "method.m=10" in out and "m must be in [0, k-1] = [0, 3], got m=10" in out
    assert not (tmp_path / "out").exists()  # not even the valid jobs ran


# ------------------------------------------------------------------ 6. benchmark records
@pytest.mark.parametrize("line, needle", [
    ('{"question_id": 1, "category": "x", "turns": ["a"]}', "question_id 1 already used on line 1"),
    ('{"question_id": 2, "category": "x", "turns": "text"}', "turns must be a non-empty list"),
    ('{"question_id": 2, "category": "x"}', "turns must be a non-empty list"),
    ('{"question_id": 2, "category": "x", "turns": []}', "turns must be a non-empty list"),
    ('{"question_id": 2, "category": "x", "turns": ["ok", ""]}', "turns must be a non-empty list"),
    ('{"question_id": "two", "category": "x", "turns": ["a"]}', "question_id must be an integer"),
    ('{"question_id": 2.5, "category": "x", "turns": ["a"]}', "question_id must be an integer"),
    ('{"question_id": 2, "category": "x", "turns": ["a"]', "not a JSON object"),
    ('[1, 2]', "a record must be a JSON object"),
])
def test_bad_benchmark_records_name_file_and_line(tmp_path, line, needle):
    data = tmp_path / "data"
    data.mkdir()
    path = data / "gsm8k.jsonl"
    path.write_text('{"question_id": 1, "category": "x", "turns": ["a"]}\n' + line + "\n")
    with pytest.raises(BenchmarkDataError) as err:
        load_suite(data, "gsm8k")
    assert f"{path}:2: " in str(err.value) and needle in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_changed_item_text_is_recomputed_not_reused(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    cfg = _cfg(tmp_path, f"data_dir={data}", "baseline=false", "limit=2")
    assert entry.run(cfg).computed == 2
    before = load_results(tmp_path / "out").set_index("item_id")
    first = load_suite(data, "gsm8k")[0]
    assert (before["turns_sha"] == [i.turns_sha for i in load_suite(data, "gsm8k", limit=2)]).all()
    lines = (data / "gsm8k.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["turns"] = [record["turns"][0] + " Answer in one word."]
    (data / "gsm8k.jsonl").write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n")
    again = entry.run(cfg)
    assert (again.computed, again.skipped) == (1, 1)
    after = load_results(tmp_path / "out").set_index("item_id")
    assert after.loc[first.item_id, "turns_sha"] != before.loc[first.item_id, "turns_sha"]
    assert after.loc[first.item_id, "turns_sha"] == load_suite(data, "gsm8k")[0].turns_sha


# ------------------------------------------------------------------ 8. smaller ones
def test_truncated_config_json_is_reported_as_unreadable(tmp_path):
    cfg = _cfg(tmp_path, "baseline=false")
    entry.run(cfg)
    cfile = next((tmp_path / "out").glob("tiny_random/*/config.json"))
    cfile.write_text(cfile.read_text()[:20])
    with pytest.raises(OutputDirError, match=f"{cfile} is unreadable .*delete {cfile} and rerun"):
        entry.run(cfg)


@pytest.mark.slow
def test_ctrl_c_says_how_many_rows_are_stored_without_a_traceback(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "eval.run", *TINY, "limit=20", "max_new_tokens=6", "baseline=false",
           f"output_dir={out}", f"hydra.run.dir={tmp_path / 'h'}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    try:
        while len(list(storage.iter_shards(out))) < 2:
            assert proc.poll() is None, f"run ended before it could be interrupted: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no shard appeared in time"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    text = stdout + stderr  # (Hydra logs to stdout)
    stored = len(list(storage.iter_shards(out)))
    assert proc.returncode == 130, text[-2000:]
    assert f"interrupted: {stored} row(s) stored by this run" in text and "rerun the same command to resume" in text
    assert "Traceback" not in text and len(text.splitlines()) < 20, text


def test_makefile_quotes_paths():
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    runs, tables, figures = "/data/my runs", "/data/my tables", "/data/my figures"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}  # under `make test`
    done = subprocess.run(["make", "--no-print-directory", "-n", "tables", "figures", f"RESULTS={runs}",
                           f"TABLES={tables}", f"FIGURES={figures}"], cwd=ROOT,
                          capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    commands = [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines() if line.strip()]
    assert ["--results", runs, "--out", tables] == commands[0][-4:]
    assert ["--results", runs, "--out", figures] == commands[1][-4:]


def test_hydra_takes_an_output_dir_with_a_space(tmp_path):
    assert compose_config([f"output_dir={tmp_path / 'a b'}"]).output_dir == str(tmp_path / "a b")
