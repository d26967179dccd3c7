"""Reports are registered once, with the study they read: the ``report`` list of a study file
(``configs/experiment/<study>.yaml``), run by ``scripts/report.py``.

* every registered command names a module or script of the checkout;
* no output file (``--out``, ``--figure``, ``--figures``) is registered by two studies;
* every registering study's reports are drawn by some make target;
* drawn from the committed archives into a scratch folder, a study's table is the committed one;
* a bad study name or option ends with one line and exit status 2.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inprocess import run_entry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import report  # noqa: E402  (scripts/report.py)

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_FLAGS = ("--out", "--figure", "--figures")


def _registered() -> dict[str, list[list[str]]]:
    return {study: report.commands(study) for study in report.studies()}


def test_every_registered_command_names_a_module_or_script_of_the_checkout():
    registered = _registered()
    assert {"reproduce_tau", "same_state_fp32", "serving_temps", "draft_dial"} <= set(registered)
    for study, cmds in registered.items():
        for cmd in cmds:
            if cmd[0] == "-m":
                spec = importlib.util.find_spec(cmd[1])
                assert spec is not None and Path(spec.origin).is_relative_to(ROOT), (study, cmd)
            else:
                assert (ROOT / cmd[0]).is_file() and cmd[0].startswith("scripts/"), (study, cmd)


def test_no_output_is_registered_by_two_studies():
    owner: dict[str, str] = {}
    for study, cmds in _registered().items():
        for cmd in cmds:
            outs = [cmd[i + 1] for i, word in enumerate(cmd[:-1]) if word in OUTPUT_FLAGS]
            if cmd[0] == "scripts/export_results.py":
                outs = []  # an archive, written beside the study's folder
            for out in outs:
                assert owner.setdefault(out, study) == study, f"{out}: {owner[out]} and {study}"
    assert owner


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_every_registering_study_is_reported_by_a_make_target():
    targets = sorted({t for line in (ROOT / "Makefile").read_text().splitlines()
                      for t in (re.match(r"^([a-z0-9][a-z0-9 -]*):(?!=)", line) or [None, ""])[1].split()}
                     - {"setup", "study-reports"})
    called = set()
    for target in targets:
        plan = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target], capture_output=True, text=True).stdout
        for line in plan.splitlines():
            if "scripts/report.py" in line:
                called |= set(line.split("scripts/report.py", 1)[1].split())
    assert set(report.studies()) <= called, set(report.studies()) - called


@pytest.mark.slow  # draws the study's figures (half a minute; test_option_study.py keeps one such study): make test-slow
def test_a_study_drawn_from_its_archive_gives_the_committed_table(tmp_path):
    if (ROOT / "results" / "same_state_dilemma").exists():
        pytest.skip("a local rows folder of the study stands in for its archive")
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    assert report.main(["same_state_dilemma", f"paths.tables={tables}", f"paths.figures={figures}"]) == 0
    drawn = tables / "same_state_dilemma.md"
    assert drawn.read_bytes() == (ROOT / "results" / "tables" / "same_state_dilemma.md").read_bytes()
    assert sorted(figures.glob("same_state_dilemma_*.png"))


def test_a_space_in_a_folder_stays_one_word():
    cmd = report.commands("serving_temps", ["paths.tables=/my tables"])[0]
    assert "/my tables/serving_temps.md" in cmd


@pytest.mark.parametrize("args, words", [(["nope"], "no study 'nope'"), (["speed", "--bogus"], "unknown option --bogus"),
                                         ([], "name a study")])
def test_a_bad_request_is_one_line(args, words):
    done = run_entry("scripts/report.py", args)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
