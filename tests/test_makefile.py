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
    # TAU=echo SS=echo: each job prints its overrides instead of running a model
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "reproduce-tau", "TAU=echo", "SS=echo",
                          f"TAU_JOBFILE={jobfile}", *args], capture_output=True, text=True, check=True)
    listed = jobfile.read_text().splitlines()
    echoed = [line for line in out.stdout.splitlines() if "=" in line and not line.startswith(("awk", "RHEO"))]
    assert len(echoed) == len(listed)  # xargs ran each job once
    return listed


def _kv(job: str) -> dict:
    return dict(re.findall(r'"?(\S+?)=(\S+?)"?(?=\s|$)', job))


def test_reproduce_tau_lists_the_main_table_then_the_same_state_studies(tmp_path):
    jobs = _jobs(tmp_path, MAIN_ITEMS="24", SS_ITEMS="3", MAX_NEW="128", SS_MAX_NEW="32", SS_TEMPS="0.5,0.0")
    kvs = [_kv(j) for j in jobs]
    assert len(jobs) == 5
    main = [(kv["experiment"], kv["method"], kv.get("method.m", "-"), kv["limit"], kv["max_new_tokens"]) for kv in kvs[:2]]
    assert main == [("main_table", "topk", "-", "24", "128"), ("main_table", "rheo", "1", "24", "128")]
    studies = kvs[2:]
    assert [kv["temperature"] for kv in studies] == ["1.0", "0.5", "0.0"]  # higher T first: longer jobs
    assert all(kv["limit"] == "3" and kv["max_new_tokens"] == "32" and kv["method"] == "topk" for kv in studies)
    ablation = re.findall(r"\{name:rheo,m:(\d)\}", jobs[2])
    assert "{name:topk}" in jobs[2] and ablation == ["0", "1", "2", "3", "4"]  # T=1: Top-K and m=0..4
    for job in jobs[3:]:
        assert "{name:topk}" in job and re.findall(r"\{name:rheo,m:(\d)\}", job) == ["0", "1", "2"]
    # every job has its own Hydra log folder (two started in one second must not share one)
    dirs = [re.search(r"hydra\.(?:sweep|run)\.dir=(\S+)", j).group(1) for j in jobs]
    assert len(set(dirs)) == len(dirs)


def test_reproduce_tau_follows_the_study_temperatures(tmp_path):
    jobs = _jobs(tmp_path, SS_TEMPS="0.75,0.25")
    temps = [_kv(j)["temperature"] for j in jobs[2:]]
    assert temps == ["1.0", "0.75", "0.25"]  # higher T first: longer jobs


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
