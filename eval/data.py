"""Benchmark prompts: the six suites of data/benchmarks, loaded with `datasets`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from datasets import disable_progress_bars, load_dataset

from eval.schema import SUITE_FILES


@dataclass(frozen=True)
class Item:
    suite: str
    item_id: int  # the file's question_id
    category: str
    turns: tuple[str, ...]  # user messages; MT-bench has two


def load_suite(data_dir: Path | str, suite: str, items: Optional[Sequence[int]] = None,
               limit: Optional[int] = None) -> list[Item]:
    """Items of one suite in file order; ``items`` selects question_ids, then ``limit`` truncates."""
    if suite not in SUITE_FILES:
        raise ValueError(f"unknown suite {suite!r}; choose from {list(SUITE_FILES)}")
    path = Path(data_dir) / SUITE_FILES[suite]
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file {path} not found (data_dir={data_dir})")
    disable_progress_bars()
    ds = load_dataset("json", data_files=str(path), split="train")
    rows = [Item(suite, int(r["question_id"]), str(r["category"]), tuple(r["turns"])) for r in ds]
    if items is not None:
        wanted = set(int(i) for i in items)
        rows = [r for r in rows if r.item_id in wanted]
    if limit is not None:
        rows = rows[:limit]
    for r in rows:
        if not r.turns or not all(isinstance(t, str) and t for t in r.turns):
            raise ValueError(f"{path}: item {r.item_id} has an empty or non-text turn")
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
