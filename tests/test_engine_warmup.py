"""No compile inside a timed row (rheo.warmup, eval.measure.realized): the buckets a job can reach, a
warm-up that compiles each of them before the first timed row, and a ``compiles`` column per row that the
tables read (a row that timed a compile keeps its tau, not its times).

The harness test runs ``engine=graphs`` for real (Inductor on a CPU) on a tiny local pair: a job of two
prompts whose lengths lie in two cache buckets (256 and 512 rows). By hand, the same job:

    PYTHONPATH=.:tests .venv/bin/python tests/test_engine_warmup.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import baselines  # noqa: F401  (registers AR)
from rheo.config import SpecConfig
from rheo.warmup import reached, warm_prompt

ROOT = Path(__file__).resolve().parents[1]
TREE = dict(k=4, depth=2, tree_size=6)
#: word counts of the job's two prompts (the local tokenizer reads one token a word): 256 rows, then 512
WORDS = (40, 300)


def test_the_buckets_a_generation_reaches_run_from_its_prompt_to_its_last_call():
    spec = SpecConfig(method="topk", **TREE)  # an 8-row tree bucket, extends of 3 rows
    assert reached(100, 16, spec) == [256]
    assert reached(240, 16, spec) == [256, 512]  # crosses during the generation
    assert reached(300, 16, spec) == [512]
    assert reached(300, 1024, spec) == [512, 1024, 2048]
    assert reached(100, 16, SpecConfig(method="ar")) == [256]
    prompt = warm_prompt(512, spec, [5, 6, 7])
    assert reached(len(prompt), 3 * (TREE["depth"] + 1) + 1, spec) == [512] and set(prompt) == {5, 6, 7}
    assert len(warm_prompt(4096, spec, [5], context=2048)) + 3 * (TREE["depth"] + 1) + 1 == 2048  # within the model


def test_the_tables_leave_out_the_times_of_a_row_that_compiled():
    from eval.report.analysis import without_compile_times

    rows = pd.DataFrame({"config_hash": ["a", "a", "b"], "dataset": "x", "item_id": [0, 1, 0], "turn": 0,
                         "tau": [3.0, 3.5, 1.0], "wall_s": [20.0, 0.5, 0.4], "tokens_per_s": [0.8, 32.0, 40.0],
                         "phase_score_ms": [9.0, 1.0, 1.0], "compiles": [5, 0, None]})
    out = without_compile_times(rows)
    assert out["wall_s"].isna().tolist() == [True, False, False] and out["tokens_per_s"].isna().sum() == 1
    assert out["phase_score_ms"].isna().tolist() == [True, False, False] and out["tau"].tolist() == rows["tau"].tolist()
    assert without_compile_times(rows.drop(columns="compiles")) is not None


@pytest.mark.slow  # Dynamo traces the engine's functions (backend "eager": no Inductor)
def test_rheo_generate_under_graphs_times_no_compile_and_says_so_when_one_happens(tmp_path, capsys, monkeypatch):
    from local_pair import write_local_head, write_target
    from static_pair import eager_compiler, fresh_dynamo

    import rheo.generate_cli as cli

    monkeypatch.setattr("rheo.engine.graphs_compiler", lambda device: eager_compiler)
    fresh_dynamo()
    target, head = write_target(tmp_path / "target"), write_local_head(tmp_path / "head")
    argv = ["w7 w8 w9 w10", "--target", str(target), "--head", str(head), "--method", "topk", "--engine", "graphs",
            "--temperature", "0", "--max-new-tokens", "300", "--k", "4", "--depth", "2", "--tree-size", "6",
            "--dtype", "float32"]  # 300 new tokens: from the 256-row cache bucket into the 512-row one
    assert cli.generate_main(argv) == 0
    out, err = capsys.readouterr()
    assert re.search(r"warm-up: [1-9]\d* graph\(s\) compiled", err) and re.search(r"\d tokens/s$", out.strip())
    calls = iter(range(0, 100, 7))  # a compile inside the timed generation: no tokens/s
    monkeypatch.setattr(cli, "compile_count", lambda: next(calls))
    assert cli.generate_main(argv) == 0
    out, err = capsys.readouterr()
    assert "tokens/s not reported: 7 graph(s) were compiled inside this generation" in out
    fresh_dynamo()


def _job(tmp: Path) -> subprocess.CompletedProcess:
    from local_pair import write_local_head, write_target

    target, head = write_target(tmp / "target"), write_local_head(tmp / "head")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": i, "turns": [" ".join(f"w{5 + (i * 7 + j) % 200}"
                                                                                 for j in range(n))]}) + "\n"
                               for i, n in enumerate(WORDS)))
    args = ["model=local", "model.name=tiny", f"model.target_path={target}", f"model.head_path={head}",
            "model.chat_format=template", "model.eos_tokens=['</s>']", "dataset=local", f"dataset.path={prompts}",
            "method=topk", *(f"method.{k}={v}" for k, v in TREE.items()), "method.sparse_top=null", "temperature=0",
            "engine=graphs", "max_new_tokens=16", "baseline=false", "num_threads=1", "progress=false",
            f"output_dir={tmp / 'out'}", f"hydra.run.dir={tmp / 'h'}"]
    return subprocess.run([sys.executable, "-m", "eval.run", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=3000, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _rows(tmp: Path) -> pd.DataFrame:
    from eval.store import storage

    return storage.load_results(tmp / "out").sort_values("finished_at", kind="stable").reset_index(drop=True)


@pytest.mark.slow  # Inductor compiles two cache buckets (minutes on a small CPU)
def test_a_graphs_job_across_two_cache_buckets_times_no_compile(tmp_path):
    done = _job(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(tmp_path)
    assert rows["prompt_tokens"].tolist() == sorted(rows["prompt_tokens"]) and len(rows) == 2
    assert rows["prompt_tokens"].iloc[0] < 200 and rows["prompt_tokens"].iloc[1] > 256  # two cache buckets
    assert rows["compiles"].tolist() == [0, 0]
    first, second = rows["wall_s"].tolist()
    assert max(first, second) <= 2 * min(first, second), (first, second)  # the first timed row compiled nothing


if __name__ == "__main__":  # the harness job above, printed
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        result = _job(Path(folder))
        print(result.stderr[-2000:] if result.returncode else "")
        print(_rows(Path(folder))[["item_id", "prompt_tokens", "new_tokens", "compiles", "wall_s", "tokens_per_s"]]
              .to_string(index=False))
