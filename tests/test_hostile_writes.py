"""Hostile places to write, and ``rheo publish`` checking what it writes.

The committed evidence is refused by the write door itself (rheo.io), so a writer that forgets to ask
(the harness, the engine path of ``cycle_cost.py``, ``gpu_check.py``, ``wall_clock``) cannot write there;
an empty output root is the default everywhere; a path with a space is refused by the Makefile; a
manifest that is a FIFO or a folder is one line before anything is written. ``rheo publish`` keys every
archive (drivers and the head reading too), refuses a key held twice, writes the very bytes it checked,
offers only what a project writer recorded, summarises changes and exits 0 as a dry run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from eval.store import publish
from eval.store.code_version import VersionCheck
from eval.store.committed import Outputs
from rheo import paths
from rheo.files import NotRegularFileError
from rheo.io import CommittedOutputsError, atomic_write_bytes, check_dir, make_dir, record_written

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results"
PY = sys.executable


def _run(args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


# ------------------------------------------------------------------ the door


def test_the_door_refuses_the_committed_evidence_by_place_and_through_links(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(COMMITTED)
    for target in (COMMITTED / "reproduce_time.json", link / "reproduce_time.json", link / "new" / "x.md"):
        with pytest.raises(CommittedOutputsError, match="committed evidence.*nothing was written"):
            atomic_write_bytes(target, b"x")
    with pytest.raises(CommittedOutputsError):
        make_dir(COMMITTED / "runs")
    assert not (COMMITTED / "runs").exists() and not (COMMITTED / "new").exists()


def test_the_door_refuses_non_regular_targets_without_opening_them(tmp_path):
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    (tmp_path / "folder.md").mkdir()
    for target in (fifo, tmp_path / "folder.md"):
        with pytest.raises(NotRegularFileError, match="not a regular file"):
            atomic_write_bytes(target, b"x")
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):  # not a raw errno
        make_dir(afile / "hydra" / "x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_dir(afile / "tables")


def test_an_empty_output_root_is_the_default_in_the_run_config(monkeypatch):
    from eval.conf.compose import compose_config

    monkeypatch.setenv(paths.OUT_ENV, "")
    cfg = compose_config(["model=tiny_random"])
    assert cfg.out_root == "outputs" and cfg.output_dir == "outputs/runs"  # not "" and "/runs"


def test_the_harness_checks_its_places_before_hydra_makes_a_folder(tmp_path):
    from eval.conf.sweep import check_places

    link = tmp_path / "out"
    link.symlink_to(COMMITTED)
    for output_dir, record in ((str(COMMITTED / "runs"), str(tmp_path / "h")), ("results/new", str(tmp_path / "h")),
                               (str(link / "runs"), str(tmp_path / "h")), (str(tmp_path / "r"), str(link / "hydra"))):
        with pytest.raises(CommittedOutputsError, match="committed evidence"):
            check_places(output_dir, record)
    assert not (tmp_path / "h").exists() and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_run_with_the_output_root_in_the_committed_evidence_makes_nothing():
    done = _run(["-m", "eval.run", "model=tiny_random", "limit=1", "max_new_tokens=2"], {paths.OUT_ENV: "results"})
    assert done.returncode == 2 and "committed evidence" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (COMMITTED / "runs").exists() and not (COMMITTED / "hydra").exists()


@pytest.mark.parametrize("script, argv", [
    ("cycle_cost", ["--engine", "static", "--out", "results/tables"]),
    ("cycle_cost", ["--engine", "graphs", "--out", str(COMMITTED / "tables")]),
    ("gpu_check", ["--device", "cpu", "--out", "results/gpu/h200-2026-12-04"]),
])
def test_scripts_refuse_a_committed_output_folder_before_their_work(script, argv, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    module = __import__(script)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [script, *argv])
    monkeypatch.setattr(module, "load_cost_pair" if script == "cycle_cost" else "load_pair",
                        lambda *a, **k: pytest.fail("the work started before the output folder was checked"))
    before = {p: p.read_bytes() for p in (COMMITTED / "tables").glob("cycle_cost_*")}
    with pytest.raises(CommittedOutputsError, match="committed evidence"):
        module.main() if script == "cycle_cost" else module.parse(argv)
    assert {p: p.read_bytes() for p in (COMMITTED / "tables").glob("cycle_cost_*")} == before


def test_the_wall_clock_refuses_the_committed_record(tmp_path):
    from eval.measure import wall_clock

    clock, record = tmp_path / "clock.json", COMMITTED / "reproduce_time.json"
    before = record.read_bytes()
    assert wall_clock.main(["start", str(clock)]) == 0
    with pytest.raises(CommittedOutputsError, match="committed evidence"):
        wall_clock.main(["finish", str(clock), str(record)])
    assert record.read_bytes() == before


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_the_makefile_refuses_a_path_with_a_space_and_reads_an_empty_out_as_the_default():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", paths.OUT_ENV)}
    make = ["make", "--no-print-directory", "-n", "-o", ".venv/.rheo-setup"]
    for target in ("reproduce", "smoke", "speed-launches", "expected-replay", "calibrated-cells", "notebook"):
        done = subprocess.run([*make, target, "OUT=my outputs"], cwd=ROOT, capture_output=True, text=True, env=env)
        assert done.returncode == 2 and "holds a space" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert not done.stdout  # nothing planned, nothing run
    done = subprocess.run([*make, "smoke", "OUT="], cwd=ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "outputs/smoke/runs" in done.stdout and " /smoke" not in done.stdout
    done = subprocess.run([*make, "smoke", "speed-launches", "SMOKE=my smoke", "TABLES=my tables"], cwd=ROOT,
                          capture_output=True, text=True, env=env)  # folders of their own may hold spaces
    words = [w for line in done.stdout.splitlines() for w in shlex.split(line)]
    assert done.returncode == 0 and "my smoke/tables" in words and "output_dir='my smoke/runs'" in words
    assert '--out "my tables/$s"' in done.stdout


def test_an_integer_code_version_is_a_version_not_a_type_error(tmp_path):
    check = VersionCheck(current="abc123def456")
    assert not check.reusable(123456, tmp_path / "a") and check.reusable("abc123def456", tmp_path / "b")
    assert "123456" in check.lines()[0]


# ------------------------------------------------------------------ manifests


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_manifest_that_is_not_a_file_is_one_line_before_anything_is_written(tmp_path, kind):
    out = tmp_path / "tables"
    out.mkdir()
    manifest = out / ".rheo-written.json"
    os.mkfifo(manifest) if kind == "fifo" else manifest.mkdir()
    outputs = Outputs(out)
    outputs.add(out / "main.md", b"| a |\n")
    done = []
    writer = threading.Thread(target=lambda: done.append(_error(lambda: outputs.write(("*.md",), tmp_path))),
                              daemon=True)
    writer.start()
    writer.join(10)
    assert done and isinstance(done[0], NotRegularFileError), "the writer hangs on the manifest"
    assert "manifest" in str(done[0]) and not (out / "main.md").exists()


def _error(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- returned to the test
        return e
    return None


# ------------------------------------------------------------------ publish


@pytest.fixture
def places(tmp_path, monkeypatch) -> tuple[Path, Path]:
    committed, out = tmp_path / "results", tmp_path / "outputs"
    committed.mkdir()
    out.mkdir()
    monkeypatch.setattr(paths, "COMMITTED", committed)
    monkeypatch.setenv(paths.OUT_ENV, str(out))
    return committed, out


def _written(path: Path, frame: pd.DataFrame) -> Path:
    """``frame`` at ``path`` as a project writer leaves it (listed in its folder's manifest)."""
    frame.to_parquet(path, index=False)
    record_written([path])
    return path


@pytest.mark.parametrize("name", ["same_state.driver.parquet", "head_reading.parquet"])
def test_publish_keys_driver_archives_and_the_head_reading(places, capsys, name):
    committed, out = places
    shutil.copy(COMMITTED / name, committed / name)
    full = pd.read_parquet(COMMITTED / name)
    _written(out / name, full.head(1))
    assert publish.main(["--yes"]) == 2 and "would shrink" in capsys.readouterr().err
    assert pd.read_parquet(committed / name).equals(full)


def test_publish_refuses_an_archive_holding_its_rows_twice(places, capsys):
    committed, out = places
    shutil.copy(COMMITTED / "runs.parquet", committed / "runs.parquet")
    rows = pd.read_parquet(COMMITTED / "runs.parquet")
    _written(out / "runs.parquet", pd.concat([rows, rows], ignore_index=True))
    assert publish.main([]) == 0  # a dry run shows it refused
    assert "refused:" in capsys.readouterr().out
    assert publish.main(["--yes"]) == 2 and "share their key" in capsys.readouterr().err
    assert len(pd.read_parquet(committed / "runs.parquet")) == len(rows)


def test_publish_writes_the_bytes_it_checked(places, monkeypatch, capsys):
    committed, out = places
    shutil.copy(COMMITTED / "runs.parquet", committed / "runs.parquet")
    rows = pd.read_parquet(COMMITTED / "runs.parquet")
    mine = _written(out / "runs.parquet", rows.assign(wall_s=rows["wall_s"] + 1.0))
    checked = mine.read_bytes()
    real = publish.check

    def check_then_replace(path, twin, *data):  # another command replaces the archive meanwhile
        real(path, twin, *data)
        rows.head(1).to_parquet(path, index=False)

    monkeypatch.setattr(publish, "check", check_then_replace)
    assert publish.main(["--yes"]) == 0
    assert (committed / "runs.parquet").read_bytes() == checked


def test_publish_summarises_changed_values_and_offers_only_recorded_files(places, capsys):
    committed, out = places
    shutil.copy(COMMITTED / "methods_smoke.parquet", committed / "methods_smoke.parquet")
    (committed / "tables").mkdir()
    (committed / "tables" / "main.md").write_text("".join(f"| {i} |\n" for i in range(100)))
    rows = pd.read_parquet(COMMITTED / "methods_smoke.parquet")
    _written(out / "methods_smoke.parquet", rows.assign(wall_s=rows["wall_s"] * 2))
    (out / "tables").mkdir()
    (out / "tables" / "main.md").write_text("".join(f"| {i + 1} |\n" for i in range(100)))
    record_written([out / "tables" / "main.md"])
    pd.DataFrame({"a": range(50)}).to_csv(out / "mine_rows.csv", index=False)  # the user's own export
    assert publish.main([]) == 0
    shown = capsys.readouterr().out
    assert f"rows {len(rows)} -> {len(rows)} (0 added, 0 removed, {len(rows)} with changed values)" in shown
    assert "(+1 -1 lines)" in shown and len(shown.splitlines()) < 20  # a summary, not the whole file
    assert "mine_rows" not in shown and "dry run: nothing was written" in shown


def test_publish_paths_are_normalised_and_checked(places, tmp_path, capsys):
    committed, out = places
    (committed / "tables").mkdir()
    (committed / "tables" / "main.md").write_text("old\n")
    (out / "tables").mkdir()
    atomic_write_bytes(out / "tables" / "main.md", b"new\n", record=True)
    assert publish.main([str(out / "tables" / ".." / "tables")]) == 0 and "+new" in capsys.readouterr().out
    assert publish.main(["./tables/"]) == 0 and "+new" in capsys.readouterr().out
    assert publish.main([str(tmp_path)]) == 2 and "not under the output root" in capsys.readouterr().err
    (out / "linked").symlink_to(out / "tables")
    assert publish.main(["linked"]) == 2 and "is a symlink" in capsys.readouterr().err
    assert publish.main(["nothing_here"]) == 2 and "nothing there" in capsys.readouterr().err
