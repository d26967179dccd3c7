"""What ``rheo publish`` shows and checks of one file it would publish, from the bytes it read once.

:func:`check`: an archive has a row key (:func:`archive_key`: realized rows, same-state rows and their
drivers, the head reading; a rows archive without one is refused), holds no key twice, keeps the committed
columns and rows and takes no rows of other settings. :func:`describe`: a summary, never the whole file
(rows added, removed and with changed values; lines added and removed with the first few; sizes).
"""

from __future__ import annotations

import difflib
import io
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from eval.store.committed import CommittedOutputsError, check_growth
from rheo.paths import out_root, shown

#: changed lines of one text file shown (the rest counted)
DIFF_LINES = 6


def _table(data: bytes):
    return pq.read_table(io.BytesIO(data))


def check(path: Path, twin: Path, data: bytes) -> None:
    """Raise :class:`CommittedOutputsError` if the bytes ``data`` (of ``path``) may not replace the
    committed ``twin``: an archive has a row key and holds none twice, keeps its columns (it may add some),
    keeps every committed row and takes no rows of settings it does not hold."""
    if path.suffix != ".parquet":
        return
    names = pq.read_schema(io.BytesIO(data)).names
    key, settings = archive_key(names, path.name)
    if not key and is_archive(path):
        raise CommittedOutputsError(f"{shown(path)}: no row key is known for an archive with these columns, so it "
                                    f"cannot be checked to keep the committed rows; nothing was written")
    if key:
        cols = sorted(set(key + settings))
        new = _table(data).select(cols).to_pandas()
        twice = new[new.duplicated(key, keep=False)]
        if len(twice):
            raise CommittedOutputsError(f"{shown(path)} holds {len(twice)} rows that share their key "
                                        f"({', '.join(key)}) with another row: every reader would refuse it; export "
                                        f"it again from its rows; nothing was written")
    if not twin.is_file():
        return
    old = pq.read_schema(twin).names
    gone = sorted(set(old) - set(names))  # a column added since (a newer row schema) is no loss
    if gone:
        raise CommittedOutputsError(f"{shown(path)} lacks columns of the committed {shown(twin)} ({', '.join(gone[:5])}"
                                    f"{', ...' if len(gone) > 5 else ''}): not the same keys; nothing was written")
    if key:
        check_growth(twin, pq.read_table(twin, columns=cols).to_pandas(), new, key, settings)


def is_archive(path: Path) -> bool:
    """A rows archive: a ``.parquet`` file directly in the output root (``runs.parquet``, ``<study>.parquet``,
    ``<study>.driver.parquet``, ``head_reading.parquet``), not a table's data under ``tables/``."""
    try:
        return path.suffix == ".parquet" and path.absolute().parent == out_root().absolute()
    except OSError:
        return False


#: row key and settings of each kind of archive, the first whose columns an archive holds
ARCHIVE_KEYS = (
    ("driver", ["model", "temperature", "driver_hash", "dataset", "item_id", "turn", "seed"], ["model", "driver_hash"]),
    ("head reading", ["prompt_set", "draft_mix", "temperature", "suite", "item_id"], ["prompt_set"]),
)


def archive_key(columns: Sequence[str], name: str = "") -> tuple[list[str], list[str]]:
    """(row key, settings) of an archive with these ``columns`` (``name``: its file name): same-state rows,
    realized rows, same-state driver rows (``*.driver.parquet``), the head reading, or ([], [])."""
    from eval.store import state_archive, storage

    kinds = [(list(state_archive.ROW_KEY), list(state_archive.SETTINGS)), (list(storage.ROW_KEY), ["config_hash"])]
    if name.endswith(".driver.parquet"):
        kinds.insert(0, tuple(ARCHIVE_KEYS[0][1:]))
    kinds.append(tuple(ARCHIVE_KEYS[1][1:]))
    for key, settings in kinds:
        if set(key + settings) <= set(columns):
            return list(key), list(settings)
    return [], []


def _row_text(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Each row's values in ``columns`` as one 64-bit hash (a list cell by its bytes, other objects by their
    text): rows compare equal when their values do."""
    mixed = np.zeros(len(frame), dtype=np.uint64)
    for column in columns:
        values = frame[column]
        if values.dtype == object:
            values = values.map(lambda v: v.tobytes().hex() if isinstance(v, np.ndarray) else str(v))
        with np.errstate(over="ignore"):
            mixed = mixed * np.uint64(1000003) ^ pd.util.hash_pandas_object(values, index=False).to_numpy()
    return pd.Series(mixed, index=frame.index)


def row_summary(old: Optional[pd.DataFrame], new: pd.DataFrame, key: Sequence[str]) -> str:
    """``rows a -> b (x added, y removed, z with changed values)``: by ``key``, else by whole rows."""
    if old is None:
        return f"rows 0 -> {len(new)} ({len(new)} added)"
    if key:
        shared = [c for c in new.columns if c in old.columns]
        rest = [c for c in shared if c not in key]
        o = pd.DataFrame({"k": _row_text(old, key), "v": _row_text(old, rest)}).drop_duplicates("k")
        n = pd.DataFrame({"k": _row_text(new, key), "v": _row_text(new, rest)}).drop_duplicates("k")
        both = o.merge(n, on="k", how="outer", suffixes=("_old", "_new"), indicator=True)
        added, removed = int((both["_merge"] == "right_only").sum()), int((both["_merge"] == "left_only").sum())
        inner = both[both["_merge"] == "both"]
        changed = int((inner["v_old"] != inner["v_new"]).sum())
    else:
        shared = [c for c in new.columns if c in old.columns]
        o, n = _row_text(old, shared).value_counts(), _row_text(new, shared).value_counts()
        diff = o.subtract(n, fill_value=0)
        removed, added, changed = int(diff[diff > 0].sum()), int(-diff[diff < 0].sum()), None
    text = f"rows {len(old)} -> {len(new)} ({added} added, {removed} removed"
    return text + (f", {changed} with changed values)" if changed is not None else ")")


def describe(path: Path, twin: Path, data: bytes) -> list[str]:
    """Lines summarising how the bytes ``data`` of ``path`` would change ``twin``: an archive's or table's
    rows added, removed and changed; a text file's lines added and removed, with the first few; sizes."""
    head = f"{'new' if not twin.is_file() else 'changed'}: {shown(twin)} <- {shown(path)}"
    if path.suffix == ".parquet":
        new = _table(data).to_pandas()
        key, _ = archive_key(list(new.columns), path.name)
        old = pq.read_table(twin).to_pandas() if twin.is_file() else None
        return [f"{head}: {row_summary(old, new, key)}"]
    try:
        new_text = data.decode().splitlines()
        old_text = twin.read_text().splitlines() if twin.is_file() else []
    except UnicodeDecodeError:
        old = twin.stat().st_size if twin.is_file() else 0
        return [f"{head} ({old} -> {len(data)} bytes)"]
    if not twin.is_file():
        return [f"{head} ({len(new_text)} lines)"]
    diff = [line for line in list(difflib.unified_diff(old_text, new_text, lineterm="", n=0))[2:]  # (no file names)
            if line[:1] in "+-"]
    plus = sum(line.startswith("+") for line in diff)
    more = [f"  ... {len(diff) - DIFF_LINES} more changed lines"] if len(diff) > DIFF_LINES else []
    return [f"{head} (+{plus} -{len(diff) - plus} lines)"] + ["  " + line for line in diff[:DIFF_LINES]] + more
