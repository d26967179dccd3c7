"""Command-line entry point: ``python -m eval.run [overrides]`` (Hydra).

Examples (see configs/ and the README)::

    python -m eval.run dataset=gsm8k method=rheo method.m=1 limit=5
    python -m eval.run -m method=rheo method.m=0,1,2,3 temperature=0,0.5,1.0 seed=0,1,2 dataset=gsm8k
    python -m eval.run -m experiment=main_table model=llama31_8b_instruct device=cuda dtype=bfloat16
    python -m eval.run measure=same_state dataset=all method=topk 'compare=[{name:topk},{name:rheo,m:1}]'

The work is done by :func:`run`, a plain function of the composed config (tests and notebooks
call it) that checks it once and hands the measurement it names (``measure``: realized decoding,
:mod:`eval.measure.realized`; same-state scoring, :mod:`eval.measure.same_states`) to the one run
loop (:mod:`eval.measure.loop`); the rest of this module wires it to Hydra.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from eval.conf.schema import register_configs, run_dtype
from eval.conf.sweep import FAILURE_MARKER
from eval.conf.validate import check_run
from eval.measure.loop import RunInterrupted, run_loop
from eval.measure.realized import Realized
from eval.measure.same_states import SameState
from eval.measure.summary import RunSummary, rows_went, same_state_rows_went
from eval.store.resume import interrupted_line
from rheo.cli import errors_as_one_line, run_main
from rheo.io import atomic_write_text
from rheo.paths import resolve_path

register_configs()
#: Hydra's errors (a bad override, a missing config) are user errors too
HYDRA_ERRORS = (HydraException, OmegaConfBaseException)
log = logging.getLogger("eval.run")


def run(cfg: DictConfig) -> RunSummary:
    """Run (or resume) one composed configuration with the measurement it names (``measure``);
    returns what was computed, failed and skipped."""
    checked = check_run(cfg)
    log.info("outputs: %s/ (out_root=DIR or RHEO_OUT=DIR moves them; committed results change only by "
             "`make publish`)", cfg.out_root)
    if cfg.dtype == "auto":
        log.info("dtype %s: %s", run_dtype(cfg).dtype or "the model's default", run_dtype(cfg).reason)
    return run_loop(cfg, SameState(cfg, checked) if cfg.measure == "same_state" else Realized(cfg, checked))


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> None:
    """Exit status: 0 when every row is stored ok; 1 when a row failed (a sweep: once all its jobs
    ran, see eval.conf.sweep); 130 on Ctrl-C, with what was stored and how to resume."""
    try:
        with errors_as_one_line("eval.run", HYDRA_ERRORS):  # (raised inside the job: Hydra would print more)
            summary = run(cfg)
    except RunInterrupted as stop:
        done = stop.summary
        unit = "(item, turn)(s)" if cfg.measure == "same_state" else "row(s)"
        log.error("%s", interrupted_line(done.computed + done.failed, done.computed, done.failed, done.skipped, unit))
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        log.error("interrupted before the first generation: nothing was stored by this run; rerun the same "
                  "command to start again")
        raise SystemExit(130) from None
    log.info("computed %d, skipped %d, failed %d; config hashes %s", summary.computed,
             summary.skipped, summary.failed, summary.config_hashes)
    root = resolve_path(cfg.output_dir)
    if cfg.measure == "same_state":
        print(same_state_rows_went(root, cfg.model.name), flush=True)
    else:
        print(rows_went(root, cfg.model.name, summary.config_hashes), flush=True)
    if summary.failed:
        _report_failures(summary)


def _report_failures(summary: RunSummary) -> None:
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:  # the sweep goes on; eval.conf.sweep exits non-zero at its end
        report = {"overrides": " ".join(hydra_cfg.overrides.task), "failed": summary.failed,
                  "report": summary.failure_report(), "first_error": summary.first_error}
        atomic_write_text(Path(hydra_cfg.runtime.output_dir) / FAILURE_MARKER, json.dumps(report))
        return
    log.error("exit status 1: %s", summary.failure_report())
    raise SystemExit(1)


if __name__ == "__main__":
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises; run_main ends a user error with one line
    run_main(main, "eval.run", HYDRA_ERRORS)
