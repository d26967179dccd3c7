"""Studies are data: the Makefile calls experiment files, and each experiment file describes the
committed rows it made.

* every ``python -m eval.run`` command a target runs names an experiment file that exists, and
  every study file (one with a sweep) is run by some target;
* the Makefile stays a list of commands: at most 150 lines, no command rewriting (``$(subst)``,
  ``$(call)``), no job scheduling of its own (``xargs``);
* each committed archive is covered by its study: every config hash (and same-state driver hash)
  in the archive is one that the study's jobs, composed as Hydra's sweep expands them, would
  write, so a rerun of the study file continues the committed rows instead of starting others.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from eval.conf.schema import register_configs, run_plan
from eval.measure.realized import _jobs
from eval.store.keys import config_hash

ROOT = Path(__file__).resolve().parents[1]
MID_HEAD = ".cache/heads/eagle3_smollm2_135m_mid"  # not committed (configs/recipe/head_mid.yaml)
MAKEFILE = ROOT / "Makefile"
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

#: archive -> the study runs that made it: (experiment, extra overrides as the Makefile passes them)
STUDIES = {
    "runs": [("reproduce_tau", [])],
    "same_state": [("reproduce_tau", [])],
    "same_state_studies": [("same_state_studies", [])],
    "same_state_fp32": [("same_state_fp32", [])],
    "same_state_dilemma": [("same_state_dilemma", [])],
    "same_state_heads": [("same_state_heads", [])],
    "same_state_serving": [("serving_temps", [])],
    "same_state_dial": [("draft_dial", [])],
    "same_state_calibrated": [("draft_dial", ["draft_mix=0.0", "draft_temp=1.07", "temperature=0.7,1.0"])],
    "sampled_studies": [("sampled_m_ablation", []), ("sampled_temperature", [])],
    "speed_cost": [("speed_cost", [])],
    "speed_options": [("tuned_topk", ["temperature=0.7,1.0", "limit=2", "max_new_tokens=64"]), ("speed_options", [])],
    "speed_rule": [("speed_rule", [])],
    "speed": [("speed", ["limit=1", "max_new_tokens=64", "dtype=bfloat16"]), ("tuned_topk", ["max_new_tokens=64"]),
              ("tuned_rheo", ["max_new_tokens=64"])],
    # the same protocol's rows from another CPU kind (an Intel Xeon VM), kept beside this one's
    "speed_xeon": [("speed", ["limit=1", "max_new_tokens=64", "dtype=bfloat16"]), ("tuned_topk", ["max_new_tokens=64"]),
                   ("tuned_rheo", ["max_new_tokens=64"])],
}


def _targets() -> list[str]:
    return sorted({t for line in MAKEFILE.read_text().splitlines()
                   for t in (re.match(r"^([a-z0-9][a-z0-9 -]*):(?!=)", line) or [None, ""])[1].split()})


def _plans() -> dict[str, str]:
    """target -> the commands ``make -n`` prints for it (nothing runs)."""
    return {t: subprocess.run(["make", "-s", "-n", "-C", str(ROOT), t], capture_output=True, text=True).stdout
            for t in _targets() if t not in ("setup",)}


@needs_make
def test_targets_call_experiment_files_and_every_study_file_is_called():
    called = set()
    for target, plan in _plans().items():
        for line in plan.splitlines():
            if "-m eval.run" in line:
                called |= set(re.findall(r"experiment=(\w+)", line))
    files = {p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml")}
    assert called and called <= files, called - files
    studies = {p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml") if "sweeper:" in p.read_text()}
    paper_protocol = {"main_table", "m_ablation", "temperature", "speed", "methods", "cpu_tree"}  # make reproduce-full, docs
    assert studies - called - paper_protocol == set()


def test_the_makefile_is_a_list_of_commands():
    text = MAKEFILE.read_text()
    assert len(text.splitlines()) <= 160
    for word in ("$(subst", "$(call", "xargs", "$(eval"):
        assert word not in text, word


def _sweep(experiment: str, extra: list[str]) -> list[list[str]]:
    """The override lists of the study's jobs: its sweeper params crossed, the extra overrides
    (which win over a param of the same key) added to each."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}", *(o for o in extra if "," not in o)],
                      return_hydra_config=True)
    given = {o.split("=", 1)[0]: o.split("=", 1)[1].split(",") for o in extra}
    params = {k: str(v).split(",") for k, v in (cfg.hydra.sweeper.params or {}).items()}
    params.update(given)
    keys = list(params)
    return [[f"experiment={experiment}", *(f"{k}={v}" for k, v in zip(keys, combo))]
            for combo in itertools.product(*(params[k] for k in keys))]


def _hashes(experiment: str, extra: list[str], tmp_path: Path) -> set[str]:
    register_configs()
    out = set()
    for overrides in _sweep(experiment, extra):
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        if cfg.measure == "same_state":
            plan = run_plan(cfg)
            out |= {config_hash(key) for _, key in ((plan.spec, plan.key), *plan.compared)}
        else:
            out |= {job.chash for job in _jobs(cfg, run_plan(cfg), tmp_path)}
    return out


@pytest.mark.parametrize("archive", sorted(STUDIES))
@pytest.mark.slow
def test_each_committed_archive_is_what_its_study_file_runs(archive, tmp_path):
    rows = pd.read_parquet(ROOT / "results" / f"{archive}.parquet")
    if not (ROOT / MID_HEAD).is_dir():  # its key holds the head's fingerprint: `make head-mid` builds it
        rows = rows[rows["model"] != "smollm2_135m_mid_head"]
    found = set(rows["config_hash"])
    if "driver_hash" in rows:
        found |= set(rows["driver_hash"])
    made = set().union(*(_hashes(e, extra, tmp_path) for e, extra in STUDIES[archive]))
    assert found <= made, f"{archive}: hashes no study job makes: {sorted(found - made)}"
