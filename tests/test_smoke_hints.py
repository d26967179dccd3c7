"""Every hint `make smoke` prints runs as printed from the checkout: the tables command of each job
(the interpreter's own `rheo`, e.g. .venv/bin/rheo, since `make setup` puts nothing on PATH) names
the tables folder the smoke target writes, and rerunning it as printed succeeds; `rheo tables --help`
calls itself `rheo tables`. On the tiny random pair, one item, a few tokens."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inprocess import run_entry

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~1.5 min: two runs, tables and figures; the fast subset is below
@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_the_commands_make_smoke_prints_run_as_printed(tmp_path):
    smoke = tmp_path / "smoke"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = (f"model=tiny_random dataset=gsm8k limit=1 max_new_tokens=4 progress=false warmup=false "
            f"hydra.sweep.dir={tmp_path / 'multirun'}")
    # VENV_STAMP= : the interpreter running the tests, not a fresh `make setup`
    done = subprocess.run(["make", "-s", "smoke", "VENV_STAMP=", f"SMOKE={smoke}", f"PY={sys.executable}", f"ARGS={args}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    hints = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("tables: ")]
    assert len(hints) == 2, done.stdout  # one per job: topk, rheo
    assert f"smoke: rows in {smoke}/runs, tables in {smoke}/tables, figures in {smoke}/figures" in done.stdout
    written = {p.name: p.read_bytes() for p in (smoke / "tables").glob("*.md")}
    assert written and (smoke / "figures").is_dir()
    for hint in hints:
        words = shlex.split(hint)
        assert words[words.index("--out") + 1] == str(smoke / "tables"), hint  # the folder smoke wrote
        assert Path(ROOT / words[0]).is_file() or shutil.which(words[0]), f"{words[0]} does not run from the checkout"
        shutil.rmtree(smoke / "tables")
        again = subprocess.run(hint, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, (hint, again.stderr[-2000:])
        assert {p.name: p.read_bytes() for p in (smoke / "tables").glob("*.md")} == written


@pytest.mark.slow
def test_rheo_tables_help_calls_itself_rheo_tables():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in ("tables", "figures"):
        done = subprocess.run([sys.executable, "-m", "rheo.commands", command, "--help"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: rheo {command} "), done.stdout[:300]


def test_a_runs_tables_hint_names_the_folder_make_writes_and_a_program_that_exists(tmp_path, monkeypatch):
    from eval.measure.summary import rows_went

    monkeypatch.chdir(ROOT)
    line = rows_went(tmp_path / "smoke" / "runs", "m", {"rheo": "abc"}).splitlines()[1]
    words = shlex.split(line.split(": ", 1)[1])
    assert words[1:] == ["tables", "--results", str(tmp_path / "smoke" / "runs"), "--out",
                         str(tmp_path / "smoke" / "tables"), "--no-theory"]
    assert (ROOT / words[0]).is_file() and os.access(ROOT / words[0], os.X_OK), words[0]
    assert rows_went(tmp_path / "mine", "m", {}).splitlines()[1].split("--out ")[1].startswith(str(tmp_path / "mine"))


def test_rheo_export_writes_csv_and_json_with_every_row_and_column(tmp_path):
    import json

    import pandas as pd

    from eval.report.analysis import DERIVED_COLUMNS
    from eval.store.storage import load_results

    archive = ROOT / "results" / "runs.parquet"
    rows = load_results(archive)
    for fmt in ("csv", "json"):
        out = tmp_path / f"rows.{fmt}"
        done = run_entry("rheo.commands", ["export", "--results", str(archive), "--out", str(out)])
        assert done.returncode == 0 and f"wrote {out}: {len(rows)} rows, {fmt}" in done.stdout, done.stderr
        back = pd.read_csv(out) if fmt == "csv" else pd.DataFrame(json.loads(out.read_text()))
        assert list(back.columns) == list(rows.columns) + list(DERIVED_COLUMNS) and len(back) == len(rows)
        lengths = back["accept_lengths"].map(json.loads) if fmt == "csv" else back["accept_lengths"]
        assert [list(x) for x in lengths] == [list(x) for x in rows["accept_lengths"]]
        again = run_entry("rheo.commands", ["export", "--results", str(archive), "--out", str(out)])
        assert again.returncode == 2 and again.stderr.startswith("rheo export: error: --out ") and "--replace" in again.stderr
