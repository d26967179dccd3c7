"""Outputs never land outside their folder, and no command destroys committed results by mistake:
hostile row values in figure names, tables/figures over files tracked by git, archive exports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store import storage
from eval.store.committed import CommittedOutputsError
from rheo.io import child_path, safe_file_name

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "results" / "runs.parquet"
SAMPLED = ROOT / "results" / "sampled_studies.parquet"  # the 32-token study rows: several figures
sys.path.insert(0, str(ROOT / "scripts"))
import export_results  # noqa: E402
import make_figures  # noqa: E402
import make_tables  # noqa: E402


def _archive(path: Path, query: str, source: Path = ARCHIVE, **columns) -> Path:
    """Rows of a committed archive (``query``), with ``columns`` overwritten, as a new archive."""
    return _write(pd.read_parquet(source).query(query).assign(**columns), path)


def _write(df: pd.DataFrame, path: Path) -> Path:
    newer = [c for c in storage.COLUMNS if c not in df.columns]
    df = df.reindex(columns=list(storage.COLUMNS))
    for column in newer:  # columns newer than the archive: None (a list column cannot hold NaN)
        df[column] = pd.Series([None] * len(df), index=df.index, dtype=object)
    pq.write_table(pa.Table.from_pandas(df, schema=storage.ROW_SCHEMA, preserve_index=False), path)
    return path


@pytest.mark.parametrize("name", ["cpu/../../../PWNED", "/tmp/PWNED", "..", "../PWNED", "a/b\\c:d"])
def test_a_data_built_name_stays_one_file_in_its_folder(tmp_path, name):
    path = child_path(tmp_path / "out", f"m_ablation_{name}.png")
    assert path.parent == tmp_path / "out" and "/" not in safe_file_name(name) and ".." not in path.name


@pytest.mark.slow  # draws every figure of three row sets (half a minute): make test-slow
def test_hostile_devices_in_rows_cannot_move_figures_out_of_out(tmp_path):
    rows = []
    for device in ("cpu/../../../PWNED", "/tmp/ABS_PWNED", ".."):
        part = pd.read_parquet(SAMPLED).query("max_new_tokens == 32 and seed == 0").assign(device=device)
        rows.append(part.assign(config_hash=part["config_hash"] + device))  # one set of rows per device
    src = _write(pd.concat(rows), tmp_path / "hostile.parquet")
    out = tmp_path / "a" / "b" / "figures"
    written = make_figures.make_figures(src, out, theory=False)
    assert len(written) >= 6 and all(p.parent == out for p in written)
    pngs = [p for p in tmp_path.rglob("*.png")]
    assert sorted(pngs) == sorted(written) and not Path("/tmp/ABS_PWNED.png").exists()
    assert not list(tmp_path.rglob("PWNED*")) and not list(Path("/tmp").glob("*PWNED*.png"))


def _git_repo(path: Path) -> Path:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(path)]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "tables").mkdir()
    for name in ("main.md", "m_ablation.md"):
        (path / "tables" / name).write_text(f"committed {name}\n")
    subprocess.run(git + ["add", "tables"], check=True)
    subprocess.run(git + ["commit", "-qm", "tables"], check=True)
    return path / "tables"


def test_tables_from_other_rows_leave_committed_tables_alone(tmp_path):
    out = _git_repo(tmp_path / "repo")
    smoke = _archive(tmp_path / "smoke.parquet", "max_new_tokens == 128 and item_id < 2")  # a few main-table rows
    with pytest.raises(CommittedOutputsError, match=r"main.md is committed to git: nothing was written"):
        make_tables.make_tables(smoke, out, theory=False)
    assert (out / "main.md").read_text() == "committed main.md\n" and (out / "m_ablation.md").exists()
    assert not (out / "runs.md").exists()  # nothing at all was written
    status = subprocess.run(["git", "-C", str(out), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""


@pytest.mark.slow  # draws every figure twice (half a minute): make test-slow
def test_figures_are_checked_the_same_way_even_with_identical_bytes(tmp_path):
    out = _git_repo(tmp_path / "repo").parent / "figures"
    src = _archive(tmp_path / "m.parquet", "max_new_tokens == 32 and seed == 0", SAMPLED)
    first = make_figures.make_figures(src, out, theory=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(out)]
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "figures"], check=True)
    drawn = {p: p.read_bytes() for p in first}
    with pytest.raises(CommittedOutputsError, match="is committed to git"):  # committed: read-only, same bytes too
        make_figures.make_figures(src, out, theory=False)
    fewer = _archive(tmp_path / "t.parquet", "max_new_tokens == 32 and seed == 0 and method == 'topk'", SAMPLED)
    with pytest.raises(CommittedOutputsError, match="is committed"):
        make_figures.make_figures(fewer, out, theory=False)
    assert {p: p.read_bytes() for p in out.glob("*.png")} == drawn


def _results(tmp_path: Path, name: str, limit: int) -> Path:
    out = tmp_path / name
    entry.run(compose_config(["model=tiny_random", "max_new_tokens=3", "method.k=4", "method.depth=2",
                               "method.tree_size=6", "progress=false", "warmup=false", "dataset=gsm8k",
                               f"limit={limit}", f"output_dir={out}"]))
    return out


def test_export_never_destroys_an_archive_by_mistake(tmp_path, capsys):
    full = _results(tmp_path, "full", 2)
    archive = tmp_path / "runs.parquet"
    assert export_results.main(["--results", str(full), "--out", str(archive)]) == 0
    before = archive.read_bytes()
    assert len(storage.load_results(archive, include_failed=True)) == 4

    cases = [(["--results", str(archive), "--out", str(archive)], "is an archive (a file), not a results directory"),
             (["--results", str(full), "--out", str(full / "x.parquet")], "lies inside --results"),
             (["--results", str(_results(tmp_path, "small", 1)), "--out", str(archive)],
              "holds 2 row(s) that are not under"),
             (["--results", str(full), "--out", str(tmp_path / "runs.csv")], "must end in .parquet")]
    empty = tmp_path / "empty"
    storage.prepare_output_dir(empty)
    cases.append((["--results", str(empty), "--out", str(archive)], "holds no rows: nothing to export"))
    for argv, needle in cases:
        assert export_results.main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1 and archive.read_bytes() == before
    assert export_results.main(["--results", str(tmp_path / "small"), "--out", str(archive), "--replace"]) == 0
    assert len(storage.load_results(archive, include_failed=True)) == 2
    assert not list(tmp_path.glob(f"{storage.TMP_PREFIX}*"))
