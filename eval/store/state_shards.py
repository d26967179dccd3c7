"""Same-state shards read with the resume policy of eval.run (eval.store.resume).

Layout under a same-state ``output_dir``::

    <model>/<driver hash>/driver/<suite folder>/<item>_t<turn>.parquet        the driver's row
    <model>/<driver hash>/<method hash>/<suite folder>/<item>_t<turn>.parquet  one row per state

Every row of a shard must carry the values its place names (model, driver hash, method hash,
suite, item, turn): a shard copied into another method's folder, a parquet file of something
else, or an unreadable one is *flagged*: skipped by readers with a warning, deleted and
recomputed by a run. A shard made from other text of its item than the item has now is
recomputed too. Symlinked folders and special files are never read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import pyarrow as pa

from eval.store import storage
from eval.store.code_version import VersionCheck
from eval.store.resume import same_text
from eval.store.suite_names import suite_of_folder
from rheo.files import files_at_depth

log = logging.getLogger("eval.measure.same_states")
DRIVER = "driver"  # the folder of the driver's rows, beside the compared methods' hash folders
#: columns that shards written before they existed lack: the driver's device and dtype (filled from
#: its config.json), the draft-quality dial, the draft temperature and the method parameters keyed only when a method
#: reads them (null: not set)
LATE_COLUMNS = ("device", "dtype", "draft_mix", "draft_temp", "code_version") + tuple(sorted(storage.OPTIONAL_COLUMNS & set(storage.METHOD_COLUMNS)))


def expect_from_path(path: Path) -> dict:
    """The values every row of the shard at ``path`` must have, read from its place."""
    item, _, turn = path.stem.rpartition("_t")
    if not (item.lstrip("-").isdigit() and turn.isdigit()):
        raise storage.CorruptShardError(f"foreign shard {path}: file name is not <item_id>_t<turn>.parquet")
    expect = {"model": path.parents[3].name, "driver_hash": path.parents[2].name,
              "dataset": suite_of_folder(path.parent.name), "item_id": int(item), "turn": int(turn)}
    return expect if path.parents[1].name == DRIVER else {**expect, "config_hash": path.parents[1].name}


def read_shard(path: Path, schema: pa.Schema, expect: Optional[dict] = None) -> pa.Table:
    """The rows of one same-state shard, checked against ``expect`` (default: its place)."""
    return storage.read_table_shard(path, schema, expect_from_path(path) if expect is None else expect, LATE_COLUMNS)


def stored(path: Path, schema: pa.Schema, item, versions: VersionCheck,
           method: Optional[str] = None) -> Optional[pa.Table]:
    """The rows stored at ``path`` if a run may reuse them (readable, in their place, made from
    ``item``'s current text by this version of the decoding code, or kept by ``versions``); None
    otherwise (a bad shard is reported and deleted). ``method``: the method whose code version the rows
    must have (a plug-in's: eval.store.code_version.method_code_version)."""
    table = storage.load_existing(path, expect_from_path(path), lambda p, e: read_shard(p, schema, e))
    if table is None:
        return None
    first = table.slice(0, 1).to_pylist()[0]
    if not same_text(first, item, path) or not versions.reusable(first.get("code_version"), path, method):
        return None
    return table


def shard_tables(root: Path, schema: pa.Schema, driver: bool) -> list[pa.Table]:
    """Every readable, well-placed shard under ``root`` (the drivers' or the compared methods');
    flagged shards are reported and skipped."""
    tables = []
    for path in files_at_depth(root, 4, ".parquet"):
        if (path.parents[1].name == DRIVER) != driver or path.name.startswith(storage.TMP_PREFIX):
            continue
        try:
            tables.append(read_shard(path, schema))
        except storage.CorruptShardError as e:
            log.warning("%s -- skipped (rerun eval.measure.same_states to recompute it)", e)
    return tables
