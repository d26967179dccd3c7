"""Benchmark prompts: the six suites of data/benchmarks, or any prompt set ``datasets`` reads.

Every prompt set becomes a :class:`datasets.DatasetDict` with one split per suite
(``eval.prompts.sources.prompt_datasets``), and every record of it an :class:`Item`
(``eval.prompts.sources.load_prompts``, what a run iterates over). Records are validated, and an
error names where the record is: ``file:line`` for a JSON-lines file (checked
line by line before ``datasets`` reads it), ``source, record i`` otherwise.

* The six suites (``dataset.path`` and ``dataset.hub`` unset): the JSON-lines files
  of ``data_dir`` (eval.store.keys.SUITE_FILES). ``question_id`` an integer unique in
  its file, ``turns`` a non-empty list of non-empty strings (MT-bench has two),
  ``category`` a string when present.
* A user's prompt set (``dataset.path`` or ``dataset.hub``; eval/prompts/sources.py):
  the fields that hold the turns, the id and the category are named in the config
  (``turns_field`` may hold one string: one turn). Ids that are not all integers
  (SPEED-Bench's string ids) are replaced by the record's position in its suite.

Each item carries a hash of its turns (:attr:`Item.turns_sha`), stored in its result
rows, so that a rerun after the text of an item changed recomputes its rows instead
of reusing them.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from eval.store.keys import SUITE_FILES


class BenchmarkDataError(ValueError):
    """A prompt set whose records are not what the harness needs (names file and line, or record)."""


@dataclass(frozen=True)
class Item:
    suite: str
    item_id: int  # the record's question_id (or its position in the suite, see the module doc)
    category: str
    turns: tuple[str, ...]  # user messages; MT-bench has two

    @property
    def turns_sha(self) -> str:
        """Hash of the turns' text (16 hex digits): what the rows of this item were made from."""
        return hashlib.sha256(json.dumps(list(self.turns)).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Fields:
    """Which record fields hold what. ``strict``: ids must be integers (the six suites)."""

    turns: str = "turns"
    id: Optional[str] = "question_id"
    category: Optional[str] = "category"
    strict: bool = True


BUILTIN = Fields()


# ---------------------------------------------------------------- one record
def record_item(record: object, suite: str, where: str, fields: Fields = BUILTIN, position: int = 0):
    """(Item, raw id) of one record; the raw id is the id field's value (None without one)."""
    if not isinstance(record, dict):
        raise BenchmarkDataError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    qid = _record_id(record, where, fields)
    turns = record.get(fields.turns)
    if isinstance(turns, str) and not fields.strict:
        turns = [turns]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise BenchmarkDataError(f"{where}: {fields.turns} must be a non-empty list of non-empty strings, got "
                                 f"{_short(turns)}")
    category = record.get(fields.category, "") if fields.category else ""
    category = "" if category is None else category
    if not isinstance(category, str):
        raise BenchmarkDataError(f"{where}: {fields.category} must be a string, got {category!r}")
    item_id = int(qid) if _integral(qid) else position
    return Item(suite, item_id, category, tuple(turns)), qid


def _record_id(record: dict, where: str, fields: Fields):
    if fields.id is None:
        return None
    qid = record.get(fields.id)
    if fields.strict and not _integral(qid, digits=False):
        raise BenchmarkDataError(f"{where}: {fields.id} must be an integer, got {qid!r}")
    if not fields.strict and not (_integral(qid) or (isinstance(qid, str) and qid.strip())):
        raise BenchmarkDataError(f"{where}: {fields.id} must be an integer or a non-empty string, got {qid!r}")
    if _integral(qid) and not -2**63 <= int(qid) < 2**63:
        raise BenchmarkDataError(f"{where}: {fields.id} {int(qid)} is outside the 64-bit range of the rows' item_id: "
                                 f"use smaller ids" + ("" if fields.strict else " (or dataset.id_field=null)"))
    return qid


def _integral(value: object, digits: bool = True) -> bool:
    """An integer id: an int (not a bool), or (``digits``) a string of digits."""
    if isinstance(value, str):
        return digits and value.strip().lstrip("-").isdigit()
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------- many records
def read_records(path: Path, suite: str, fields: Fields = BUILTIN) -> list[Item]:
    """Every record of a JSON-lines file, validated line by line (errors name file:line), in file order."""
    records: list[tuple[str, object]] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                records.append((where, json.loads(line)))
            except ValueError as e:
                raise BenchmarkDataError(f"{where}: not a JSON object ({e})") from None
    if not records:
        raise BenchmarkDataError(f"{path}: no records (the file is empty or holds only blank lines): give one "
                                 f"JSON object per line")
    return make_items(records, suite, fields)


def make_items(records: Sequence[tuple[str, object]], suite: str, fields: Fields) -> list[Item]:
    """Items of (where, record) pairs in order. Ids must be unique; when they are not all integers
    (a user's prompt set only) every item takes its position in the suite as its id."""
    pairs = [record_item(rec, suite, where, fields, i) for i, (where, rec) in enumerate(records)]
    integral = fields.id is not None and all(_integral(qid) for _, qid in pairs)
    first: dict[object, str] = {}
    for (where, _), (_, qid) in zip(records, pairs):
        key = int(qid) if integral else qid
        if key is not None and key in first:
            raise BenchmarkDataError(f"{where}: {fields.id} {qid!r} already used {_at(first[key])}; "
                                     f"{fields.id}s must be unique in a suite")
        first[key] = where
    if integral:
        return [item for item, _ in pairs]
    return [Item(item.suite, i, item.category, item.turns) for i, (item, _) in enumerate(pairs)]


def _at(where: str) -> str:
    head, sep, line = where.rpartition(":")
    return f"on line {line}" if sep and line.isdigit() else f"at {where}"


def dataset_items(ds, suite: str, fields: Fields, label: str) -> list[Item]:
    """Items of one ``datasets.Dataset`` split, in row order (errors name ``label, record i``)."""
    return make_items([(f"{label}, record {i}", rec) for i, rec in enumerate(ds)], suite, fields)


def read_files(builder: str, paths: dict[str, Path]):
    """``load_dataset(builder, data_files=...)`` into memory (a throw-away cache: an edited file is never
    read from a stale cache), without progress bars. One split per entry of ``paths``."""
    import datasets

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory() as cache:
            return datasets.load_dataset(builder, data_files={s: str(p) for s, p in paths.items()},
                                         cache_dir=cache, keep_in_memory=True)
    finally:
        if bars:
            datasets.enable_progress_bars()


# ---------------------------------------------------------------- the six suites
def builtin_datasets(data_dir: Path | str, suites: Sequence[str] = tuple(SUITE_FILES)):
    """The suites' JSON-lines files of ``data_dir`` as a DatasetDict (one split per suite), each
    file validated line by line first."""
    paths = {}
    for suite in suites:
        if suite not in SUITE_FILES:
            raise ValueError(f"unknown suite {suite!r}; choose from {list(SUITE_FILES)}")
        path = Path(data_dir) / SUITE_FILES[suite]
        if not path.is_file():
            raise FileNotFoundError(f"benchmark file {path} not found (data_dir={data_dir})")
        read_records(path, suite)
        paths[suite] = path
    return read_files("json", paths)


def load_suite(data_dir: Path | str, suite: str, items: Optional[Sequence[int]] = None,
               limit: Optional[int] = None) -> list[Item]:
    """Items of one of the six suites in file order; ``items`` selects question_ids, then ``limit`` truncates."""
    ds = builtin_datasets(data_dir, [suite])[suite]
    return select(dataset_items(ds, suite, BUILTIN, str(Path(data_dir) / SUITE_FILES[suite])), items, limit)


def select(items: list[Item], item_ids: Optional[Sequence[int]], limit: Optional[int]) -> list[Item]:
    """``item_ids`` (question_ids) first, then the first ``limit``; order kept."""
    if item_ids is not None:
        wanted = set(int(i) for i in item_ids)
        items = [r for r in items if r.item_id in wanted]
    return items if limit is None else items[:limit]


def chat_messages(item: Item, turn: int, previous_answers: Sequence[str]) -> list[dict]:
    """Messages for ``turn`` (0-based): earlier user turns interleaved with the model's own answers."""
    if len(previous_answers) != turn:
        raise ValueError(f"turn {turn} needs {turn} previous answers, got {len(previous_answers)}")
    messages: list[dict] = []
    for t in range(turn):
        messages.append({"role": "user", "content": item.turns[t]})
        messages.append({"role": "assistant", "content": previous_answers[t]})
    messages.append({"role": "user", "content": item.turns[turn]})
    return messages
