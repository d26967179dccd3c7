"""Harness from the command line: a SIGKILL mid-run loses nothing, Hydra multirun sweeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.store import storage
from eval.store.storage import load_results

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model=tiny_random", "max_new_tokens=5", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false"]


def _cmd(*overrides: str, multirun: bool = False) -> list[str]:
    return [sys.executable, "-m", "eval.run", *(["-m"] if multirun else []), *TINY, *overrides]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "1"}


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_completes_without_duplicates(tmp_path):
    out = tmp_path / "out"
    cmd = _cmd("dataset=gsm8k", "limit=12", "baseline=false", f"output_dir={out}",
               f"hydra.run.dir={tmp_path / 'hydra'}")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while len(list(storage.iter_shards(out))) < 3:
            assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no shard appeared in time"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    partial = load_results(out, include_failed=True)
    assert 3 <= len(partial) < 12 and not partial.attrs["corrupt_shards"]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    df = load_results(out, include_failed=True)
    assert len(df) == 12 and (df["status"] == "ok").all() and not df.attrs["corrupt_shards"]
    assert not df.duplicated(["config_hash", "dataset", "item_id", "turn"]).any()
    assert not list(out.rglob(f"{storage.TMP_PREFIX}*"))


@pytest.mark.slow
def test_multirun_sweep_over_m_and_temperature(tmp_path):
    out = tmp_path / "out"
    cmd = _cmd("dataset=gsm8k", "limit=1", "baseline=false", "method=rheo", "method.m=0,1",
               "temperature=0,1.0", f"output_dir={out}", f"hydra.sweep.dir={tmp_path / 'multirun'}", multirun=True)
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    df = load_results(out)
    assert len(df) == 4 and df["config_hash"].nunique() == 4
    assert set(zip(df["m"], df["temperature"])) == {(0, 0.0), (0, 1.0), (1, 0.0), (1, 1.0)}


@pytest.mark.slow  # a real `python -m eval.run` process (test_entry_points.py keeps one per kind of refusal): make test-slow
def test_cli_rejects_bad_input_before_loading(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(_cmd("method.m=10", f"output_dir={out}", f"hydra.run.dir={tmp_path / 'h'}"), cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "m must be in" in done.stderr
    assert not out.exists()
