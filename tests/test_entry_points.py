"""Every command-line entry point ends a user error with one line on stderr naming the input and
the fix, a non-zero exit status and no traceback (RHEO_DEBUG=1 shows it); a study refuses bad
sizes before its first job and `make smoke` stays away from the committed results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from inprocess import run_entry

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "progress=false"]


def _run(cmd: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                "HOME": os.environ.get("HOME", str(tmp_path)), **env}
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300)


def _script_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, text the one line must hold) per script: a bad value or a missing input."""
    (tmp / "notparquet.txt").write_text("rows")
    return [
        (["backfill_features.py", "--threads", "0"], "argument --threads: must be an integer >= 1"),
        (["bench_core.py", "--cycles", "-1"], "argument --cycles: must be an integer >= 1"),
        (["calibrate_head.py", "--corpus", "data/benchmarks"], "--corpus data/benchmarks: the benchmarks are the test set"),
        (["eval_draft_head.py", "--head", "/nonexistent"], "--head /nonexistent: no EAGLE-3 head there"),
        (["export_results.py", "--results", "results/runs.parquet", "--out", "results/runs.parquet"],
         "is an archive (a file), not a results directory"),
        (["gen_corpus.py", "--workers", "0"], "argument --workers: must be an integer >= 1"),
        (["gen_selfinstruct.py", "--batch", "0"], "argument --batch: must be an integer >= 1"),
        (["gpu_bundle.py", "setup", "--bundle", str(tmp / "nobundle")], "carry the bundle folders first"),
        (["gpu_check.py", "--out", str(tmp / "g"), "--chi-runs", "zero"], "argument --chi-runs: must be an integer"),
        (["make_figures.py", "--results", str(tmp / "notparquet.txt"), "--out", str(tmp / "f")],
         "is a file, not a results directory or a .parquet results archive"),
        (["make_docs.py", "--root", str(tmp)], f"--root {tmp}: no README.md there"),
        (["make_tables.py", "--results", "", "--out", str(tmp / "t")], "argument --results: is empty"),
        (["pack_corpus.py", "--shards", "/nonexistent"], "no shards in /nonexistent"),
        (["plot_learning_curve.py", "--metrics", "/nonexistent.jsonl", "--out", str(tmp / "c.png")],
         "/nonexistent.jsonl"),
        (["train_draft.py", "--corpus", "/nonexistent", "--run-dir", str(tmp / "run")], "no training corpus at"),
        (["tune_tree.py", "--shapes", "8x6"], "--shapes: '8x6' is not KxDEPTHxR"),
        (["recipe.py", "train-head", "--epochs", "3"], "train-head takes --resume and --KEY VALUE for KEY in"),
        (["report.py", "speed", "paths.nosuch.deep=1"], "nosuch"),
        (["cycle_cost.py", "--shape", "nope"], "invalid choice"),
        (["engine_speed.py", "--repeats", "0"], "argument --repeats: must be an integer >= 1"),
        (["speed_check.py", "--limit", "0"], "argument --limit: must be an integer >= 1"),
        (["heldout_shapes.py", "--prompts", "0"], "argument --prompts: must be an integer >= 1"),
        (["chain_over_drafts.py", "--draws", "0"], "argument --draws: must be an integer >= 1"),
    ]


def test_every_script_is_covered():
    listed = {args[0] for args, _ in _script_cases(Path("/tmp"))}
    assert listed == {p.name for p in (ROOT / "scripts").glob("*.py")}


CASES = len(_script_cases(Path("/tmp")))
#: the cases also run as a real process in the default suite (every case does in make test-slow)
IN_A_PROCESS = {"gpu_bundle.py", "make_docs.py", "engine_speed.py"}


def _check_one_line(done, args, needle):
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"{args[0]}: error: ") and needle in lines[0] and "Traceback" not in done.stdout


@pytest.mark.parametrize("case", [
    case if _script_cases(Path("/tmp"))[case][0][0] in IN_A_PROCESS else pytest.param(case, marks=pytest.mark.slow)
    for case in range(CASES)])
def test_a_bad_argument_to_a_script_is_one_line_and_a_nonzero_exit(tmp_path, case):
    args, needle = _script_cases(tmp_path)[case]
    _check_one_line(_run([PY, f"scripts/{args[0]}", *args[1:]], tmp_path), args, needle)


@pytest.mark.parametrize("case", range(CASES))
def test_a_bad_argument_to_a_script_is_one_line_run_in_this_process(tmp_path, case):
    args, needle = _script_cases(tmp_path)[case]
    _check_one_line(run_entry(f"scripts/{args[0]}", args[1:], env={"OMP_NUM_THREADS": "1"}), args, needle)


@pytest.mark.parametrize("override, needle", [
    (["", "limit=0"], "limit must be None or >= 1, got 0"),
    pytest.param(["", "method.k=abc"], "Error merging override method.k=abc: Value 'abc' of type 'str' could not be "
                 "converted", marks=pytest.mark.slow),  # Hydra's own refusals: make test-slow
    pytest.param(["", "method=nosuch"], "Could not find 'method/nosuch' Available options in 'method'",
                 marks=pytest.mark.slow),
    (["-m", "method.m=0,20"], "got m=20 (no job of the sweep was started)"),
])
def test_a_bad_override_of_eval_run_is_one_line_and_a_nonzero_exit(tmp_path, override, needle):
    cmd = [PY, "-m", "eval.run", *filter(None, override[:1]), *TINY, *override[1:], f"output_dir={tmp_path / 'out'}",
           f"hydra.run.dir={tmp_path / 'h'}", f"hydra.sweep.dir={tmp_path / 's'}"]
    done = _run(cmd, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("eval.run: error: ") and needle in lines[0]
    assert not (tmp_path / "out").exists()


def test_rheo_debug_shows_the_traceback(tmp_path):
    done = _run([PY, "scripts/plot_learning_curve.py", "--metrics", "/nonexistent.jsonl", "--out",
                 str(tmp_path / "c.png")], tmp_path, RHEO_DEBUG="1")
    assert done.returncode != 0 and "Traceback" in done.stderr and "FileNotFoundError" in done.stderr


@pytest.mark.parametrize("bad,said", [("limit=0", "limit must be None or >= 1"),
                                       pytest.param("max_new_tokens=0", "max_new_tokens must be >= 1",
                                                    marks=pytest.mark.slow)])  # the same check: make test-slow
def test_a_study_refuses_a_bad_size_before_its_first_job(tmp_path, bad, said):
    done = subprocess.run(["make", "-s", "reproduce-tau", f"ARGS={bad} hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "no job of the sweep was started" in done.stderr
    assert not list(tmp_path.rglob("*.parquet"))


def test_make_smoke_writes_only_below_a_git_ignored_folder():
    env = {k: v for k, v in os.environ.items() if k != "RHEO_OUT"}  # the default output root
    plan = subprocess.run(["make", "-n", "smoke"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env).stdout
    words = [w.strip("\"'") for w in plan.split()]  # the Makefile quotes every path, Hydra's value once more
    outs = [w.split("=", 1)[1].strip("\"'") for w in words if w.startswith("output_dir=")]
    outs += [b for a, b in zip(words, words[1:]) if a == "--out"]
    assert len(outs) == 3 and all(o.startswith("outputs/smoke/") for o in outs), plan
    for out in outs:  # ignored by git: nothing a smoke run writes shows in `git status`
        assert subprocess.run(["git", "check-ignore", "-q", out], cwd=ROOT).returncode == 0


def test_the_progress_line_names_the_job_and_counts_turns(monkeypatch, capsys):
    from eval.conf.compose import compose_config
    from eval.conf.validate import check_run
    from eval.measure import loop
    from eval.measure import realized as runner

    monkeypatch.setenv(loop.JOB_ENV, "3/13")
    cfg = compose_config(["model=tiny_random", "method=rheo", "method.m=1", "temperature=0.5", "dataset=mt_bench"])
    bar = loop.progress_bar(cfg, runner.Realized(cfg, check_run(cfg)), 14)
    bar.update(4)
    bar.refresh()
    bar.close()
    line = capsys.readouterr().err.split("\r")[-1]
    assert line.startswith("job 3/13 rheo m=1 T=0.5 mt_bench: 4/14 rows [")
