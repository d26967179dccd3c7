"""The cluster path without a cluster: a sweep through submitit's local executor
(``hydra/launcher=submitit_local``: pickled jobs, per-job folders, rows written by other
processes) stores the same rows as Hydra's basic launcher, and a rerun resumes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store.storage import load_results

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

ROOT = Path(__file__).resolve().parents[1]
JOB = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "progress=false", "warmup=false",
       "method=rheo", "method.k=4", "method.depth=2", "method.tree_size=6", "num_threads=1"]
KEY = ["config_hash", "method", "m", "dataset", "item_id", "turn"]


def _sweep(tmp_path: Path, name: str, *launcher: str) -> Path:
    out = tmp_path / name
    cmd = [sys.executable, "-m", "eval.run", "-m", *launcher, *JOB, "method.m=0,1", f"output_dir={out}",
           f"hydra.sweep.dir={tmp_path / (name + '_sweep')}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return out


@pytest.mark.slow
def test_a_submitit_local_sweep_stores_the_basic_launchers_rows_and_resumes(tmp_path):
    basic = load_results(_sweep(tmp_path, "basic")).sort_values(KEY).reset_index(drop=True)
    out = _sweep(tmp_path, "submitit", "hydra/launcher=submitit_local")
    assert sorted(p.name for p in (tmp_path / "submitit_sweep").iterdir() if p.is_dir() and p.name.isdigit()) == \
        ["0", "1"]  # one folder per job, as on a cluster
    local = load_results(out).sort_values(KEY).reset_index(drop=True)
    assert len(local) == len(basic) == 3  # m=0 and m=1 rows, and their shared AR row
    assert local[KEY].equals(basic[KEY])
    assert local["output_tokens"].map(list).tolist() == basic["output_tokens"].map(list).tolist()
    assert local["accept_lengths"].map(list).tolist() == basic["accept_lengths"].map(list).tolist()
    stamps = sorted(local["finished_at"])
    for m in (0, 1):  # the rerun (either launcher runs these jobs) finds every row and computes none
        summary = entry.run(compose_config(JOB + [f"method.m={m}", f"output_dir={out}"]))
        assert summary.computed == 0 and summary.skipped == 2
    assert sorted(load_results(out)["finished_at"]) == stamps
