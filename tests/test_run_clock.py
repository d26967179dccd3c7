"""eval.measure.wall_clock: a make target's own wall-time record."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from eval.measure import wall_clock as run_clock

ROOT = Path(__file__).resolve().parents[1]


def test_start_then_finish_records_the_wall_time(tmp_path):
    clock, out = tmp_path / "clock.json", tmp_path / "time.json"
    assert run_clock.main(["start", str(clock)]) == 0
    started = json.loads(clock.read_text())
    earlier = dt.datetime.fromisoformat(started["start_utc"]) - dt.timedelta(minutes=3, seconds=7)
    clock.write_text(json.dumps({**started, "start_utc": earlier.isoformat()}))  # as if started 3 min 7 s ago
    assert run_clock.main(["finish", str(clock), str(out), "--target", "make demo"]) == 0
    rec = json.loads(out.read_text())
    assert rec["target"] == "make demo" and rec["git_sha"] == started["git_sha"]
    assert 187 <= rec["wall_s"] <= 187 + 60 and rec["wall"].startswith("3 min ")
    assert rec["cores"] >= 1 and rec["cpu"]


def test_finish_without_a_start_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "eval.measure.wall_clock", "finish", str(tmp_path / "none.json"),
                           str(tmp_path / "t.json")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "eval.measure.wall_clock start" in done.stderr
    assert not (tmp_path / "t.json").exists()


def test_make_reproduce_brackets_itself_with_the_clock():
    plan = subprocess.run(["make", "-s", "-n", "reproduce", "VENV_STAMP="], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout.splitlines()
    clock = [i for i, line in enumerate(plan) if "eval.measure.wall_clock" in line]
    work = [i for i, line in enumerate(plan) if "-m eval." in line and "eval.measure.wall_clock" not in line]
    assert len(clock) == 2 and "start" in plan[clock[0]] and work and clock[0] < min(work)
    root = os.environ["RHEO_OUT"]  # the output root (tests/conftest.py): the record is the user's, never committed
    assert "finish" in plan[clock[1]] and plan[clock[1]].endswith(f" {root}/reproduce_time.json")
    assert clock[1] == max(i for i, line in enumerate(plan) if line.strip())  # the last command
