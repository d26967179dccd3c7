"""Benchmark prompts: the six suites of data/benchmarks (JSON lines, one record per item).

Every record is validated, and an error names the file and line: ``question_id``
an integer unique in its file, ``turns`` a non-empty list of non-empty strings
(MT-bench has two), ``category`` a string when present. Each item carries a hash
of its turns (:attr:`Item.turns_sha`), stored in its result rows, so that a rerun
after the text of an item changed recomputes its rows instead of reusing them.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from eval.schema import SUITE_FILES


class BenchmarkDataError(ValueError):
    """A benchmark file whose records are not what the harness needs (names file and line)."""


@dataclass(frozen=True)
class Item:
    suite: str
    item_id: int  # the file's question_id
    category: str
    turns: tuple[str, ...]  # user messages; MT-bench has two

    @property
    def turns_sha(self) -> str:
        """Hash of the turns' text (16 hex digits): what the rows of this item were made from."""
        return hashlib.sha256(json.dumps(list(self.turns)).encode("utf-8")).hexdigest()[:16]


def read_records(path: Path, suite: str) -> list[Item]:
    """Every record of a JSON-lines benchmark file, validated, in file order."""
    items: list[Item] = []
    first_line: dict[int, int] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except ValueError as e:
                raise BenchmarkDataError(f"{where}: not a JSON object ({e})") from None
            item = _item(record, suite, where)
            if item.item_id in first_line:
                raise BenchmarkDataError(f"{where}: question_id {item.item_id} already used on line "
                                         f"{first_line[item.item_id]}; question_ids must be unique in a file")
            first_line[item.item_id] = number
            items.append(item)
    return items


def _item(record: object, suite: str, where: str) -> Item:
    if not isinstance(record, dict):
        raise BenchmarkDataError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    qid = record.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, numbers.Integral):
        raise BenchmarkDataError(f"{where}: question_id must be an integer, got {qid!r}")
    turns = record.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise BenchmarkDataError(f"{where}: turns must be a non-empty list of non-empty strings, got "
                                 f"{_short(turns)}")
    category = record.get("category", "")
    if not isinstance(category, str):
        raise BenchmarkDataError(f"{where}: category must be a string, got {category!r}")
    return Item(suite, int(qid), category, tuple(turns))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_suite(data_dir: Path | str, suite: str, items: Optional[Sequence[int]] = None,
               limit: Optional[int] = None) -> list[Item]:
    """Items of one suite in file order; ``items`` selects question_ids, then ``limit`` truncates."""
    if suite not in SUITE_FILES:
        raise ValueError(f"unknown suite {suite!r}; choose from {list(SUITE_FILES)}")
    path = Path(data_dir) / SUITE_FILES[suite]
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file {path} not found (data_dir={data_dir})")
    rows = read_records(path, suite)
    if items is not None:
        wanted = set(int(i) for i in items)
        rows = [r for r in rows if r.item_id in wanted]
    if limit is not None:
        rows = rows[:limit]
    return rows


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
