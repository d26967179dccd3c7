"""Your runs never touch the committed evidence: every command writes under one output root
(``outputs/``, ``RHEO_OUT=`` / ``out_root=``), the committed results are read-only input that readers
fall back to (saying so), and ``rheo publish`` is the one way to change them.

* the writers that defaulted into results/ (cycle cost, head calibration, the expected replay, the tune
  and its presets, head reading, the exports) default under the output root, and refuse a committed
  path before any work;
* ``rheo generate`` reads this machine's tuned tree when ``make tune`` wrote one, else the committed one,
  and says which;
* the guard holds where git cannot answer (no git on PATH) and asks git in the file's own folder, not in
  the working folder;
* tables and figures remove as stale only what a writer of theirs wrote (a manifest), never a user's file;
* no command or target takes ``--update-committed`` / ``UPDATE_COMMITTED`` any more;
* ``--all`` reports go on past a failing study and end with a summary and a non-zero exit;
* a refused ``output_dir`` gets nothing written into it (Hydra's files lie under the output root);
* ``rheo publish`` shows the changes, refuses without ``--yes``, refuses a shrinking or mixed archive
  even with it, and with it copies the rest into the committed place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from eval.store.committed import MANIFEST, CommittedOutputsError, Outputs, refuse_committed, write_outputs
from rheo import paths
from rheo.io import atomic_write_text, record_written

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_figures  # noqa: E402
import make_tables  # noqa: E402
import report  # noqa: E402

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
RUNS = ROOT / "results" / "runs.parquet"
SAMPLED = ROOT / "results" / "sampled_studies.parquet"


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """A fresh output root for one test."""
    out = tmp_path / "outputs"
    monkeypatch.setenv(paths.OUT_ENV, str(out))
    return out


def _plan(target: str, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_make
@pytest.mark.parametrize("target, flags", [("cycle-cost", ("--out",)), ("calibrate-head", ()),
                                           ("expected-replay", ("--jsonl", "--out")), ("tune", ()),
                                           ("speed-launches", ("--out",)), ("calibrated-cells", ("--archive", "--out"))])
def test_the_writers_that_rewrote_committed_files_write_under_the_output_root(target, flags):
    plan = _plan(target, env={paths.OUT_ENV: "/tmp/my-root"})
    words = plan.split()
    for flag in flags:
        values = [words[i + 1].strip('"') for i, w in enumerate(words[:-1]) if w == flag]
        assert values and all(v.startswith("/tmp/my-root/") for v in values), (target, flag, values)
    assert "results/tables" not in plan and "results/draft_head" not in plan and "configs/experiment" not in plan


def test_the_writers_defaults_derive_from_the_output_root(root):
    import calibrate_head
    import tune_tree

    from eval.report import export_rows

    args = calibrate_head.parse_args([])
    assert Path(args.out) == root / "draft_head" / "calibration.json" and Path(args.table) == root / "tables" / \
        "head_calibration.md"
    tuned = tune_tree.parse([])
    assert tuned.out == root / "tune" and tuned.config_dir == root / "experiment" / "mine"
    assert export_rows.main(["--results", str(SAMPLED)]) == 0
    assert (root / "exports" / "sampled_studies.csv").is_file()


def test_a_committed_path_is_refused_before_any_work(root):
    import tune_tree

    from eval.measure import expected_replay

    with pytest.raises(CommittedOutputsError, match="committed evidence.*make publish"):
        tune_tree.parse(["--config-dir", str(ROOT / "configs" / "experiment")])
    with pytest.raises(CommittedOutputsError):
        tune_tree.parse(["--out", str(ROOT / "results" / "tune")])
    table = ROOT / "results" / "tables" / "expected_replay.md"
    before = table.read_bytes()
    assert expected_replay.main([str(RUNS), "--rows", "1", "--out", str(table)]) == 2  # no model is loaded
    assert table.read_bytes() == before


def test_generate_reads_this_machines_tuned_tree_else_the_committed_one(root):
    from rheo.generate_cli import build_parser, tree_of

    parse = build_parser().parse_args

    shape, name = tree_of(parse(["hello"]))
    assert "committed" in name and f"K={shape['k']}" in name
    mine = root / "experiment" / "mine"
    mine.mkdir(parents=True)
    text = (ROOT / "configs" / "experiment" / "tuned_topk.yaml").read_text()
    (mine / "tuned_topk.yaml").write_text(text.replace("  k: 4\n", "  k: 3\n"))
    shape, name = tree_of(parse(["hello", "--method", "topk"]))
    assert shape["k"] == 3 and "this machine" in name


def test_the_guard_holds_without_git_and_asks_in_the_files_own_folder(tmp_path, monkeypatch):
    committed = ROOT / "results" / "tables"
    before = {p: p.read_bytes() for p in committed.glob("*.md")}
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # git cannot answer
    with pytest.raises(CommittedOutputsError, match="lies in the committed evidence"):
        make_tables.make_tables(SAMPLED, committed, theory=False)
    assert {p: p.read_bytes() for p in committed.glob("*.md")} == before and not (committed / MANIFEST).exists()
    monkeypatch.undo()
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "every_drafter.md").write_text("committed\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not a checkout: git must be asked where the file lies
    with pytest.raises(CommittedOutputsError, match="is committed to git"):
        write_outputs([(repo / "every_drafter.md", b"mine\n")], "rows")
    assert (repo / "every_drafter.md").read_text() == "committed\n"


@pytest.mark.slow  # minutes of the default suite: make test-slow
def test_a_stale_output_is_removed_only_if_a_writer_of_ours_wrote_it(tmp_path):
    drawn = set(make_tables.make_tables(SAMPLED, tmp_path / "scratch", theory=False))
    undrawn = [name for name in make_tables.RESULT_TABLES if name[:-3] not in drawn]  # stale if ours
    assert "speed.md" in undrawn
    out = tmp_path / "mine"
    out.mkdir()
    for name in undrawn:
        (out / name).write_text("my own notes\n")
    (out / "temperature_mine.png").write_bytes(b"my own figure")
    make_tables.make_tables(SAMPLED, out, theory=False)
    make_figures.make_figures(SAMPLED, out, theory=False)
    assert all((out / name).read_text() == "my own notes\n" for name in undrawn)
    assert (out / "temperature_mine.png").read_bytes() == b"my own figure"
    assert "temperature_mine.png" not in {p.name for p in Outputs(out).stale(("temperature_*.png",))}
    first = sorted(drawn)[0] + ".md"  # written by make_tables above: listed in the folder's manifest
    ours = Outputs(out)
    ours.add(out / "other.md", b"rows\n")
    removed = ours.write((first, undrawn[0]), "rows")
    assert [p.name for p in removed] == [first] and (out / undrawn[0]).read_text() == "my own notes\n"


def test_no_command_or_target_takes_update_committed_any_more():
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--", "*.py", "Makefile", "*.yaml", "*.md"],
                             capture_output=True, text=True, check=True).stdout.split()
    found = [f for f in tracked if not f.startswith(("tests/", "results/"))
             and ("--update-committed" in (ROOT / f).read_text() or "UPDATE_COMMITTED" in (ROOT / f).read_text())]
    assert found == []
    with pytest.raises(SystemExit, match="unknown option --update-committed"):
        report.main(["reproduce_tau", "--update-committed"])


def test_all_reports_go_on_past_a_failing_study(monkeypatch, capsys):
    ran = []

    def commands(study, overrides=()):
        return [["-c", f"import sys; sys.exit({3 if study == 'a' else 0})"]]

    real = subprocess.run

    def run(cmd, cwd=None, env=None):
        ran.append(cmd[-1])
        return real(cmd, cwd=cwd, env=env)
    monkeypatch.setattr(report, "studies", lambda: ["a", "b", "c"])
    monkeypatch.setattr(report, "commands", commands)
    monkeypatch.setattr(report.subprocess, "run", run)
    assert report.main(["--all"]) == 3
    assert len(ran) == 3  # b and c ran after a failed
    assert "1 of 3 studies failed: a" in capsys.readouterr().err


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
def test_the_study_reports_read_the_committed_archive_in_a_fresh_clone(root):
    """draft_dial's reports name its (absent) rows folder: its archive is read, the committed one."""
    cmds = report.commands("draft_dial", [f"out_root={root}"])
    rule = next(c for c in cmds if "eval.states.rule_cells" in c)
    done = subprocess.run([sys.executable, *rule], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reading the committed results/same_state_dial.parquet" in done.stderr
    drawn = root / "tables" / "every_drafter.md"
    assert drawn.read_bytes() == (ROOT / "results" / "tables" / "every_drafter.md").read_bytes()


def test_a_refused_output_dir_gets_nothing_written_into_it(tmp_path, root):
    foreign = tmp_path / "not-rheo"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    done = subprocess.run([sys.executable, "-m", "eval.run", "model=tiny_random", "dataset=gsm8k", "limit=1",
                           "max_new_tokens=2", f"output_dir={foreign}", "progress=false", "warmup=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0 and "not empty" in done.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_refuse_committed_names_the_way_in():
    refuse_committed(None, Path("outputs/x.md"))
    with pytest.raises(CommittedOutputsError, match="make publish"):
        refuse_committed(ROOT / "results" / "draft_head" / "calibration.json")


def _archive(path: Path, rows: pd.DataFrame, record: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(path, index=False)
    if record:
        record_written([path])
    return path


def test_publish_shows_checks_and_writes_only_with_yes(tmp_path, monkeypatch, capsys):
    from eval.store import publish

    committed, out = tmp_path / "results", tmp_path / "outputs"
    monkeypatch.setattr(paths, "COMMITTED", committed)
    monkeypatch.setenv(paths.OUT_ENV, str(out))
    rows = pd.read_parquet(RUNS).head(6)
    _archive(committed / "runs.parquet", rows.head(4))
    (committed / "tables").mkdir()
    (committed / "tables" / "main.md").write_text("old\n")
    atomic_write_text(out / "tables" / "main.md", "new\n", record=True)  # as a project writer writes it
    _archive(out / "runs.parquet", rows, record=True)  # grown by two rows of the same settings
    (out / "hydra").mkdir()
    (out / "hydra" / "run.log").write_text("never published\n")
    (out / "mine_rows.csv").write_text("a,b\n1,2\n")  # a file of the user's own: never offered
    assert publish.main([]) == 0  # a dry run: shown, nothing written
    shown = capsys.readouterr()
    assert "-old" in shown.out and "+new" in shown.out and "rows 4 -> 6 (2 added, 0 removed" in shown.out
    assert "--yes" in shown.out and "mine_rows" not in shown.out
    assert (committed / "tables" / "main.md").read_text() == "old\n"
    _archive(out / "runs.parquet", rows.tail(3), record=True)  # the committed archive would shrink
    assert publish.main(["--yes"]) == 2 and "would shrink" in capsys.readouterr().err
    assert (committed / "tables" / "main.md").read_text() == "old\n"  # nothing at all was written
    _archive(out / "runs.parquet", rows, record=True)
    assert publish.main(["--yes"]) == 0
    assert (committed / "tables" / "main.md").read_text() == "new\n" and len(pd.read_parquet(committed / "runs.parquet")) == 6
    assert not (committed / "hydra").exists()
    assert publish.main([]) == 0 and "nothing to publish" in capsys.readouterr().out


def test_the_reproduce_clock_starts_in_an_output_root_not_made_yet(root):
    clock = root / "reproduce-clock.json"
    done = subprocess.run([sys.executable, "-m", "eval.measure.wall_clock", "start", str(clock)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "start_utc" in clock.read_text(), done.stderr
