"""The one run loop of the harness: every measurement goes through :func:`run_loop`.

A *measurement* says what one unit of work produces and where it is stored; the loop does the
rest, the same way for all of them:

1. the output folder: created or checked against the measurement's manifest (a folder of other
   results is refused), stale temporary files removed;
2. the prompts (built-in suites or a prompt set of the user's), ``item_ids`` checked;
3. what is left: the measurement looks at its stored shards with one resume policy
   (:mod:`eval.store.resume`: a corrupt or misplaced shard is reported, deleted and recomputed; a shard
   made from other text of its item is recomputed, and so is one made by another version of the
   decoding code unless ``keep_stale_rows=true``: :mod:`eval.store.code_version`);
4. the model pair, loaded only if work is left (a failed load leaves a folder this run created as
   it was), checked against the first prompts (:func:`check_against_pair`);
5. the work, unit by unit, under one progress bar (a measurement whose units parallel jobs of one
   configuration may share claims each before doing it, :mod:`eval.store.claims`: a unit another
   process holds is done last, after its claim is released, by reading back what was stored); a
   unit that raises is counted as failed and the run goes on (its shards are not written, so a
   rerun retries it), unless the first ``max_consecutive_failures`` all fail; Ctrl-C ends with one
   line saying what is stored, a full disk with the file and the count.

Measurements today: ``measure=realized`` (:mod:`eval.measure.realized`: one row per method, item and turn,
tokens and timings) and ``measure=same_state`` (:mod:`eval.measure.same_states`: the compared methods'
trees at one driver's states, exact expected emitted tokens).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional, Protocol, Sequence

import torch
from omegaconf import DictConfig
from tqdm import tqdm

from eval.conf.schema import run_protocol
from eval.measure.pairs import load_pair, pair_args
from eval.measure.summary import RunSummary
from eval.prompts.sources import load_prompts
from eval.prompts.suites import Item, chat_messages
from eval.store import storage
from eval.store.resume import disk_full_line
from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.models.protocol import prompting
from rheo.paths import resolve_path

log = logging.getLogger("eval.run")
#: "i/N": this run is job i of N of a longer command; shown in the progress line
JOB_ENV = "RHEO_JOB"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; ``summary`` says what was stored before it (every finished row is)."""

    def __init__(self, summary: RunSummary) -> None:
        super().__init__()
        self.summary = summary


class Measurement(Protocol):
    """What the loop asks of a measurement (eval.measure.realized.Realized, eval.measure.same_states.SameState)."""

    fingerprint: dict  # the output folder's manifest (eval.store.storage.prepare_output_dir)
    unit: str  # what one step of the progress bar is, plural form with "(s)"
    label: str  # the progress bar's text
    summary: RunSummary
    specs: list  # the SpecConfig of every method it runs (checked against the pair once it is loaded)
    versions: object  # eval.store.code_version.VersionCheck: which stored rows the code version lets it reuse

    def open(self, root: Path) -> None:
        """Before the prompts are read: folders of known configurations checked, archives restored."""

    def pending(self, items: Sequence[Item]) -> list[tuple[object, Item]]:
        """(job, item) units with work left (found ones counted as skipped in ``summary``)."""

    def start(self, pair, pending: list[tuple[object, Item]]) -> None:
        """Once the pair is loaded and checked: config folders written, warm-up."""

    def run_unit(self, pair, job: object, item: Item, bar: tqdm) -> Optional[str]:
        """Every turn of ``item`` for ``job``; returns the first error of a failed unit, or None."""


def run_loop(cfg: DictConfig, measurement: Measurement) -> RunSummary:
    """Run (or resume) ``measurement`` over the prompts of ``cfg``; returns what was done."""
    root = resolve_path(cfg.output_dir)
    fresh = (not root.exists(), not (root / storage.MANIFEST).exists())  # (folder, manifest) made by this run
    storage.prepare_output_dir(root, measurement.fingerprint)
    storage.remove_stale_tmp(root)
    measurement.open(root)
    suites = load_prompts(cfg, resolve_path)
    items = asked_turns([item for part in suites.values() for item in part], cfg)
    if cfg.item_ids is not None:
        missing = sorted(set(cfg.item_ids) - {item.item_id for item in items})
        if missing:
            raise ValueError(f"item_ids {missing} are not question_ids of {list(cfg.dataset.suites)}")
    summary = measurement.summary
    pending = measurement.pending(items)
    measurement.versions.report(measurement.unit)  # stored rows of another version of the decoding code
    if not pending:
        log.info("nothing to do: all %d %s already stored", summary.skipped, measurement.unit)
        return summary
    first = list({id(item): item for _, item in pending}.values())
    messages = [chat_messages(item, 0, []) for item in first]
    if cfg.num_threads is not None:
        torch.set_num_threads(int(cfg.num_threads))
    try:
        pair = load_pair(*pair_args(cfg)).with_protocol(run_protocol(cfg))
    except BaseException:
        _remove_if_untouched(root, *fresh)
        raise
    prompts = [pair.format_chat(m) for m in messages]
    for spec in measurement.specs:
        check_against_pair(cfg, spec, pair, prompts)
    measurement.start(pair, pending)
    bar = progress_bar(cfg, measurement, sum(len(item.turns) for _, item in pending))
    try:
        _run_units(cfg, measurement, pair, pending, bar)
    except KeyboardInterrupt:
        raise RunInterrupted(summary) from None
    except storage.ShardWriteError as e:
        raise storage.ShardWriteError(disk_full_line(e, summary.computed + summary.failed, measurement.unit)) from None
    finally:
        bar.close()
        if getattr(measurement, "claims", None) is not None:
            measurement.claims.close()
    if summary.failed:
        log.error("%d %s FAILED (%s); first error: %s; rerun to retry them", summary.failed, measurement.unit,
                  summary.failure_report(), summary.first_error)
    return summary


def asked_turns(items: Sequence[Item], cfg: DictConfig) -> list[Item]:
    """The items with the turns the run's protocol asks (rheo.models.protocol: DeepSeek-R1-Distill under
    eagle3 asks the first turn only); every turn otherwise."""
    keep = prompting(cfg.model.name, run_protocol(cfg)).max_turns
    if keep is None:
        return list(items)
    return [Item(i.suite, i.item_id, i.category, i.turns[:keep]) for i in items]


def _run_units(cfg: DictConfig, measurement: Measurement, pair, pending: list, bar: tqdm) -> None:
    """Every pending unit; with a measurement that claims its units (eval.store.claims), a unit another
    process holds is put off to the end, then waited for and read again (its stored rows are reused)."""
    claims = getattr(measurement, "claims", None)
    later, failed_in_a_row = [], 0
    for job, item in pending:
        if claims is not None and not measurement.claim(job, item, wait=False):
            later.append((job, item))
            continue
        failed_in_a_row = _one_unit(cfg, measurement, pair, job, item, bar, failed_in_a_row)
    if later:
        log.info("%d unit(s) of work were claimed by another job of the same configuration: waiting for them, "
                 "then reusing what it stored", len(later))
    for job, item in later:
        measurement.claim(job, item, wait=True)
        failed_in_a_row = _one_unit(cfg, measurement, pair, job, item, bar, failed_in_a_row)


def _one_unit(cfg: DictConfig, measurement: Measurement, pair, job, item: Item, bar: tqdm,
              failed_in_a_row: int) -> int:
    """One unit (its claim, if taken, released after it); returns the failures in a row."""
    try:
        error = measurement.run_unit(pair, job, item, bar)
    finally:
        if getattr(measurement, "claims", None) is not None:
            measurement.release(job, item)
    failed_in_a_row = failed_in_a_row + 1 if error else 0
    if failed_in_a_row >= cfg.max_consecutive_failures and measurement.summary.computed == 0:
        raise RuntimeError(f"the first {failed_in_a_row} units of work all failed (under {cfg.output_dir}); "
                           f"last error: {error}")
    return failed_in_a_row


def unit_failed(summary: RunSummary, method: str, error: Exception, where: str) -> str:
    """Count a unit of work that raised; returns its one-line error."""
    line = f"{type(error).__name__}: {error}".splitlines()[0]
    log.warning("FAILED %s %s: %s", method, where, line)
    summary.attempt(method, line)
    return line


def progress_bar(cfg: DictConfig, measurement: Measurement, total: int) -> tqdm:
    """One compact line: "job 3/13 rheo m=1 T=1 all: 12/56 rows [01:10<05:20, tau=2.1]"."""
    job = os.environ.get(JOB_ENV, "").strip()
    desc = f"{'job ' + job + ' ' if job else ''}{measurement.label} T={float(cfg.temperature):g} {cfg.dataset.name}"
    unit = measurement.unit.replace("(s)", "s")
    return tqdm(total=total, desc=desc, unit=unit, disable=not cfg.progress, mininterval=10 if job else 0.1,
                bar_format="{desc}: {n_fmt}/{total_fmt} " + unit + " [{elapsed}<{remaining}{postfix}]")


def _remove_if_untouched(root: Path, made_folder: bool, made_manifest: bool) -> None:
    """After a failed load: the manifest (and the folder) this run made go again, if nothing else is there."""
    if made_manifest and all(p.name == storage.MANIFEST for p in root.iterdir()):
        (root / storage.MANIFEST).unlink(missing_ok=True)
        if made_folder:
            root.rmdir()


def check_against_pair(cfg: DictConfig, spec, pair, prompts: Sequence[Sequence[int]]) -> None:
    """After the load, before the first generation: children per node vs the draft vocabulary, prompt + new tokens
    vs the target's context length (``prompts``: the first-turn prompts of the pending rows)."""
    if not get_method(spec.method).is_reference:
        vocab = int(pair.drafter.vocab_size)
        if spec.max_children > vocab:
            raise ValueError(f"{_children_key(spec)}={spec.max_children} exceeds the draft vocabulary of model "
                             f"{cfg.model.name!r} ({vocab} tokens): choose {_children_key(spec)} <= {vocab}")
    context = context_length(pair)
    if context is None:
        return
    if context < 1:
        raise ValueError(f"model {cfg.model.name!r} has a context length of {context}: its config.json "
                         f"max_position_embeddings must be >= 1 (fix the model's config.json)")
    max_new = int(cfg.max_new_tokens)
    if max_new >= context:
        raise ValueError(f"max_new_tokens={max_new} >= the context length of model {cfg.model.name!r} "
                         f"({context} positions): choose max_new_tokens < {context}")
    longest = max((len(p) for p in prompts), default=0)
    if longest + max_new > context:
        fix = (f"choose max_new_tokens <= {context - longest}" if longest < context else
               f"shorten or leave out that prompt (no max_new_tokens fits: the prompt alone fills the context)")
        raise ValueError(f"max_new_tokens={max_new} plus the longest prompt ({longest} tokens) exceeds the "
                         f"context length of model {cfg.model.name!r} ({context} positions): {fix}")


def _children_key(spec: SpecConfig) -> str:
    """The method parameter that sets ``spec.max_children`` (the most children one node gets), as
    the config names it."""
    if spec.max_children == spec.k and "k" in get_method(spec.method).fields:
        return "method.k"
    if spec.branching is not None and spec.max_children == max(spec.branching):
        return "max(method.branching)"
    return f"method {spec.method}'s children per node"


def context_length(pair) -> Optional[int]:
    """The target's context length (positions), or None when it does not say."""
    value = getattr(pair.target, "context_length", None)
    return int(value) if value is not None else None
