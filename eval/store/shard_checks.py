"""What a shard must be to be read as data: its rows checked against its place.

A shard's folder names say what its rows are (model, config hash, suite, item, turn): a row
that says otherwise was copied, moved or edited by hand, and is never read as data. Names
built from row values (restoring an archive) must be plain folder names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

from eval.store.suite_names import suite_of_folder
from rheo.files import read_bounded


class OutputDirError(RuntimeError):
    """The output directory cannot be used (unwritable, or not ours)."""

    user_error = True  # rheo.cli: one line, no traceback


class ShardWriteError(OutputDirError):
    """A shard that cannot be written (full disk, quota, read-only)."""


class CorruptShardError(RuntimeError):
    """A shard that exists but is not one valid row for its path."""

    user_error = True  # rheo.cli: one line, no traceback


def expected_from_path(path: Path, folder_keys: Optional[dict] = None) -> dict:
    """The key fields a shard's row must have, read from its path (<model>/<hash>/<suite>/<item>_t<turn>)
    and, where its config folder has a readable config.json, the method named there (``folder_keys``:
    a cache of those files by folder)."""
    item, _, turn = path.stem.rpartition("_t")
    if not (item.lstrip("-").isdigit() and turn.isdigit()):
        raise CorruptShardError(f"corrupt shard {path}: file name is not <item_id>_t<turn>.parquet")
    expect = {"model": path.parents[2].name, "config_hash": path.parent.parent.name,
              "dataset": suite_of_folder(path.parent.name), "item_id": int(item), "turn": int(turn)}
    method = folder_method(path.parent.parent, {} if folder_keys is None else folder_keys)
    return {**expect, "method": method} if method is not None else expect


def folder_method(cdir: Path, cache: dict) -> Optional[str]:
    """The method of the config key stored in ``cdir``/config.json (None when it has none)."""
    if cdir not in cache:
        cfile = cdir / "config.json"
        try:
            cache[cdir] = json.loads(read_bounded(cfile, 1 << 20, str(cfile), "")).get("method")
        except (OSError, ValueError, AttributeError):
            cache[cdir] = None
    return cache[cdir]


def read_table_shard(path: Path, schema: pa.Schema, expect: dict, optional: tuple = ()) -> pa.Table:
    """The rows of a shard of ``schema`` (columns in ``optional`` may be absent: read as null);
    CorruptShardError unless it is readable, holds rows, and every row has ``expect``'s values."""
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for truncated/garbage files
        raise CorruptShardError(f"corrupt shard {path}: {type(e).__name__}: {e}") from e
    missing, extra = set(schema.names) - set(table.column_names), set(table.column_names) - set(schema.names)
    if missing - set(optional) or extra or table.num_rows == 0:
        raise CorruptShardError(f"foreign shard {path}: {table.num_rows} rows, columns differ from its kind's "
                                f"(missing {sorted(missing)}, unexpected {sorted(extra)})")
    for name in missing:
        table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    for name, value in expect.items():
        found = set(table.column(name).to_pylist())
        if found != {value}:
            raise CorruptShardError(f"misplaced shard {path}: {name}={sorted(found, key=str)!r}, its place says "
                                    f"{value!r} (copied or moved from another folder?)")
    return table.select(schema.names).cast(schema)


def plain_name(value: object, what: str) -> str:
    """``value`` as one folder name that stays inside its parent; OutputDirError otherwise (a
    name made from row data: ``../../x`` must not become a path)."""
    text = str(value)
    if text in ("", ".", "..") or any(c in text for c in "/\\\0") or len(text.encode()) > 200:
        raise OutputDirError(f"{what} {text[:80]!r} is not a plain folder name (it would leave the output folder): "
                             f"not a row this project writes; export the archive again from its results directory")
    return text
