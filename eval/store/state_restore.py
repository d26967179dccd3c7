"""Resuming a same-state study from its archive: ``restore_from=X.parquet`` (eval.measure.same_states)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eval.store import storage
from eval.store.state_archive import DRIVER_SCHEMA, FINGERPRINT, ROW_SCHEMA, archive_paths


def restore_rows(archive: Path | str, root: Path | str) -> int:
    """Write the rows of ``archive`` (export_rows) back into the results directory ``root`` as the
    shards it lacks, so that a run into ``root`` computes only what the archive does not hold.
    A shard already in ``root`` is kept as it is. Row values that are not plain folder names
    (``../../x``) are refused before anything is written. Returns the number of shards written. The
    folders are named by the hashes the rows carry; a run writes their config.json."""
    root = Path(root)
    storage.prepare_output_dir(root, FINGERPRINT)
    todo = []
    for driver, schema in ((False, ROW_SCHEMA), (True, DRIVER_SCHEMA)):
        table = pq.read_table(archive_paths(archive)[1 if driver else 0], schema=schema)
        frame = table.to_pandas()
        inner = [] if driver else ["config_hash"]
        for (model, dhash, *rest), idx in frame.groupby(["model", "driver_hash"] + inner
                                                         + ["dataset", "item_id", "turn"]).groups.items():
            names = [storage.plain_name(v, f"{archive}: a row's {c}") for v, c in
                     zip((model, dhash, *rest[:-3]), ("model", "driver_hash", "config_hash"))]
            cdir = root.joinpath(*names[:2], "driver" if driver else names[2])
            suite, item_id, turn = rest[-3:]
            order = sorted(idx, key=lambda i: frame.at[i, "state"]) if not driver else list(idx)
            todo.append((storage.shard_path(cdir, suite, int(item_id), int(turn)),
                         table.take(pa.array(order, type=pa.int64()))))
    written = 0
    for path, part in todo:
        if not os.path.lexists(path):
            storage.write_table(path, part)
            written += 1
    return written
