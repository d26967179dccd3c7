"""Same-state paired evaluation: ``python -m eval.run measure=same_state [overrides]``.

Examples::

    python -m eval.run measure=same_state dataset=all method=topk 'compare=[{name:topk},{name:rheo,m:1}]'
    python -m eval.run -m experiment=serving_temps temperature=0.5,0.7

For every (suite, item, turn) the driver (``method``) generates as ``measure=realized`` would
(same generation seed, so the same tokens as its realized row), and at each of its cycle starts
every ``compare`` entry builds, scores and evaluates its own tree (:mod:`rheo.same_state`). Rows
(their schemas and reader: :mod:`eval.store.state_archive`): one per (compared method config,
state) with the expected emitted tokens and the mechanism columns of :mod:`rheo.mechanism` (see
``docs/expected-acceptance.md``). Tables: :mod:`eval.states.tables`. The loop, resume policy,
progress, failures and Ctrl-C are those of every measurement (:mod:`eval.measure.loop`).

Layout under ``output_dir`` (its own manifest; resumable, atomic shards)::

    <model>/<driver hash>/config.json                    the driver's method key
    <model>/<driver hash>/driver/<suite>/<item>_t<turn>.parquet      the driver's output (1 row)
    <model>/<driver hash>/<method hash>/<suite>/<item>_t<turn>.parquet  one row per state

A rerun computes only the (item, turn)s a compared method lacks; the compared trees draw common
random numbers keyed by (key, state, token path), so rows do not depend on what else was compared.
"""

from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pyarrow as pa
import torch
from omegaconf import DictConfig

from eval.conf.schema import CheckedRun
from eval.measure.loop import unit_failed
from eval.measure.summary import RunSummary
from eval.prompts.suites import Item, chat_messages
from eval.store import storage
from eval.store.keys import config_hash, generation_seed
from eval.store.code_version import VersionCheck, code_version, method_code_version
from eval.store.state_archive import DRIVER_SCHEMA, FINGERPRINT, ROW_SCHEMA
from eval.store.state_shards import DRIVER, stored
from rheo.methods import get_method
from rheo.paths import resolve_path, start_git_sha

log = logging.getLogger("eval.measure.same_states")


@dataclass
class Compared:
    spec: object  # SpecConfig
    key: dict
    chash: str
    cdir: Path = field(default=Path())


class SameState:
    """``measure=same_state``: the driver's (item, turn)s, each with every compared tree at its states."""

    fingerprint = FINGERPRINT
    unit = "(item, turn)(s)"

    def __init__(self, cfg: DictConfig, checked: CheckedRun) -> None:
        """``checked``: eval.conf.validate.check_run(cfg)."""
        start_git_sha()  # the rows name the code this process started with
        self.cfg = cfg
        self.driver = checked.spec
        self.compared = [Compared(spec, key, config_hash(key)) for spec, key in checked.compared]
        self.specs = [self.driver] + [c.spec for c in self.compared]
        self.dkey = checked.key
        self.summary = RunSummary(config_hashes={"driver": config_hash(self.dkey)})
        self.label = (f"same-state {get_method(self.driver.method).variant(self.driver)}, "
                      f"{len(self.compared)} compared")
        self.versions = VersionCheck(keep_stale=bool(cfg.get("keep_stale_rows", False)))

    def open(self, root: Path) -> None:
        cfg = self.cfg
        if cfg.restore_from:
            from eval.store.state_restore import restore_rows

            restored = restore_rows(resolve_path(cfg.restore_from, must_exist=True), root)
            log.info("same-state: %d shards restored from %s into %s", restored, cfg.restore_from, root)
        self.ddir = storage.prepare_config_dir(root, cfg.model.name, config_hash(self.dkey), self.dkey)
        for c in self.compared:
            c.cdir = storage.prepare_config_dir(root / cfg.model.name, self.ddir.name, c.chash, c.key)

    def pending(self, items) -> list:
        out = []
        for item in items:
            if all(not self._todo(item, turn)[1] for turn in range(len(item.turns))):
                self.summary.skipped += len(item.turns)
            else:
                out.append((None, item))
        return out

    def _todo(self, item: Item, turn: int) -> tuple[Optional[pa.Table], list[Compared]]:
        """The driver's stored row (None: none to reuse) and the compared methods that lack the turn."""
        drow = stored(storage.shard_path(self.ddir / DRIVER, item.suite, item.item_id, turn), DRIVER_SCHEMA, item,
                      self.versions, self.driver.method)
        todo = [c for c in self.compared if drow is None or stored(
            storage.shard_path(c.cdir, item.suite, item.item_id, turn), ROW_SCHEMA, item, self.versions,
            c.spec.method) is None]
        return drow, (todo if drow is None or todo else [])

    def start(self, pair, pending: list) -> None:
        pass  # the folders exist (open); same-state rows are not timed, so nothing to warm up

    def run_unit(self, pair, job: None, item: Item, bar) -> Optional[str]:
        answers: list[str] = []
        for turn in range(len(item.turns)):
            drow, todo = self._todo(item, turn)
            if drow is not None and not todo:
                self.summary.skipped += 1
                answers.append(drow.column("answer")[0].as_py())
            else:
                try:
                    answers.append(_one_turn(self.cfg, pair, self.driver, self.dkey, self.ddir, todo, item, turn,
                                             answers, self.summary))
                except Exception as e:  # nothing of this turn is stored: a rerun computes it
                    bar.update(len(item.turns) - turn)
                    return unit_failed(self.summary, "same_state", e, f"{item.suite} item {item.item_id} turn {turn}")
            bar.update(1)
        return None


def state_key(suite: str, item_id: int, turn: int, seed: int) -> str:
    """The name of a generation's compared-method streams (rheo.same_state's ``key``)."""
    return f"{suite}/{item_id}/{turn}/{seed}"


def study_drafter(pair, draft_mix=None, draft_temp=None):
    """The pair's drafter as a study sets it: the head tempered by ``draft_temp`` (before any mixing),
    then mixed with the target by the draft-quality dial's ``draft_mix``; the head itself for neither."""
    drafter = pair.drafter
    if draft_temp is not None:
        from rheo.models.scaled import ScaledDrafter

        drafter = ScaledDrafter(drafter, float(draft_temp))
    if draft_mix is not None:
        from rheo.models.mixture import MixedDrafter

        drafter = MixedDrafter(drafter, pair.target, float(draft_mix))
    return drafter


def _one_turn(cfg, pair, driver, dkey: dict, ddir: Path, todo: list[Compared], item, turn: int,
              answers: list[str], summary: RunSummary) -> str:
    """Generate one (item, turn) with the compared methods ``todo``; write their shards and the
    driver's; returns the driver's answer (the next turn's context)."""
    from rheo.same_state import same_state_generate

    prompt = pair.format_chat(chat_messages(item, turn, answers[:turn]))
    seed = generation_seed(item.suite, item.item_id, turn, int(cfg.seed))
    generator = torch.Generator(device="cuda" if str(cfg.device).startswith("cuda") else "cpu").manual_seed(seed)
    key = state_key(item.suite, item.item_id, turn, int(cfg.seed))
    drafter = study_drafter(pair, cfg.get("draft_mix"), cfg.get("draft_temp"))
    with torch.inference_mode():
        got = same_state_generate(pair.target, drafter, prompt, int(cfg.max_new_tokens), driver,
                                  [c.spec for c in todo], generator, key=key,
                                  eos_token_id=list(pair.eos_token_ids) or None, calibration=bool(cfg.calibration),
                                  ot_bound=bool(cfg.ot_bound))
    out = got.output
    base = {"model": cfg.model.name, "dataset": item.suite, "item_id": item.item_id, "turn": turn,
            "category": item.category, "turns_sha": item.turns_sha, "seed": int(cfg.seed),
            "temperature": float(cfg.temperature), "head_sha": dkey.get("head_sha"),
            "max_new_tokens": int(cfg.max_new_tokens), "driver": get_method(driver.method).variant(driver),
            "driver_hash": ddir.name, "device": str(dkey["device"]), "dtype": str(dkey["dtype"]),
            "draft_mix": cfg.get("draft_mix"),
            "draft_temp": cfg.get("draft_temp"), "git_sha": start_git_sha(),
            "code_version": method_code_version(driver.method, code_version()),
            "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    for i, c in enumerate(todo):
        own = {**base, "method": c.spec.method, "variant": get_method(c.spec.method).variant(c.spec),
               "code_version": method_code_version(c.spec.method, code_version()),
               "config_hash": c.chash, **{f: c.key.get(f) for f in storage.METHOD_COLUMNS}}
        rows = [{**own, "state": t.state, **t.columns, "driver_emitted": out.accept_lengths[t.state],
                 "driver_expected": out.expected_accept_lengths[t.state]} for t in got.trees if t.method == i]
        _write(storage.shard_path(c.cdir, item.suite, item.item_id, turn), rows, ROW_SCHEMA)
        summary.rows += len(rows)
    answer = pair.answer_text(out.tokens)
    _write(storage.shard_path(ddir / DRIVER, item.suite, item.item_id, turn), [{**base, "output_tokens": out.tokens, "accept_lengths": out.accept_lengths,
                    "expected_accept_lengths": out.expected_accept_lengths, "answer": answer}], DRIVER_SCHEMA)
    summary.computed += 1
    return answer


def _write(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    storage.write_table(path, pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema))
