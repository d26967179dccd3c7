"""Exports write only regular files and never over what they read: ``rheo export`` (CSV / JSON) and
``scripts/export_results.py`` (the parquet archive) stream into a device, a FIFO or ``-``, write
through a symlink (the link stays), refuse an output that is the input or lies inside it, and
``rheo export`` refuses a committed results file; a shard that cannot be read fails the export unless
``--skip-bad``, which names it; the CSV holds ``variant`` and ``speedup`` as ``analysis.load`` gives them."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from eval.report import export_rows
from eval.report.analysis import load
from eval.store.storage import export_results, iter_shards
from synthetic_results import write_synthetic_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import export_results as export_script  # noqa: E402


@pytest.fixture
def runs(tmp_path):
    return write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, temperatures=(1.0,), seeds=(0,),
                                   ms=(1,))


def _export(*argv) -> int:
    return export_rows.main([str(a) for a in argv])


def test_an_export_into_a_symlink_writes_through_it(runs, tmp_path):
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old")
    link.symlink_to(real)
    assert _export("--results", runs, "--out", link, "--replace") == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text().startswith("model,") and len(pd.read_csv(real)) == len(load(runs))


def test_an_export_into_a_device_or_fifo_streams_into_it(runs, tmp_path):
    null = tmp_path / "null.csv"
    null.symlink_to(os.devnull)  # a device behind a link: neither is replaced (and no --replace needed)
    assert _export("--results", runs, "--out", null) == 0
    assert null.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert _export("--results", runs, "--out", fifo, "--format", "json") == 0
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(json.loads(got[0])) == len(load(runs))


def test_an_export_to_dash_is_stdout_and_its_summary_goes_to_stderr(runs, capsysbinary):
    assert _export("--results", runs, "--out", "-") == 0
    out, err = capsysbinary.readouterr()
    assert len(pd.read_csv(io.BytesIO(out))) == len(load(runs))
    assert b"rows" in err and b"rows" not in out.splitlines()[-1]


def test_an_export_over_its_own_input_is_refused(runs, tmp_path):
    archive = tmp_path / "runs.parquet"
    export_results(runs, archive)
    before = archive.read_bytes()
    os.link(archive, tmp_path / "same.csv")  # another name of the same file
    for out in (archive, tmp_path / "same.csv"):
        with pytest.raises(ValueError, match="is the input") as err:
            _export("--results", archive, "--out", out, "--replace", "--format", "csv")
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="lies inside --results"):
        _export("--results", runs, "--out", runs / "rows.csv")
    assert archive.read_bytes() == before and not (runs / "rows.csv").exists()


def test_an_export_over_a_committed_results_file_is_refused(runs, tmp_path):
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    committed = repo / "results" / "runs.parquet"
    export_results(runs, committed)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rows"],
                   check=True)
    before = committed.read_bytes()
    with pytest.raises(ValueError, match="is committed") as err:
        _export("--results", runs, "--out", committed, "--replace", "--format", "csv")
    assert "\n" not in str(err.value) and committed.read_bytes() == before


def _truncate_one(runs: Path) -> Path:
    shard = sorted(iter_shards(runs))[0]
    shard.write_bytes(shard.read_bytes()[:50])
    return shard


def test_an_export_with_an_unreadable_shard_fails_unless_skip_bad(runs, tmp_path, capsys):
    n = len(load(runs))
    shard = _truncate_one(runs)
    out = tmp_path / "rows.csv"
    with pytest.raises(ValueError, match=rf"1 shard\(s\) .*cannot be read.*{shard.name}.*--skip-bad") as err:
        _export("--results", runs, "--out", out)
    assert "\n" not in str(err.value) and not out.exists()
    capsys.readouterr()
    assert _export("--results", runs, "--out", out, "--skip-bad") == 0
    said = capsys.readouterr().out
    assert f"skipped 1 unreadable shard(s): {shard}" in said
    assert len(pd.read_csv(out)) == n - 1


def test_the_archive_export_fails_on_an_unreadable_shard(runs, tmp_path, capsys):
    shard = _truncate_one(runs)
    assert export_script.main(["--results", str(runs), "--out", str(tmp_path / "a.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"corrupt shard {shard}" in err and "nothing written" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.parquet").exists()


def test_the_archive_export_writes_through_a_symlink_and_into_a_device(runs, tmp_path):
    real, link = tmp_path / "real.parquet", tmp_path / "link.parquet"
    link.symlink_to(real)
    assert export_script.main(["--results", str(runs), "--out", str(link)]) == 0
    assert link.is_symlink() and len(load(real)) == len(load(runs))
    null = tmp_path / "null.parquet"
    null.symlink_to(os.devnull)
    assert export_script.main(["--results", str(runs), "--out", str(null)]) == 0
    assert null.is_symlink()
    inside = tmp_path / "in.parquet"
    inside.symlink_to(runs / "rows.parquet")  # a link whose file would lie inside --results
    assert export_script.main(["--results", str(runs), "--out", str(inside)]) == 2
    assert not (runs / "rows.parquet").exists()


def test_the_csv_holds_the_variant_and_speedup_that_load_adds(runs, tmp_path):
    out = tmp_path / "rows.csv"
    assert _export("--results", runs, "--out", out) == 0
    got, want = pd.read_csv(out), load(runs)
    for col in ("variant", "speedup", "ar_partner"):
        assert col in got.columns
    assert got["variant"].tolist() == want["variant"].tolist()
    assert got["speedup"].notna().sum() > 0
    assert got["speedup"].fillna(-1).round(9).tolist() == want["speedup"].astype(float).fillna(-1).round(9).tolist()


@pytest.mark.slow
def test_the_export_help_is_whole_sentences():
    parser_text = subprocess.run([sys.executable, "-m", "eval.report.export_rows", "--help"], cwd=ROOT,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    description = parser_text.split("\n\n")[1]
    assert description.rstrip().endswith("."), description
    assert "--skip-bad" in parser_text


def test_standard_output_redirected_to_a_file_is_written_through_it(tmp_path, monkeypatch):
    """``--out /dev/stdout > file`` (or ``>> file``): the export goes through the process's own standard output,
    at its offset, and the file is neither truncated nor replaced (a name that resolves to it, here a link)."""
    from eval.store.export_out import write_out

    target = tmp_path / "redirected.csv"
    target.write_bytes(b"earlier\n")
    inode = target.stat().st_ino
    with open(target, "ab") as raw:
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, write_through=True))
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{raw.fileno()}")
        assert write_out(link, lambda f: f.write(b"a,b\n1,2\n")) == "stdout"
        sys.stdout.flush()
    assert target.read_bytes() == b"earlier\na,b\n1,2\n" and target.stat().st_ino == inode
