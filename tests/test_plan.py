"""`rheo plan`: its counts are the sweep's own (the jobs Hydra runs, the rows a run stores), and its
estimate says what it assumes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inprocess import run_entry
import yaml

from eval.plan import cost
from eval.plan.__main__ import main as plan_main, markdown_report
from eval.plan.expand import expand, harness_overrides, make_commands
from eval.plan.totals import totals

ROOT = Path(__file__).resolve().parents[1]
PAPER_MODELS = ("llama31_8b_instruct", "vicuna_13b_v13", "r1_distill_llama_8b")
TAU_STUDIES = ("main_table", "m_ablation", "temperature")


def _params(experiment: str) -> dict[str, list[str]]:
    """An experiment file's sweep, read as YAML (not through Hydra)."""
    conf = yaml.safe_load((ROOT / "configs" / "experiment" / f"{experiment}.yaml").read_text())
    return {k: str(v).split(",") for k, v in conf["hydra"]["sweeper"]["params"].items()}


def _benchmark_prompts(limit=None) -> int:
    """(item, turn) units of the six suites, counted from data/benchmarks/ (MT-bench: two turns)."""
    total = 0
    for path in sorted((ROOT / "data" / "benchmarks").glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        total += sum(len(r["turns"]) if "turns" in r else 1 for r in records[:limit])
    return total


def _tau_configurations() -> int:
    """Distinct (method, m, T, seed) of the three tau studies: Top-K has no m."""
    seen = set()
    for study in TAU_STUDIES:
        p = _params(study)
        for method in p["method"]:
            for m in p.get("method.m", ["1"]):
                for t in p.get("temperature", ["1.0"]):
                    for seed in p["seed"]:
                        seen.add((method, m if method == "rheo" else None, float(t), seed))
    return len(seen)


_PLANS: dict = {}


def reproduce_full(model: str):
    """The commands of `make reproduce-full` for ``model`` on a GPU, expanded (once per test session)."""
    if model not in _PLANS:
        _PLANS[model] = make_commands("reproduce-full", f"model={model} device=cuda dtype=bfloat16")
    return _PLANS[model]


@pytest.mark.slow  # expands the paper protocol's sweeps (half a minute): make test-slow
@pytest.mark.parametrize("model", PAPER_MODELS)
def test_the_plan_of_reproduce_full_counts_what_its_sweeps_expand_to(model):
    commands = reproduce_full(model)
    studies = [next(o.split("=")[1] for o in c.overrides if o.startswith("experiment=")) for c in commands]
    assert studies == [*TAU_STUDIES, "speed"]  # the Makefile's four commands, in order
    for study, command in zip(studies, commands):
        assert len(command.jobs) == math.prod(len(v) for v in _params(study).values())
        assert all(j.model == model and j.device == "cuda" and j.max_new_tokens == 1024 for j in command.jobs)
    t = totals(commands)[model]
    prompts, speed_prompts = _benchmark_prompts(), _benchmark_prompts(limit=10)
    assert prompts == 560
    # one speed job per temperature times its method, the methods alongside it (Top-K, hf_generate) and AR, item by item
    alongside = yaml.safe_load((ROOT / "configs" / "experiment" / "speed.yaml").read_text())["alongside"]
    speed_configs = (1 + len(alongside) + 1) * len(_params("speed")["temperature"])
    assert t.jobs == sum(len(c.jobs) for c in commands)
    assert t.configurations == _tau_configurations() + speed_configs == 63 + 8
    assert t.generations == 63 * prompts + speed_configs * speed_prompts
    assert t.tokens == 1024 * t.generations
    assert set(t.hours) == {"A100", "H100", "H200"} and all(h > 0 for h in t.hours.values())


@pytest.mark.slow
def test_the_plan_counts_the_rows_a_sweep_stores(tmp_path):
    """The plan of a small m sweep next to the rows the same sweep stores (Top-K's jobs share one folder)."""
    overrides = ["experiment=m_ablation", "seed=0", "model=tiny_random", "limit=1", "max_new_tokens=2",
                 "dataset.suites=[gsm8k,mt_bench]", f"output_dir={tmp_path}", "progress=false", "warmup=false"]
    t = totals([type("C", (), {"jobs": expand(overrides)})()])["tiny_random"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "eval.run", "-m", *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    folders = [p for p in (tmp_path / "tiny_random").iterdir() if p.is_dir()]
    rows = list((tmp_path / "tiny_random").glob("*/*/*.parquet"))
    assert (t.jobs, t.configurations, t.generations) == (8, len(folders), len(rows)) == (8, 5, 15)
    stored = sum(p.stat().st_size for p in rows)
    assert 0.5 < t.disk_bytes / stored < 2  # rows of 2 tokens: the estimate is of their size


@pytest.mark.slow
def test_make_plan_1_runs_nothing_and_plans_the_target_as_one(tmp_path):
    """make reproduce-speed PLAN=1: one plan of its speed sweep (one job per T, the methods alongside in it) and
    each tuned tree whose file exists, its configurations counted once."""
    args = f"model=tiny_random max_new_tokens=2 dataset.suites=[gsm8k] output_dir={tmp_path}"
    done = subprocess.run(["make", "-s", "reproduce-speed", "PLAN=1", f"ARGS={args}"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "MAKEFLAGS": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    tuned = [f for f in ("tuned_topk", "tuned_rheo") if (ROOT / "configs" / "experiment" / f"{f}.yaml").exists()]
    assert done.stdout.count("rheo plan: make reproduce-speed") == 1
    assert done.stdout.count("\ncommand ") == 1 + len(tuned)
    assert "command 1: eval.run -m experiment=speed" in done.stdout and ": 2 job(s)" in done.stdout
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.slow
def test_make_plan_1_of_reproduce_full_is_rheo_plan_of_it():
    """PLAN=1 counts each configuration once across the target's sweeps, as rheo plan does (not block by block)."""
    args = "model=llama31_8b_instruct device=cuda dtype=bfloat16"
    env = {**os.environ, "MAKEFLAGS": "", "PYTHONPATH": str(ROOT)}
    made = subprocess.run(["make", "-s", "reproduce-full", "PLAN=1", f"ARGS={args}"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    planned = subprocess.run([sys.executable, "-m", "eval.plan", "reproduce-full", *args.split()], cwd=ROOT,
                             capture_output=True, text=True, env=env)
    assert made.returncode == planned.returncode == 0, made.stderr[-2000:]
    assert made.stdout == planned.stdout
    assert made.stdout.count("estimated time") == 1 and "configurations      71 " in made.stdout


def test_a_guarded_make_line_is_read_as_make_runs_it():
    line = "[ ! -f configs/experiment/tuned_topk.yaml ] || .venv/bin/python -m eval.run -m experiment=tuned_topk limit=1"
    assert harness_overrides(line) == (["experiment=tuned_topk", "limit=1"], "configs/experiment/tuned_topk.yaml")
    assert harness_overrides(".venv/bin/python scripts/report.py speed") is None


def test_the_cost_model_is_bound_by_launches_for_the_paper_pairs():
    """At batch 1 an 8B call launches more than the device works, on every kind; the 13B forward launches more."""
    for gpu in cost.GPUS.values():
        host, device = cost.ms_per_call("Top-K", 1.0, cost.shape_of("llama31_8b_instruct"), gpu, 61, 8)
        assert host > device > 0
    eight = cost.ops_per_call("Rheo m=1", 1.0, 32)
    assert cost.ops_per_call("Rheo m=1", 1.0, 40) > eight == pytest.approx(1934.3, abs=0.1)  # the committed table
    slow, fast = (cost.ms_per_call("AR", 0.0, cost.shape_of("vicuna_13b_v13"), cost.GPUS[g], 1, 0)[1]
                  for g in ("A100", "H200"))
    assert slow > fast  # the device floor follows the bandwidth


def test_a_row_of_more_tokens_takes_more_disk():
    assert cost.row_bytes(1024, 205, True) > cost.row_bytes(1024, 205, False) > cost.row_bytes(64, 13, False) > 0


def test_the_text_plan_states_its_assumptions(capsys):
    assert plan_main(["--command", "experiment=main_table", "model=llama31_8b_instruct", "device=cuda",
                      "limit=1", "dataset.suites=[gsm8k]"]) == 0
    out = capsys.readouterr().out
    assert "jobs                6" in out and "generations         6 " in out
    assert "the estimate assumes" in out and "us per op" in out and "max_new_tokens" in out
    assert "A100" in out and "H200" in out and "nothing was run" in out


@pytest.mark.slow  # expands the paper protocol's sweeps (half a minute): make test-slow
def test_docs_gpu_holds_the_plan_table_of_the_paper_models():
    """docs/gpu.md's table is `rheo plan reproduce-full ... --markdown`'s output (checked on one model's row)."""
    page = (ROOT / "docs" / "gpu.md").read_text()
    assert "rheo plan reproduce-full device=cuda dtype=bfloat16 --models " + ",".join(PAPER_MODELS) in page
    t = totals(reproduce_full(PAPER_MODELS[0]))
    table = markdown_report(list(t.values()), cost.DEFAULT_TAU)
    assert table.splitlines()[2] in page.splitlines()
    assert all(line in page for line in table.splitlines()[4:] if line)  # the assumptions, word for word


@pytest.mark.parametrize("argv, needle", [
    (["nosuch"], "make -n nosuch failed: make: *** No rule to make target 'nosuch'"),
    (["tables"], "make tables runs no sweep of the harness"),
    (["reproduce-full", "model=nosuch"], "Could not find 'model/nosuch'"),
    ([], "give a make target"),
])
def test_what_cannot_be_planned_is_refused_in_one_line(argv, needle):
    done = run_entry("rheo.commands", ["plan", *argv], env={"OMP_NUM_THREADS": "1", "MAKEFLAGS": ""})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("rheo plan: error: ") and needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
