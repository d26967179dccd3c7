"""Committed results change only when asked in so many words, and a committed archive only grows,
with rows of its own study at its own settings: no make target passes ``--update-committed`` unless
``UPDATE_COMMITTED=yes``; a same-state or runs archive refuses to shrink or to take rows of other
settings, with ``--update-committed`` too (synthetic rows, no study is run)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval.states.tables import main as state_tables
from eval.store.state_archive import DRIVER_SCHEMA, ROW_SCHEMA, archive_paths
from eval.store.state_restore import restore_rows
from synthetic_results import write_synthetic_results
from test_same_state_tables import synthetic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import export_results  # noqa: E402

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def _commit(repo: Path, *paths: Path) -> None:
    if not (repo / ".git").exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _git(repo, "add", *map(str, paths))
    _git(repo, "commit", "-q", "-m", "rows")


def _archive(path: Path, rows: pd.DataFrame) -> Path:
    rows_path, driver_path = archive_paths(path)
    pq.write_table(pa.Table.from_pandas(rows, schema=ROW_SCHEMA, preserve_index=False), rows_path)
    pq.write_table(DRIVER_SCHEMA.empty_table(), driver_path)
    return path


def _folder(tmp_path: Path, name: str, rows: pd.DataFrame) -> Path:
    """A same-state results folder holding ``rows`` (restored from an archive of them)."""
    folder = tmp_path / name
    rows = rows.assign(device="cpu", dtype="float32")
    restore_rows(_archive(tmp_path / f"{name}_src.parquet", rows), folder)
    return folder


@needs_make
def test_no_make_target_updates_committed_results_unless_asked():
    targets = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in targets.splitlines() if line.strip()]
    assert "option-tables" in names and "reproduce" in names
    for target in names:
        if target in ("setup", "help"):
            continue
        plan = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target], capture_output=True, text=True).stdout
        assert "--update-committed" not in plan and "--replace" not in plan, target
    asked = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "option-tables", "UPDATE_COMMITTED=yes"],
                           capture_output=True, text=True).stdout
    assert "--update-committed" in asked


def test_a_committed_same_state_archive_never_shrinks_nor_mixes_settings(tmp_path, capsys):
    full = synthetic(temps=(1.0,), configs=("h_topk", "h_m1"))
    repo = tmp_path / "repo"
    repo.mkdir()
    archive = _archive(repo / "study.parquet", full)
    _commit(repo, *archive_paths(archive))
    before = archive.read_bytes()
    tiny = _folder(tmp_path, "tiny", full[full["item_id"] == 0])  # a limit=1 run: fewer rows
    for extra in ([], ["--update-committed"]):
        assert state_tables([str(tiny), "--archive", str(archive), *extra]) == 2
        err = capsys.readouterr().err
        assert "would shrink" in err and len(err.strip().splitlines()) == 1, err
    other = full.assign(driver_hash="h_short", max_new_tokens=8)  # every row, and rows of another setting
    mixed = _folder(tmp_path, "mixed", pd.concat([full, other], ignore_index=True))
    assert state_tables([str(mixed), "--archive", str(archive), "--update-committed"]) == 2
    assert "setting(s) it does not" in capsys.readouterr().err
    assert archive.read_bytes() == before
    grown = _folder(tmp_path, "grown", pd.concat([full, full.assign(item_id=full["item_id"] + 10)]))
    assert state_tables([str(grown), "--archive", str(archive)]) == 2  # grows, but committed: asked only
    assert state_tables([str(grown), "--archive", str(archive), "--update-committed"]) == 0
    assert len(pd.read_parquet(archive)) == 2 * len(full)
    both = pd.concat([full, full.assign(item_id=full["item_id"] + 10)], ignore_index=True)
    added = _folder(tmp_path, "added", pd.concat([both, both.assign(config_hash="h_new")], ignore_index=True))
    assert state_tables([str(added), "--archive", str(archive), "--update-committed"]) == 0  # a method added
    assert len(pd.read_parquet(archive)) == 4 * len(full)


def test_a_committed_runs_archive_refuses_rows_of_other_settings(tmp_path, capsys):
    runs = write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,))
    repo = tmp_path / "repo"
    repo.mkdir()
    out = repo / "runs.parquet"
    assert export_results.main(["--results", str(runs), "--out", str(out)]) == 0
    _commit(repo, out)
    more = write_synthetic_results(tmp_path / "runs", temperatures=(1.0, 0.0), seeds=(0,), ms=(1,))
    assert export_results.main(["--results", str(more), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "setting(s) it does not" in err and len(err.strip().splitlines()) == 1, err
