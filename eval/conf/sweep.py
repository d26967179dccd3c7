"""Hydra callback of ``python -m eval.run``: a sweep is checked whole before it starts, and
exits non-zero at the end when any of its jobs stored a failed row.

* ``on_multirun_start``: every combination of the sweep (command line and the
  experiment's ``hydra.sweeper.params``, expanded as the basic sweeper does) is
  composed and validated (``eval.conf.validate.check_run``), so a bad value stops the
  sweep before its first job instead of when that value's job starts. What only the job's
  machine can say (its device, its cores: ``eval.conf.validate.check_hardware``) is checked
  here only when the launcher runs the jobs on this machine (:data:`LOCAL_LAUNCHERS`); a
  sweep submitted to SLURM from a login node without a GPU gets to submission, and each
  job checks its own machine when it starts. Jobs whose configurations all belong to an
  earlier job of the sweep (Top-K in an m sweep: Top-K does not read m) are counted and
  said: they share its rows, each row computed once (``eval.store.claims``).
* ``on_run_start`` / ``on_multirun_start``: the places a run writes, its ``output_dir`` (each job's) and
  Hydra's record (``hydra.run.dir`` / ``hydra.sweep.dir``), are checked by the write door
  (rheo.io.check_dir: not in the committed evidence, symlinks resolved; not a file) before Hydra makes
  any folder: one line, nothing made.
* Each job whose run stored failed rows writes :data:`FAILURE_MARKER` into its
  Hydra job folder (``eval.run.main``); ``on_multirun_end`` collects them,
  logs one line per job and exits with status 1. Markers are files because jobs
  may run in other processes (joblib) or on other machines (SLURM).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from rheo.cli import fail
from rheo.io import check_dir
from rheo.paths import resolve_path

FAILURE_MARKER = "FAILED_ROWS.json"
#: launchers whose jobs run on the machine that starts the sweep (its device and cores are theirs)
LOCAL_LAUNCHERS = ("hydra._internal.core_plugins.basic_launcher.BasicLauncher",
                   "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
                   "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")
log = logging.getLogger("eval.run")


def jobs_run_here(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs its jobs on this machine (else: SLURM or another cluster)."""
    target = (config.hydra.get("launcher") or {}).get("_target_", LOCAL_LAUNCHERS[0])
    return target in LOCAL_LAUNCHERS


def sweep_combinations(config: DictConfig) -> list[list[str]]:
    """The override lists of every job of the sweep ``config`` (the basic sweeper's expansion)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    arguments = params + list(config.hydra.overrides.task)
    loader = GlobalHydra.instance().config_loader()
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def validate_sweep(config: DictConfig) -> tuple[int, int]:
    """Compose and validate every job of the sweep; raises ValueError naming the first bad one.
    Returns (jobs, jobs that repeat configurations of earlier jobs)."""
    from eval.conf.validate import check_run
    from eval.store.keys import config_hash

    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_combinations(config)
    hardware = jobs_run_here(config)
    seen: set[tuple[str, str, str]] = set()
    repeats = 0
    notes = logging.getLogger("eval.conf.schema")  # its per-job notes are said by the job itself, once
    level = notes.level
    notes.setLevel(logging.WARNING)
    try:
        for overrides in jobs:
            job_cfg = loader.load_sweep_config(config, list(overrides))
            with open_dict(job_cfg):
                job_cfg.pop("hydra", None)  # the task function never sees it
            try:
                check_places(job_cfg.output_dir, config.hydra.sweep.dir)
                checked = check_run(job_cfg, hardware=hardware)
            except (RuntimeError, OSError, ValueError) as e:
                raise ValueError(f"sweep job [{' '.join(overrides)}]: {e} (no job of the sweep was started)") from None
            keys = [checked.key] + ([] if job_cfg.measure == "same_state" else [k for _, k in checked.alongside])
            places = {(str(job_cfg.output_dir), str(job_cfg.model.name), config_hash(k)) for k in keys}
            repeats += places <= seen
            seen |= places
    finally:
        notes.setLevel(level)
    return len(jobs), repeats


def check_places(output_dir: str, record: str) -> None:
    """Refuse (rheo.io.check_dir: CommittedOutputsError, NotADirectoryError) a run whose ``output_dir`` or
    Hydra ``record`` folder lies in the committed evidence or under a file; makes nothing."""
    check_dir(resolve_path(record))
    try:
        check_dir(resolve_path(output_dir))
    except (RuntimeError, OSError) as e:
        raise type(e)(f"output_dir: {e}") from None


class SweepChecks(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # (Hydra turns an exception raised by a callback into a warning and goes on)
            check_places(config.output_dir, config.hydra.run.dir)
        except (RuntimeError, OSError, ValueError) as e:
            fail(e, "eval.run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # (Hydra turns an exception raised by a callback into a warning and goes on)
            n, repeats = validate_sweep(config)
        except (RuntimeError, OSError, ValueError) as e:
            fail(e, "eval.run")
        log.info("sweep: %d job configuration(s) validated", n)
        if not jobs_run_here(config):
            log.info("sweep: the launcher runs the jobs on other machines: each job checks its own device and "
                     "cores when it starts")
        if repeats:
            log.info("sweep: %d job(s) repeat the configurations of an earlier job (a setting their method does "
                     "not read): they share its rows, each row computed once by whichever job claims it first",
                     repeats)
        for old in Path(config.hydra.sweep.dir).glob(f"**/{FAILURE_MARKER}"):
            old.unlink()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        markers = sorted(Path(config.hydra.sweep.dir).glob(f"**/{FAILURE_MARKER}"))
        if not markers:
            return
        total = 0
        for marker in markers:
            report = json.loads(marker.read_text())
            total += report["failed"]
            log.error("sweep job %s: %s; first error: %s", report["overrides"], report["report"],
                      report["first_error"])
        log.error("%d row(s) FAILED in %d sweep job(s) (stored with status=failed; rerun to retry them)",
                  total, len(markers))
        raise SystemExit(1)
