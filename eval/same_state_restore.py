"""Resuming a same-state study from its archive: ``restore_from=X.parquet`` (eval.same_state)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eval import storage
from eval.same_state import DRIVER_SCHEMA, FINGERPRINT, ROW_SCHEMA, archive_paths


def restore_rows(archive: Path | str, root: Path | str) -> int:
    """Write the rows of ``archive`` (export_rows) back into the results directory ``root`` as the
    shards it lacks, so that a run into ``root`` computes only what the archive does not hold.
    A shard already in ``root`` is kept as it is. Returns the number of shards written. The
    folders are named by the hashes the rows carry; a run writes their config.json."""
    root = Path(root)
    storage.prepare_output_dir(root, FINGERPRINT)
    written = 0
    for driver, schema in ((False, ROW_SCHEMA), (True, DRIVER_SCHEMA)):
        table = pq.read_table(archive_paths(archive)[1 if driver else 0], schema=schema)
        frame = table.to_pandas()
        inner = [] if driver else ["config_hash"]
        for (model, dhash, *rest), idx in frame.groupby(["model", "driver_hash"] + inner
                                                         + ["dataset", "item_id", "turn"]).groups.items():
            cdir = root / model / dhash / ("driver" if driver else rest[0])
            suite, item_id, turn = rest[-3:]
            path = storage.shard_path(cdir, suite, int(item_id), int(turn))
            if path.exists():
                continue
            order = sorted(idx, key=lambda i: frame.at[i, "state"]) if not driver else list(idx)
            part = table.take(pa.array(order, type=pa.int64()))
            path.parent.mkdir(parents=True, exist_ok=True)
            storage.atomic_write(path, lambda f, part=part: pq.write_table(part, f))
            written += 1
    return written
