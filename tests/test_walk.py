"""Every make target and every ``rheo`` subcommand, run as a new user would in a throwaway clone that holds
only the committed files, leaves ``git status --porcelain`` empty and writes nothing outside the output
root (``outputs/``) and the system's temporary folder.

The targets are read from the Makefile, so a new target is covered by construction: the default form
reads every target's plan (``make -n``: no committed path after an output flag, no ``--inplace``, no
``--update-committed``) and runs the cheap targets and every subcommand for real; the slow form
(``make test-slow``) runs the documented rehearsals at their smallest sizes in the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rheo.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None,
                                reason="needs GNU make and git")
#: flags (and Hydra keys) whose value is a path a command writes
OUTPUT_FLAGS = ("--out", "--table", "--jsonl", "--archive", "--figure", "--figures", "--config-dir", "--output",
                "output_dir", "--rows-out")
#: targets that set up or ship a machine (their writes are the venv or a bundle, by design) or only print
NOT_WALKED = {"setup": "creates .venv", "test": "the test suite itself", "test-slow": "the test suite itself"}
#: target -> the make arguments of its cheap real run (seconds), in order: `publish` after `tables`
CHEAP = {"help": [], "tables": ["ARGS=--no-theory"], "docs": [], "publish": []}
#: target -> the make arguments of its smallest documented rehearsal (minutes; make test-slow)
SLOW = {
    "figures": ["ARGS=--no-theory"],
    "study-reports": [],
    "option-tables": [],
    "notebook": [],
    "cycle-cost": ["ARGS=--no-time --new-tokens 4"],
    "expected-replay": ["ARGS=--rows 1"],
    "calibrate-head": ["ARGS=--sequences 1 --iters 2"],
    "tune": ["ARGS=--dtypes float32 --nodes 1,2 --widths 1,2 --reps 1 --shapes 2x2x3 --prompts 1 --max-new 8 "
             "--temps 1"],
    "smoke": ["ARGS=limit=1 max_new_tokens=4"],
    "reproduce": ["ARGS=limit=1 max_new_tokens=16"],
    "publish": [],
}


def targets() -> list[str]:
    """Every target of the Makefile (as its .PHONY line reads them)."""
    text = (ROOT / "Makefile").read_text()
    return sorted({t for line in text.splitlines()
                   for t in (re.match(r"^([a-z0-9][a-z0-9 -]*):(?!=)", line) or [None, ""])[1].split()})


def make_clone(dest: Path) -> Path:
    """A clone of the checkout as it is now (changed and new files committed on top), .venv linked in."""
    git = ["git", "-c", "user.name=walk", "-c", "user.email=walk@example.invalid"]
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(dest)], check=True)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-m", "-o", "-d", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, dst = ROOT / name, dest / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.exists():
            dst.unlink()
    subprocess.run(git + ["-C", str(dest), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(dest), "commit", "-q", "--allow-empty", "-m", "the tree under test"], check=True)
    (dest / ".venv").symlink_to((ROOT / ".venv").resolve())
    os.utime(dest / "pyproject.toml", (0, 0))  # older than the venv's stamp: make does not set it up again
    return dest


def snapshot(clone: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime) of every file of the clone outside .git, .venv and the output root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(clone):
        rel = Path(dirpath).relative_to(clone)
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "outputs")]
        for name in filenames:
            st = (Path(dirpath) / name).lstat()
            out[str(rel / name)] = (st.st_size, st.st_mtime_ns)
    return out


def user_env(clone: Path) -> dict[str, str]:
    """A new user's environment in the clone: the default output root, the clone's code, bytecode in tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("RHEO_OUT", "MAKEFLAGS", "MAKELEVEL")}
    env.update(PYTHONPATH=str(clone), OMP_NUM_THREADS="1",
               PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "walk-pycache"))
    return env


def walked(clone: Path, command: list[str], timeout: int) -> subprocess.CompletedProcess:
    """Run ``command`` in the clone, then check git is clean and nothing outside outputs/ changed."""
    before = snapshot(clone)
    done = subprocess.run(command, cwd=clone, env=user_env(clone), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (command, done.stdout[-1500:], done.stderr[-3000:])
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "", (command, status.stdout)
    after = snapshot(clone)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed == [], (command, changed)
    return done


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return make_clone(tmp_path_factory.mktemp("walk") / "rheo")


def plan_problems(plan: str) -> list[str]:
    """What in a ``make -n`` plan would write outside the output root (or update committed files)."""
    problems = [w for w in ("--update-committed", "--inplace", "UPDATE_COMMITTED") if w in plan]
    words = plan.replace("=", " = ").split()
    for i, word in enumerate(words[:-1]):
        if word.strip("'\"") in OUTPUT_FLAGS:
            value = words[i + 2] if words[i + 1] == "=" and i + 2 < len(words) else words[i + 1]
            value = value.strip("'\"")
            if not re.match(r"^(outputs/|/.*/outputs/|\$\(OUT\)|/tmp/)", value) and not value.startswith("-"):
                problems.append(f"{word} {value}")
    return problems


def test_every_target_plans_its_writes_under_the_output_root(clone):
    names = targets()
    assert {"reproduce", "tune", "study-reports", "notebook", "publish", "cycle-cost"} <= set(names)
    for target in names:
        if target in NOT_WALKED:
            continue
        plan = subprocess.run(["make", "-s", "-n", "-C", str(clone), target], capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "RHEO_OUT"})
        assert plan.returncode == 0, (target, plan.stderr)
        assert plan_problems(plan.stdout) == [], (target, plan.stdout[:2000])


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
def test_the_cheap_targets_leave_git_clean_and_write_only_outputs(clone):
    for target, args in CHEAP.items():
        done = walked(clone, ["make", "-s", target, *args], timeout=600)
        assert "outputs: outputs/" in done.stderr, target  # every target says where its outputs go
    assert (clone / "outputs" / "tables" / "main.md").read_bytes() == (clone / "results" / "tables" / "main.md").read_bytes()


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
def test_every_rheo_subcommand_leaves_git_clean(clone):
    """Each subcommand once: a real run where it writes (export, tables, run, publish), else its help."""
    rheo = [sys.executable, "-m", "rheo.commands"]
    real = {
        "export": ["--results", "results/sampled_studies.parquet"],
        "tables": ["--results", "results/sampled_studies.parquet", "--out", "outputs/mine/tables", "--no-theory"],
        "run": ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=2", "warmup=false", "progress=false",
                "baseline=false", "output_dir=outputs/mine/runs"],
        "publish": [],  # last: your own folders are not published unless named, nothing else differs: exit 0
    }
    walked(clone, [*rheo, "--help"], timeout=120)
    for name in [n for n in COMMANDS if n not in real] + list(real):
        done = walked(clone, [*rheo, name, *real.get(name, ["--help"])], timeout=300)
        if name == "export":
            assert (clone / "outputs" / "exports" / "sampled_studies.csv").is_file()
            assert "outputs: outputs/" in done.stdout
    assert list((clone / "outputs" / "hydra").rglob("run.log"))  # Hydra's records: under the output root


@pytest.mark.slow
def test_the_documented_rehearsals_finish_from_a_fresh_clone(tmp_path):
    """Every rehearsal at its smallest size, in one fresh clone, in order; then publish shows and refuses."""
    fresh = make_clone(tmp_path / "rheo")
    for target, args in SLOW.items():
        if target == "publish":
            continue
        walked(fresh, ["make", "-s", target, *args], timeout=3600)
    shown = subprocess.run(["make", "-s", "publish"], cwd=fresh, capture_output=True, text=True, env=user_env(fresh))
    assert shown.returncode == 0 and "changed:" in shown.stdout and "nothing was written" in shown.stdout  # a dry run
    assert "would shrink" in shown.stdout  # a limit=1 rehearsal's archives are refused, --yes or not
    one = subprocess.run(["make", "-s", "publish", "ARGS=tables/main.md"], cwd=fresh, capture_output=True, text=True,
                         env=user_env(fresh))
    assert one.returncode == 0 and "-|" in one.stdout and "--yes" in one.stdout  # shown, nothing written
    assert subprocess.run(["git", "-C", str(fresh), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""
