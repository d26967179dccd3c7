"""`rheo plan` and `make TARGET PLAN=1` on bad input, and the plan on N GPUs (eval.plan.schedule): each
refusal is one line naming the input, and a plan runs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.plan import schedule
from eval.plan.__main__ import gpus_report, main as plan_main
from eval.plan.expand import Command
from eval.plan.totals import JobCost, Totals

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--command", "experiment=main_table", "model=llama31_8b_instruct", "device=cuda", "limit=1",
         "dataset.suites=[gsm8k]", "seed=0"]


@pytest.mark.parametrize("key", ["foo", "method.foo"])
def test_an_unknown_key_is_named(key):
    with pytest.raises(ValueError, match=rf"^unknown config key '{key}': not a field of the run schema"):
        plan_main(SMALL + [f"{key}=1"])


@pytest.mark.parametrize("tau", ["1e-300", "0.5", "0", "nan", "inf"])
def test_a_tau_below_one_token_per_call_is_refused(tau, capsys):
    with pytest.raises(SystemExit) as stop:
        plan_main(SMALL + ["--tau", tau])
    assert stop.value.code == 2
    assert "argument --tau: must be a finite number >= 1" in capsys.readouterr().err


def test_a_tau_beyond_what_the_trees_can_emit_is_refused_and_a_shallow_tree_is_priced_at_its_most(capsys):
    with pytest.raises(ValueError, match=r"--tau 10 is more tokens per target call than any tree of the plan can emit "
                                         r"\(at most 9: the deepest tree's depth \+ 1\)"):
        plan_main(SMALL + ["--tau", "10"])
    assert plan_main(SMALL + ["method.depth=3"]) == 0  # the default tau 5 on a depth-3 tree: 4 tokens per call
    out = capsys.readouterr().out
    assert "target calls        128 at most (tau 5 for tree methods; rheo m=1 4, its depth + 1; topk 4, its depth + 1)" \
        in out  # 2 configurations x 1 prompt x 256 tokens / 4 per call


def test_a_make_expansion_in_args_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ValueError, match=r"holds '\$', which make expands"):
        plan_main(["reproduce-full", f"limit=$(shell touch {marker})"])
    with pytest.raises(ValueError, match=r"holds '\$', which make expands"):
        plan_main(["reproduce-full", "--args", f"limit=1 $(shell touch {marker})"])
    assert not marker.exists()


def _make(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MAKEFLAGS": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(["make", "-s", *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_plan_1_runs_the_plan_alone_with_args_as_written():
    done = _make("-n", "tables", "test", "PLAN=1", "ARGS=limit=1 $(shell false)")
    assert done.returncode == 0 and done.stdout.splitlines() == [
        '.venv/bin/python -m eval.plan "tables test" --args "$RHEO_PLAN_ARGS" ', ":"]


@pytest.mark.slow
def test_plan_1_on_a_target_without_a_sweep_runs_nothing_and_says_so(tmp_path):
    marker = tmp_path / "ran"
    for target in ("tables", "setup"):
        done = _make(target, "PLAN=1", f"RESULTS={tmp_path}/none", f"TABLES={tmp_path}/tables")
        assert done.returncode != 0 and done.stdout == ""
        assert f"rheo plan: error: make {target} runs no sweep of the harness (python -m eval.run -m): nothing to plan" \
            in done.stderr
    assert not (tmp_path / "tables").exists()
    done = _make("reproduce-full", "PLAN=1", f"ARGS=limit=1 $(shell touch {marker})")  # make's own expansion
    assert done.returncode != 0 and "holds '$'" in done.stderr and not marker.exists()


def test_the_time_limit_is_the_launchers_or_the_commands():
    assert schedule.time_limit([]).minutes == 720  # configs/hydra/launcher/slurm_gpu.yaml
    assert "slurm_gpu.yaml timeout_min: 720" in schedule.time_limit([]).source
    assert schedule.time_limit(["hydra.launcher.timeout_min=90", "seed=0"]).minutes == 90
    assert schedule.time_limit(["hydra/launcher=nosuch"]) is None


def test_the_wall_time_puts_the_untimed_jobs_on_n_gpus_and_the_timed_ones_alone_after():
    assert schedule.longest_first([2, 3, 4, 3], 2) == 6  # 4+2 | 3+3
    assert schedule.longest_first([3, 3, 2, 2, 2], 3) == 5  # 3+2 | 3+2 | 2
    assert schedule.longest_first([5, 1], 8) == 5
    jobs = [JobCost(1, [], {"H100": h}, timed=False) for h in (4, 4, 4, 4)] + [JobCost(2, [], {"H100": 1}, timed=True)] * 2
    assert schedule.wall_hours(jobs, "H100", 4) == (6, 4, 2)
    assert schedule.wall_hours(jobs, "H100", 1) == (18, 16, 2)


def test_a_job_over_the_time_limit_is_named_with_the_fix():
    t = Totals("m", per_job=[JobCost(1, ["seed=0"], {"H100": 13.0}, False), JobCost(1, ["seed=1"], {"H100": 0.0}, False),
                             JobCost(2, ["seed=0"], {"H100": 2.0}, True)], hours={"H100": 15.0})
    lines = "\n".join(gpus_report([Command([], []), Command([], [])], t, 2))
    assert "1.1" in lines and "13 h" in lines and "shared" in lines and "2.1*" in lines
    assert "is exceeded on H100: 1 job(s), the longest 13 h: raise hydra.launcher.timeout_min" in lines
    assert "wall time on 2 GPU(s) H100 15 h (13 h together + 2.0 h timed, alone)" in lines


def test_a_plan_on_n_gpus_prints_each_job_and_the_wall_time(capsys):
    assert plan_main(SMALL + ["--gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert "model llama31_8b_instruct on 4 GPU(s):" in out and "per job" in out
    assert out.count("method=topk\n") == 1 and out.count("method=rheo\n") == 1
    assert "time limit          every job fits in 12 h" in out and "wall time on 4 GPU(s) A100" in out
