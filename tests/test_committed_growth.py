"""Committed results change only by ``make publish`` (``rheo publish``), and a committed archive only
grows, with rows of its own study at its own settings: no make target takes an update flag any more;
reports write archives under the output root, and publishing one refuses to shrink the committed
archive or to mix rows of other settings into it, ``--yes`` or not (synthetic rows, no study is run)."""

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
from eval.store import publish
from eval.store.state_archive import DRIVER_SCHEMA, ROW_SCHEMA, archive_paths
from eval.store.state_restore import restore_rows
from rheo import paths
from synthetic_results import write_synthetic_results
from test_same_state_tables import synthetic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import export_results  # noqa: E402

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture
def places(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(a committed results folder, an output root) of one test."""
    committed, out = tmp_path / "results", tmp_path / "outputs"
    committed.mkdir()
    monkeypatch.setattr(paths, "COMMITTED", committed)
    monkeypatch.setenv(paths.OUT_ENV, str(out))
    return committed, out


def _archive(path: Path, rows: pd.DataFrame) -> Path:
    rows_path, driver_path = archive_paths(path)
    rows_path.parent.mkdir(parents=True, exist_ok=True)
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
def test_no_make_target_updates_committed_results_but_publish():
    targets = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in targets.splitlines() if line.strip()]
    assert "option-tables" in names and "reproduce" in names and "publish" in names
    for target in names:
        if target in ("setup", "help"):
            continue
        plan = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target, "UPDATE_COMMITTED=yes"],
                              capture_output=True, text=True).stdout
        assert "--update-committed" not in plan and "--replace" not in plan, target
        assert ("publish" in plan) == (target == "publish"), target


def test_a_committed_same_state_archive_never_shrinks_nor_mixes_settings(tmp_path, places, capsys):
    committed, out = places
    full = synthetic(temps=(1.0,), configs=("h_topk", "h_m1"))
    archive = _archive(committed / "study.parquet", full)
    before = archive.read_bytes()
    mine = out / "study.parquet"
    tiny = _folder(tmp_path, "tiny", full[full["item_id"] == 0])  # a limit=1 run: fewer rows
    assert state_tables([str(tiny), "--archive", str(archive)]) == 2  # never written in place
    assert "committed evidence" in capsys.readouterr().err
    assert state_tables([str(tiny), "--archive", str(mine)]) == 0  # under the output root: written
    capsys.readouterr()
    assert publish.main([]) == 0  # a dry run: shown with its refusal, nothing written
    assert "refused:" in capsys.readouterr().out
    assert publish.main(["--yes"]) == 2
    err = capsys.readouterr().err
    assert "would shrink" in err and len(err.strip().splitlines()) == 1, err
    other = full.assign(driver_hash="h_short", max_new_tokens=8)  # every row, and rows of another setting
    assert state_tables([str(_folder(tmp_path, "mixed", pd.concat([full, other], ignore_index=True))),
                         "--archive", str(mine)]) == 0
    capsys.readouterr()
    assert publish.main(["--yes"]) == 2 and "setting(s) it does not" in capsys.readouterr().err
    assert archive.read_bytes() == before
    both = pd.concat([full, full.assign(item_id=full["item_id"] + 10)], ignore_index=True)
    assert state_tables([str(_folder(tmp_path, "grown", both)), "--archive", str(mine)]) == 0
    assert publish.main([]) == 0 and archive.read_bytes() == before  # grows, but only with --yes
    assert publish.main(["--yes"]) == 0 and len(pd.read_parquet(archive)) == 2 * len(full)
    added = _folder(tmp_path, "added", pd.concat([both, both.assign(config_hash=both["config_hash"] + "_new")], ignore_index=True))
    assert state_tables([str(added), "--archive", str(mine)]) == 0
    assert publish.main(["--yes"]) == 0 and len(pd.read_parquet(archive)) == 4 * len(full)  # a method added


def test_a_committed_runs_archive_refuses_rows_of_other_settings(tmp_path, places, capsys):
    committed, out = places
    runs = write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,))
    assert export_results.main(["--results", str(runs), "--out", str(committed / "runs.parquet")]) == 2
    assert "committed evidence" in capsys.readouterr().err
    assert export_results.main(["--results", str(runs), "--out", str(out / "runs.parquet")]) == 0
    assert publish.main(["--yes"]) == 0  # a new committed archive
    more = write_synthetic_results(tmp_path / "runs", temperatures=(1.0, 0.0), seeds=(0,), ms=(1,))
    assert export_results.main(["--results", str(more), "--out", str(out / "runs.parquet")]) == 0
    assert publish.main(["--yes"]) == 2
    err = capsys.readouterr().err
    assert "setting(s) it does not" in err and len(err.strip().splitlines()) == 1, err
