"""Same-state archives: every row of a results directory in one parquet pair, for git
(``X.parquet`` and ``X.driver.parquet``), optionally without the bulky mechanism columns."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def archive_paths(archive: Path | str) -> tuple:
    """(rows, driver rows) files of a same-state archive ``X.parquet``: X.parquet, X.driver.parquet."""
    archive = Path(archive)
    return archive, archive.with_name(archive.stem + ".driver.parquet")


#: mechanism columns an archive may leave out (``--archive-without``): the bulk of its bytes
OPTIONAL_COLUMNS = {"calibration": ("calib_n", "calib_q", "calib_p"), "depth": ("depth_accept",)}


def without_columns(rows, groups=()):
    """``rows`` with the columns of each OPTIONAL_COLUMNS group in ``groups`` emptied (null)."""
    if not groups:
        return rows
    rows = rows.copy()
    for group in groups:
        for col in OPTIONAL_COLUMNS[group]:
            rows[col] = None
    return rows


def archive_bytes(root: Path | str, without=()) -> tuple[bytes, bytes, int]:
    """(rows, driver rows) of the results directory ``root`` as the parquet bytes of an archive pair,
    and the number of rows; ``without``: OPTIONAL_COLUMNS groups left out (null)."""
    from eval.same_state import DRIVER_SCHEMA, ROW_SCHEMA, load_rows

    rows, drivers = without_columns(load_rows(root), without), load_rows(root, driver=True)
    if rows.empty:
        raise ValueError(f"{root} holds no same-state rows: nothing to export")
    out = []
    for frame, schema in ((rows, ROW_SCHEMA), (drivers, DRIVER_SCHEMA)):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), sink, compression="zstd")
        out.append(sink.getvalue().to_pybytes())
    return out[0], out[1], len(rows)


def export_rows(root: Path | str, archive: Path | str) -> int:
    """Every row (and driver row) of the results directory ``root`` into one archive pair, for git.
    Returns the number of rows."""
    from rheo.io import atomic_write_bytes

    data, driver_data, n = archive_bytes(root)
    for path, blob in zip(archive_paths(archive), (data, driver_data)):
        atomic_write_bytes(path, blob)
    return n
