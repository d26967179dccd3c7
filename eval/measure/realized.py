"""The realized measurement of the one run loop (:mod:`eval.measure.loop`; :func:`eval.run.run`
chooses it for ``measure=realized``).

For every (suite, item, turn) the configured method and, unless
``baseline=false``, the autoregressive baseline of the same target at the same temperature and
seed; one row per (method config, suite, item, turn), each its own shard (eval/store/storage.py). Rows
already stored with status "ok" are skipped; failed rows are stored with status "failed" and
retried by the next run.

Order of checks: the configuration (SpecConfig included; a pair of your own: its folders and
whether its head fits, eval.conf.local_pair.check_local_pair), then the output directory, then the
prompts; the model is loaded last, and only if there is work left. The folders of new
configurations are created once the pair has loaded and passed its checks. Wall time covers the
generation call alone (with torch.cuda.synchronize around it on CUDA), after one untimed warm-up
generation per method. Speedup is not computed here: it is a ratio of rows, taken at analysis
time (eval/report/analysis.py).
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from omegaconf import DictConfig

from eval.conf.schema import CheckedRun
from eval.measure import rows
from eval.measure.generation import generate, phase_timer
from eval.measure.summary import RunSummary
from eval.prompts.suites import Item, chat_messages
from eval.store import storage
from eval.store.code_version import VersionCheck
from eval.store.keys import config_hash, generation_seed
from eval.store.resume import same_text
from rheo.config import SpecConfig
from rheo.methods import get_method

log = logging.getLogger(__name__)
WARMUP_TOKENS = 4


@dataclass
class _Job:
    spec: SpecConfig  # the run's method, or the AR baseline next to it
    chash: str
    cdir: Path
    key: dict  # the method key hashed into chash (the folder's config.json)
    record_expected: bool = False  # a tree method of a record_expected run

    @property
    def method(self) -> str:
        return self.spec.method


class Realized:
    """``measure=realized``: the run's method (and ``alongside`` methods, and the AR baseline unless
    ``baseline=false``) generates every (item, turn); one row each, tokens, tau and timings."""

    fingerprint = storage.FINGERPRINT
    unit = "row(s)"

    def __init__(self, cfg: DictConfig, checked: CheckedRun) -> None:
        """``checked``: eval.conf.validate.check_run(cfg)."""
        self.cfg = cfg
        self.checked = checked
        self.jobs: list[_Job] = []
        self.summary = RunSummary()
        self.label = " + ".join([get_method(cfg.method.name).variant(checked.spec), *cfg.alongside])
        self.taus: list[float] = []
        self.versions = VersionCheck(keep_stale=bool(cfg.get("keep_stale_rows", False)))

    @property
    def specs(self) -> list[SpecConfig]:
        return [job.spec for job in self.jobs]

    def open(self, root: Path) -> None:
        self.root = root
        self.jobs = _jobs(self.cfg, self.checked, root)
        self.summary.config_hashes = {j.method: j.chash for j in self.jobs}

    def pending(self, items) -> list:
        return [(j, item) for i, item in enumerate(items) for j in _order(self.cfg, self.jobs, i)
                if not _item_done(j, item, self.summary, self.versions)]

    def start(self, pair, pending: list) -> None:
        for job in self.jobs:
            storage.prepare_config_dir(self.root, self.cfg.model.name, job.chash, job.key)
        self.meta = rows.run_metadata(self.cfg, pair)
        if self.cfg.warmup:
            _warmup(pair, [j for j in self.jobs if any(pj is j for pj, _ in pending)], pending[0][1], self.cfg)

    def run_unit(self, pair, job: "_Job", item: Item, bar) -> Optional[str]:
        summary, answers, error = self.summary, [], None
        for turn in range(len(item.turns)):
            row = _one_turn(self.cfg, pair, self.meta, job, item, turn, answers, self.versions)
            bar.update(1)
            reused = bool(row.get("_reused", False))
            failed = str(row["error"]).splitlines()[0] if row["status"] == "failed" else None
            summary.computed += row["status"] == "ok" and not reused
            summary.skipped += reused
            if not reused:
                summary.attempt(job.method, failed)
            error = error or failed
            if failed is None and not get_method(job.method).is_reference:
                self.taus.append(row["tau"])
            if row["status"] == "ok":  # a later turn after a failed one is recorded as failed
                answers.append(pair.answer_text(row["output_tokens"]))
        if self.taus:
            bar.set_postfix_str(f"tau={sum(self.taus) / len(self.taus):.2f}", refresh=False)
        return error


def _jobs(cfg: DictConfig, checked: CheckedRun, root: Path) -> list[_Job]:
    jobs = []
    for one, key in ((checked.spec, checked.key), *checked.alongside):
        chash = config_hash(key)
        cdir = root / cfg.model.name / chash
        if (cdir / "config.json").exists():  # refused now if it is another config's (created after the load)
            storage.prepare_config_dir(root, cfg.model.name, chash, key)
        tree = not get_method(one.method).is_reference
        jobs.append(_Job(one, chash, cdir, key, record_expected=bool(cfg.record_expected) and tree))
    return jobs


def _order(cfg: DictConfig, jobs: list[_Job], index: int) -> list[_Job]:
    """The jobs of item number ``index``: with ``alongside`` methods, the order turns by one from item to
    item, so each method runs first, second, ... equally often; otherwise the run's method, then its AR."""
    if not cfg.alongside:
        return jobs
    turn = index % len(jobs)
    return jobs[turn:] + jobs[:turn]


def _expect(job: _Job, item: Item, turn: int) -> dict:
    return {"model": job.cdir.parent.name, "config_hash": job.chash, "method": job.method, "dataset": item.suite,
            "item_id": item.item_id, "turn": turn}


def _item_done(job: _Job, item: Item, summary: RunSummary, versions: VersionCheck) -> bool:
    done = 0
    for turn in range(len(item.turns)):
        path = storage.shard_path(job.cdir, item.suite, item.item_id, turn)
        done += _reusable(storage.load_existing(path, _expect(job, item, turn)), item, path, versions,
                          job.record_expected)
    if done == len(item.turns):
        summary.skipped += done
        return True
    return False


def _reusable(row: Optional[dict], item: Item, path: Path, versions: VersionCheck,
              needs_expected: bool = False) -> bool:
    """A stored ok row made from the item's current text (rows stored before turns_sha existed
    cannot be checked and are reused) by this version of the decoding code (eval.store.code_version:
    unless keep_stale_rows) that holds the expected-acceptance columns if the run records them (the
    same tokens again, with the expectations added)."""
    if row is None or row["status"] != "ok":
        return False
    if not versions.reusable(row.get("code_version"), path):
        return False
    if needs_expected and row.get("expected_tau") is None:
        log.info("%s has no expected acceptance (record_expected=true): recomputing it", path)
        return False
    return same_text(row, item, path)


def _one_turn(cfg, pair, meta, job: _Job, item: Item, turn: int, answers: list[str],
              versions: VersionCheck) -> dict:
    """Generate (or reuse) one row and store it; returns the row."""
    path = storage.shard_path(job.cdir, item.suite, item.item_id, turn)
    existing = storage.load_existing(path, _expect(job, item, turn))
    if _reusable(existing, item, path, versions, job.record_expected):
        return {**existing, "_reused": True}
    gen_seed = generation_seed(item.suite, item.item_id, turn, int(cfg.seed))
    row = rows.base_row(job.key, meta, job.chash, item, turn, gen_seed)
    if turn > 0 and len(answers) < turn:
        row.update(status="failed", error="an earlier turn of this item failed")
    else:
        try:
            prompt = pair.format_chat(chat_messages(item, turn, answers[:turn]))
            row["prompt_tokens"] = len(prompt)
            generator = torch.Generator(device=_generator_device(cfg.device)).manual_seed(gen_seed)
            timer = phase_timer(job.spec, cfg.device, cfg.profile_phases)
            out, wall = _timed(lambda: _generate(pair, job, prompt, cfg, generator, timer=timer), cfg.device)
            row.update(rows.metrics(out, wall))
            if timer is not None:
                row.update(timer.summary(out.target_calls, wall * 1e3))
        except Exception as e:  # recorded as a failure row, retried on the next run
            row.update(status="failed", error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            log.warning("FAILED %s %s item %s turn %d: %s: %s", job.method, item.suite, item.item_id,
                        turn, type(e).__name__, e)
    row["finished_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    storage.write_row(path, row)
    return row


def _generate(pair, job: _Job, prompt: list[int], cfg: DictConfig, generator: torch.Generator,
              max_new_tokens: Optional[int] = None, timer=None):
    return generate(pair, job.spec, prompt, max_new_tokens or int(cfg.max_new_tokens), generator,
                    list(pair.eos_token_ids) or None, device=cfg.device, timer=timer,
                    record_expected=job.record_expected)


def _warmup(pair, jobs: list[_Job], item: Item, cfg: DictConfig) -> None:
    """One short untimed generation per method (allocations, kernels, caches)."""
    prompt = pair.format_chat(chat_messages(item, 0, []))
    for job in jobs:
        generator = torch.Generator(device=_generator_device(cfg.device)).manual_seed(0)
        try:
            _generate(pair, job, prompt, cfg, generator, max_new_tokens=WARMUP_TOKENS)
        except Exception as e:  # the timed run records the failure properly
            log.warning("warm-up of %s failed: %s: %s", job.method, type(e).__name__, e)


def _timed(fn, device: str):
    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        out = fn()
    if cuda:
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def _generator_device(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"

