"""The benchmark run: a plain function of a composed config (tests call it directly).

For every (suite, item, turn) it runs the configured method and, unless
``baseline=false``, the autoregressive baseline of the same target at the same
temperature and seed, and stores one row per (method config, suite, item,
turn) as its own shard (eval/storage.py). Rows already stored with status
"ok" are skipped; failed rows are retried.

Order of checks: the configuration (SpecConfig included; a pair of your own:
its folders and whether its head fits, eval.local_pair.check_local_pair), then the
output directory, then the prompts; the model is loaded last, and only if there
is work left. The folders of new configurations are created once the pair has
loaded; a load that fails leaves an output directory this run created as it was
(absent). Wall time covers the generation call alone (with
torch.cuda.synchronize around it on CUDA), after one untimed warm-up
generation per method. Speedup is not computed here: it is a ratio of rows,
taken at analysis time (eval/analysis.py).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from omegaconf import DictConfig
from tqdm import tqdm

from eval import rows, storage
from baselines import AR
from eval.data import Item, chat_messages
from eval.prompt_sources import load_prompts
from eval.generation import generate, phase_timer
from eval.keys import config_hash, generation_seed
from eval.models import load_pair, pair_args
from eval.resume import disk_full_line, same_text
from eval.run_summary import RunInterrupted, RunSummary  # noqa: F401 (eval.run reads them here)
from eval.schema import method_key, spec_config, validate
from eval.validate import check_against_pair
from rheo.paths import resolve_path
from rheo.config import SpecConfig
from rheo.methods import get_method

log = logging.getLogger(__name__)
WARMUP_TOKENS = 4


@dataclass
class _Job:
    spec: SpecConfig  # the run's method, or the AR baseline next to it
    chash: str
    cdir: Path
    key: dict = field(default_factory=dict)  # the method key hashed into chash (the folder's config.json)
    record_expected: bool = False  # a tree method of a record_expected run

    @property
    def method(self) -> str:
        return self.spec.method


def run(cfg: DictConfig) -> RunSummary:
    """Run (or resume) one configuration; returns what was computed, failed and skipped."""
    spec = validate(cfg)
    root = resolve_path(cfg.output_dir)
    fresh = (not root.exists(), not (root / storage.MANIFEST).exists())  # (folder, manifest) made by this run
    storage.prepare_output_dir(root)
    storage.remove_stale_tmp(root)
    jobs = _jobs(cfg, spec, root)
    suites = load_prompts(cfg, resolve_path)
    if cfg.item_ids is not None:
        found = {item.item_id for item in _all_items(suites)}
        missing = sorted(set(cfg.item_ids) - found)
        if missing:
            raise ValueError(f"item_ids {missing} are not question_ids of {list(cfg.dataset.suites)}")
    summary = RunSummary(config_hashes={j.method: j.chash for j in jobs})
    pending = [(j, item) for i, item in enumerate(_all_items(suites)) for j in _order(cfg, jobs, i)
               if not _item_done(j, item, summary)]
    if not pending:
        log.info("nothing to do: all %d rows already stored", summary.skipped)
        return summary
    if cfg.num_threads is not None:
        torch.set_num_threads(int(cfg.num_threads))
    try:
        pair = load_pair(*pair_args(cfg))
    except BaseException:
        _remove_if_untouched(root, *fresh)
        raise
    for job in jobs:
        storage.prepare_config_dir(root, cfg.model.name, job.chash, job.key)
    first_items = list({id(item): item for _, item in pending}.values())
    first_prompts = [pair.format_chat(chat_messages(item, 0, [])) for item in first_items]
    for job in jobs:
        check_against_pair(cfg, job.spec, pair, first_prompts)
    meta = rows.run_metadata(cfg, pair)
    try:
        if cfg.warmup:
            _warmup(pair, [j for j in jobs if any(pj is j for pj, _ in pending)], pending[0][1], cfg)
        _run_pending(cfg, pair, meta, pending, summary)
    except KeyboardInterrupt:
        raise RunInterrupted(summary) from None
    except storage.ShardWriteError as e:
        raise storage.ShardWriteError(disk_full_line(e, summary.computed + summary.failed)) from None
    if summary.failed:
        log.error("%d row(s) FAILED and were recorded with status=failed (%s); first error: %s; rerun to "
                  "retry them", summary.failed, summary.failure_report(), summary.first_error)
    return summary


def _jobs(cfg: DictConfig, spec: SpecConfig, root: Path) -> list[_Job]:
    specs = [spec] + [spec_config(cfg, name) for name in cfg.alongside]
    if cfg.baseline and spec.method != AR.name:
        specs.append(spec_config(cfg, AR.name))
    jobs = []
    for one in specs:
        key = method_key(cfg, one.method)
        chash = config_hash(key)
        cdir = root / cfg.model.name / chash
        if (cdir / "config.json").exists():  # refused now if it is another config's (created after the load)
            storage.prepare_config_dir(root, cfg.model.name, chash, key)
        tree = not get_method(one.method).is_reference
        jobs.append(_Job(one, chash, cdir, key, record_expected=bool(cfg.record_expected) and tree))
    return jobs


def _remove_if_untouched(root: Path, made_folder: bool, made_manifest: bool) -> None:
    """After a failed load: the manifest (and the folder) this run made go again, if nothing else is there."""
    if made_manifest and all(p.name == storage.MANIFEST for p in root.iterdir()):
        (root / storage.MANIFEST).unlink(missing_ok=True)
        if made_folder:
            root.rmdir()


def _order(cfg: DictConfig, jobs: list[_Job], index: int) -> list[_Job]:
    """The jobs of item number ``index``: with ``alongside`` methods, the order turns by one from item to
    item, so each method runs first, second, ... equally often; otherwise the run's method, then its AR."""
    if not cfg.alongside:
        return jobs
    turn = index % len(jobs)
    return jobs[turn:] + jobs[:turn]


def _all_items(suites: dict[str, list[Item]]) -> list[Item]:
    return [item for items in suites.values() for item in items]


def _expect(job: _Job, item: Item, turn: int) -> dict:
    return {"model": job.cdir.parent.name, "config_hash": job.chash, "method": job.method, "dataset": item.suite,
            "item_id": item.item_id, "turn": turn}


def _item_done(job: _Job, item: Item, summary: RunSummary) -> bool:
    done = 0
    for turn in range(len(item.turns)):
        path = storage.shard_path(job.cdir, item.suite, item.item_id, turn)
        done += _reusable(storage.load_existing(path, _expect(job, item, turn)), item, path, job.record_expected)
    if done == len(item.turns):
        summary.skipped += done
        return True
    return False


def _reusable(row: Optional[dict], item: Item, path: Path, needs_expected: bool = False) -> bool:
    """A stored ok row made from the item's current text (rows stored before turns_sha existed
    cannot be checked and are reused) that holds the expected-acceptance columns if the run records
    them (the same tokens again, with the expectations added)."""
    if row is None or row["status"] != "ok":
        return False
    if needs_expected and row.get("expected_tau") is None:
        log.info("%s has no expected acceptance (record_expected=true): recomputing it", path)
        return False
    return same_text(row, item, path)


#: "i/N": this run is job i of N of a longer command (`make reproduce` sets it); shown in the progress line
JOB_ENV = "RHEO_JOB"


def progress_bar(cfg: DictConfig, rows: int) -> tqdm:
    """One compact line: "job 3/13 rheo m=1 T=1: 12/56 rows [01:10<05:20, tau=2.1]" (rows = turns)."""
    method = " + ".join([get_method(cfg.method.name).variant(spec_config(cfg)), *cfg.alongside])
    job = os.environ.get(JOB_ENV, "").strip()
    desc = f"{'job ' + job + ' ' if job else ''}{method} T={float(cfg.temperature):g} {cfg.dataset.name}"
    return tqdm(total=rows, desc=desc, unit="row", disable=not cfg.progress, mininterval=10 if job else 0.1,
                bar_format="{desc}: {n_fmt}/{total_fmt} rows [{elapsed}<{remaining}{postfix}]")


def _run_pending(cfg: DictConfig, pair, meta: dict, pending: list, summary: RunSummary) -> None:
    taus: list[float] = []
    bar = progress_bar(cfg, sum(len(item.turns) for _, item in pending))
    consecutive_failures = 0
    for job, item in pending:
        answers: list[str] = []
        for turn in range(len(item.turns)):
            row = _one_turn(cfg, pair, meta, job, item, turn, answers)
            bar.update(1)
            if row["status"] == "ok":
                consecutive_failures = 0
                if not get_method(job.method).is_reference:
                    taus.append(row["tau"])
            else:
                consecutive_failures += 1
            summary.computed += row["status"] == "ok" and not row.get("_reused", False)
            summary.skipped += bool(row.get("_reused", False))
            summary.failed += row["status"] == "failed"
            if not row.get("_reused", False):
                summary.attempted_by_method[job.method] = summary.attempted_by_method.get(job.method, 0) + 1
                summary.failed_by_method[job.method] = (summary.failed_by_method.get(job.method, 0)
                                                        + (row["status"] == "failed"))
                if row["status"] == "failed" and summary.first_error is None:
                    summary.first_error = str(row["error"]).splitlines()[0]
            if row["status"] == "ok":  # a later turn after a failed one is recorded as failed
                answers.append(pair.tokenizer.decode(row["output_tokens"], skip_special_tokens=True))
        if taus:
            bar.set_postfix_str(f"tau={sum(taus) / len(taus):.2f}", refresh=False)
        if consecutive_failures >= cfg.max_consecutive_failures and summary.computed == 0:
            raise RuntimeError(f"the first {consecutive_failures} generations all failed (see the failed rows "
                               f"under {job.cdir}); last error: {row['error']}")
    bar.close()


def _one_turn(cfg, pair, meta, job: _Job, item: Item, turn: int, answers: list[str]) -> dict:
    """Generate (or reuse) one row and store it; returns the row."""
    path = storage.shard_path(job.cdir, item.suite, item.item_id, turn)
    existing = storage.load_existing(path, _expect(job, item, turn))
    if _reusable(existing, item, path, job.record_expected):
        return {**existing, "_reused": True}
    gen_seed = generation_seed(item.suite, item.item_id, turn, int(cfg.seed))
    row = rows.base_row(cfg, meta, job.spec.method, job.chash, item, turn, gen_seed)
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

