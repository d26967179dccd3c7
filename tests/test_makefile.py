"""The Makefile's reproduce-tau job list: every tau configuration once, longest first."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _jobs(tmp_path: Path, **variables: str) -> list[str]:
    jobfile = tmp_path / "jobs"
    args = [f"{k}={v}" for k, v in variables.items()]
    # TAU=echo: each job prints its overrides instead of running a model
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "reproduce-tau", "TAU=echo", f"TAU_JOBFILE={jobfile}", *args],
                         capture_output=True, text=True, check=True)
    listed = jobfile.read_text().splitlines()
    echoed = [line for line in out.stdout.splitlines() if line.startswith("experiment=")]
    assert sorted(echoed) == sorted(line.removeprefix("echo ") for line in listed)  # xargs ran each job once
    return listed


def _key(job: str) -> tuple:
    kv = dict(re.findall(r"(\S+?)=(\S+)", job))
    return kv["experiment"], kv["method"], kv.get("method.m", "-"), kv.get("temperature", "exp"), kv["max_new_tokens"]


def test_reproduce_tau_lists_each_configuration_once_main_table_first(tmp_path):
    jobs = _jobs(tmp_path, MAIN_ITEMS="24", ITEMS="8", MAX_NEW="128", STUDY_MAX_NEW="32", STUDY_TEMPS="0,0.5")
    keys = [_key(j) for j in jobs]
    assert len(keys) == len(set(keys)) == 13
    assert keys[:2] == [("main_table", "topk", "-", "exp", "128"), ("main_table", "rheo", "1", "exp", "128")]
    ablation = {(m, k[2]) for k in keys if k[0] == "m_ablation" for m in [k[1]]}
    assert ablation == {("topk", "0"), ("rheo", "0"), ("rheo", "1"), ("rheo", "2"), ("rheo", "3")}
    temps = [(k[3], k[1], k[2]) for k in keys if k[0] == "temperature"]
    assert sorted(temps) == sorted((t, meth, m) for t in ("0", "0.5") for meth, m in
                                   (("topk", "0"), ("rheo", "0"), ("rheo", "1")))
    assert [t for t, _, _ in temps] == ["0.5"] * 3 + ["0"] * 3  # higher T first: longer jobs
    assert all(k[4] == "32" for k in keys[2:])
    # every job has its own Hydra log folder (two started in one second must not share one)
    dirs = [re.search(r"hydra\.sweep\.dir=(\S+)", j).group(1) for j in jobs]
    assert len(set(dirs)) == len(dirs)


def test_reproduce_tau_follows_the_study_temperatures(tmp_path):
    jobs = _jobs(tmp_path, STUDY_TEMPS="0.25")
    temps = {_key(j)[3] for j in jobs if "experiment=temperature" in j}
    assert temps == {"0.25"} and len(jobs) == 10


def _reads(results: Path) -> str:
    out = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "tables", f"RESULTS={results}"],
                         capture_output=True, text=True, check=True).stdout
    return re.search(r'--results "([^"]*)"', out).group(1)


def test_tables_read_the_results_folder_else_its_committed_archive(tmp_path):
    runs = tmp_path / "runs"
    assert _reads(runs) == str(runs)  # neither exists: the script names the missing folder
    (tmp_path / "runs.parquet").write_bytes(b"")
    assert _reads(runs) == f"{runs}.parquet"  # a fresh clone: the archive
    runs.mkdir()
    (runs / "MANIFEST.json").write_text("{}")
    assert _reads(runs) == str(runs)  # rows of a run: the folder
    assert _reads(tmp_path / "runs.parquet") == f"{runs}.parquet"
