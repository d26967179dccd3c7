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
generation per method. Under ``engine=graphs`` the warm-up also compiles every cache bucket the
pending first turns can reach with ``max_new_tokens`` (rheo.warmup), and each later turn's own buckets
before its timed generation; every row stores the graphs compiled inside its timed generation
(``compiles``: 0 for eager; the tables leave out the time of a row where it is not 0). Speedup is not
computed here: it is a ratio of rows, taken at analysis time (eval/report/analysis.py).
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
from eval.store.claims import Claims
from eval.store.code_version import VersionCheck, method_code_version
from eval.store.keys import config_hash, generation_seed
from eval.store.resume import same_text
from rheo.config import SpecConfig
from rheo.engine import compile_count
from rheo.methods import get_method
from rheo.warmup import warm

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
        self.claims = Claims()  # parallel jobs of one configuration compute each row once (eval.store.claims)

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
            jobs = [j for j in self.jobs if any(pj is j for pj, _ in pending)]
            _warmup(pair, jobs, pending[0][1], self.cfg)
            for job in jobs:  # engine=graphs: every bucket the first turns reach, compiled before the first timed row
                prompts = [pair.format_chat(chat_messages(item, 0, [])) for pj, item in pending if pj is job]
                _warm_safely(pair, job, prompts, self.cfg)

    def claim(self, job: "_Job", item: Item, wait: bool) -> bool:
        """Claim ``job``'s rows of ``item`` against other processes (eval.store.claims); False: held elsewhere."""
        return self.claims.take(job.cdir, item.suite, item.item_id, wait)

    def release(self, job: "_Job", item: Item) -> None:
        self.claims.release(job.cdir, item.suite, item.item_id)

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
    if not versions.reusable(row.get("code_version"), path, row.get("method")):
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
    row["code_version"] = method_code_version(job.method, meta["code_version"])  # a plug-in's: its files too
    if turn > 0 and len(answers) < turn:
        row.update(status="failed", error="an earlier turn of this item failed")
    else:
        try:
            prompt = pair.format_chat(chat_messages(item, turn, answers[:turn]))
            row["prompt_tokens"] = len(prompt)
            generator = torch.Generator(device=_generator_device(cfg.device)).manual_seed(gen_seed)
            timer = phase_timer(job.spec, cfg.device, cfg.profile_phases)
            if cfg.warmup:
                _warm_safely(pair, job, [prompt], cfg)  # a later turn's prompt is known only now
            compiled = compile_count()
            rows.reset_peak_memory(cfg.device)
            out, wall = _timed(lambda: _generate(pair, job, prompt, cfg, generator, timer=timer), cfg.device)
            row.update(rows.metrics(out, wall), compiles=compile_count() - compiled,
                       peak_memory_mb=rows.peak_memory_mb(cfg.device))
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
            with torch.inference_mode():  # as the timed generations run
                _generate(pair, job, prompt, cfg, generator, max_new_tokens=WARMUP_TOKENS)
        except Exception as e:  # the timed run records the failure properly
            log.warning("warm-up of %s failed: %s: %s", job.method, type(e).__name__, e)


def _warm_buckets(pair, job: _Job, prompts: list[list[int]], cfg: DictConfig) -> None:
    """engine=graphs: compile, untimed, the cache buckets that ``prompts`` and max_new_tokens reach (rheo.warmup)."""
    if job.spec.engine != "graphs" or not prompts:
        return

    def run(prompt: list[int], new_tokens: int) -> None:
        generator = torch.Generator(device=_generator_device(cfg.device)).manual_seed(0)
        generate(pair, job.spec, prompt, new_tokens, generator, None, device=cfg.device)  # no EOS: every cycle runs

    with torch.inference_mode():  # as the timed generations run (a graph compiled outside it does not serve them)
        made = warm(run, job.spec, pair.target, [len(p) for p in prompts], int(cfg.max_new_tokens), prompts[0])
    if made:
        log.info("warm-up of %s compiled %d graph(s) for the cache buckets of %d prompt(s)", job.method, made,
                 len(prompts))


def _warm_safely(pair, job: _Job, prompts: list[list[int]], cfg: DictConfig) -> None:
    """:func:`_warm_buckets`, a failure logged: the timed rows record their own (and their ``compiles``)."""
    try:
        _warm_buckets(pair, job, prompts, cfg)
    except Exception as e:
        log.warning("warm-up of %s's cache buckets failed: %s: %s", job.method, type(e).__name__, e)


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

