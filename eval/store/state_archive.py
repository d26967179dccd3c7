"""Same-state rows at rest: their schemas (ROW_SCHEMA, DRIVER_SCHEMA), reading them from a results
directory or an archive (:func:`load_rows`), and archives: every row of a results directory in one
parquet pair, for git (``X.parquet`` and ``X.driver.parquet``), optionally without the bulky
mechanism columns. The run that writes the rows is :mod:`eval.measure.same_states`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

from eval.store import storage
from eval.store.state_shards import shard_tables
from rheo.paths import own_or_committed, program

FINGERPRINT = {"project": "rheo", "content": storage.SAME_STATE_CONTENT, "layout": 1}

_KEY_COLUMNS = [("model", pa.string()), ("dataset", pa.string()), ("item_id", pa.int64()), ("turn", pa.int64()),
                ("category", pa.string()), ("turns_sha", pa.string()), ("seed", pa.int64()),
                ("temperature", pa.float64()), ("head_sha", pa.string()), ("max_new_tokens", pa.int64()),
                ("driver", pa.string()), ("driver_hash", pa.string()), ("device", pa.string()),
                ("dtype", pa.string()), ("draft_mix", pa.float64()), ("draft_temp", pa.float64())]
ROW_SCHEMA = pa.schema(_KEY_COLUMNS + [
    ("state", pa.int64()), ("method", pa.string()), ("variant", pa.string()), ("config_hash", pa.string()),
    *storage.method_columns(),  # the method parameters (rheo.config.method_parameters)
    ("expected_emitted", pa.float64()), ("kept_nodes", pa.int64()), ("depth_accept", pa.list_(pa.float64())),
    ("sampled_share", pa.float64()), ("probe_drawn", pa.list_(pa.int64())), ("probe_kept", pa.list_(pa.int64())),
    ("calib_n", pa.list_(pa.int64())), ("calib_q", pa.list_(pa.float64())), ("calib_p", pa.list_(pa.float64())),
    ("root_acceptance", pa.float64()), ("root_ot_bound", pa.float64()),
    ("driver_emitted", pa.int64()), ("driver_expected", pa.float64()),
    ("git_sha", pa.string()), ("finished_at", pa.string()),
    ("code_version", pa.string()),  # eval.store.code_version; null in rows stored before the column
])
DRIVER_SCHEMA = pa.schema(_KEY_COLUMNS + [
    ("output_tokens", pa.list_(pa.int64())), ("accept_lengths", pa.list_(pa.int64())),
    ("expected_accept_lengths", pa.list_(pa.float64())), ("answer", pa.string()), ("git_sha", pa.string()),
    ("finished_at", pa.string()), ("code_version", pa.string()),
])


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


#: what names one evaluated tree: a compared config at one state of one driver's generation
ROW_KEY = ["model", "temperature", "driver_hash", "config_hash", "dataset", "item_id", "turn", "seed", "state"]
#: what a study's settings are in its rows: each (model, driver key). The driver key holds the run's
#: temperature, length, seed, dtype and dial value, so rows of a run at another size or setting are new
#: settings; a compared method added to the study's list at the same driver grows it (its rows pair
#: with the others' at the same states)
SETTINGS = ["model", "driver_hash"]
#: archives are written once and kept in git: the strongest zstd level (about 6% smaller than the default)
ARCHIVE_ZSTD_LEVEL = 19


def archive_table_bytes(table: pa.Table) -> bytes:
    """``table`` as the parquet bytes of an archive: zstd at ARCHIVE_ZSTD_LEVEL; float columns (and lists
    of floats) byte-stream-split without a dictionary, which stores the same values in about a quarter
    fewer bytes than dictionary pages; the other columns dictionary-encoded."""
    def floating(t: pa.DataType) -> bool:
        return pa.types.is_floating(t) or (pa.types.is_list(t) and pa.types.is_floating(t.value_type))
    floats = [f.name for f in table.schema if floating(f.type)]
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=ARCHIVE_ZSTD_LEVEL,
                   use_byte_stream_split=floats or False,
                   use_dictionary=[f.name for f in table.schema if f.name not in floats])
    return sink.getvalue().to_pybytes()
#: a trimmed archive (``depths`` given) keeps its mechanism shares in float32: the tables print them to
#: three decimals of means over thousands of rows; expected tokens stay float64 (paired differences)
TRIMMED_FLOAT32 = ("depth_accept", "sampled_share")


def _trimmed_schema(schema: pa.Schema) -> pa.Schema:
    for name in TRIMMED_FLOAT32:
        field = schema.field(name)
        kind = pa.list_(pa.float32()) if pa.types.is_list(field.type) else pa.float32()
        schema = schema.set(schema.get_field_index(name), field.with_type(kind))
    return schema


def archive_bytes(root: Path | str, without=(), depths: Optional[int] = None,
                  archive: Optional[Path] = None) -> tuple[bytes, bytes, int]:
    """(rows, driver rows) of the results directory ``root`` as the parquet bytes of an archive pair,
    and the number of rows; ``without``: OPTIONAL_COLUMNS groups left out (null); ``depths``: only
    the first ``depths`` entries of each row's per-depth acceptance kept (None: all). ``archive``: the
    file they will replace; if git tracks it, the rows must hold all of its rows and no other settings
    (eval.store.committed.check_growth)."""
    from eval.store.committed import check_growth, is_committed

    rows, drivers = without_columns(load_rows(root), without), load_rows(root, driver=True)
    if archive is not None and is_committed(Path(archive)):
        old = pq.read_table(archive, columns=sorted(set(ROW_KEY + SETTINGS))).to_pandas()
        check_growth(Path(archive), old, rows, ROW_KEY, SETTINGS)
    if depths is not None:
        rows["depth_accept"] = [None if x is None else list(x)[:depths] for x in rows["depth_accept"]]
    if rows.empty:
        raise ValueError(f"{root} holds no same-state rows: nothing to export")
    out = []
    row_schema = ROW_SCHEMA if depths is None else _trimmed_schema(ROW_SCHEMA)
    for frame, schema in ((rows, row_schema), (drivers, DRIVER_SCHEMA)):
        out.append(archive_table_bytes(pa.Table.from_pandas(frame, schema=schema, preserve_index=False)))
    return out[0], out[1], len(rows)


def archive_files(root: Path | str, archive: Path | str, without=(), depths: Optional[int] = None,
                  check: bool = True) -> tuple[list[tuple[Path, bytes]], int]:
    """([(path, bytes)] of the archive pair ``archive`` holding the rows of ``root``, number of rows):
    :func:`archive_bytes` (``check``: against the committed archive it replaces) under
    :func:`archive_paths`."""
    data, driver_data, n = archive_bytes(root, without, depths, archive if check else None)
    return list(zip(archive_paths(archive), (data, driver_data))), n


def export_rows(root: Path | str, archive: Path | str) -> int:
    """Every row (and driver row) of the results directory ``root`` into one archive pair, for git.
    Returns the number of rows."""
    from rheo.io import atomic_write_bytes

    files, n = archive_files(root, archive, check=False)
    for path, blob in files:
        atomic_write_bytes(path, blob, record=True)
    return n


def load_rows(root: Path | str, driver: bool = False):
    """Every same-state row under ``root`` as a DataFrame (``driver``: the drivers' rows instead)."""
    import pandas as pd

    root = Path(root)
    if root.suffix == ".parquet":  # an archive written by export_rows (the user's own, else the committed one)
        path = own_or_committed(archive_paths(root)[1 if driver else 0])
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (export it with "
                                    f"`{program('python')} -m eval.states.tables DIR --archive {root}`)")
        names = pq.read_schema(path).names
        if "tokens_per_s" in names and "state" not in names:
            raise ValueError(_realized(root, "archive"))
        return pq.read_table(path, schema=DRIVER_SCHEMA if driver else ROW_SCHEMA).to_pandas()
    if not (root / storage.MANIFEST).exists():
        raise FileNotFoundError(f"{root} is not a same-state results directory (no {storage.MANIFEST})")
    if _manifest_content(root) == storage.FINGERPRINT["content"]:
        raise ValueError(_realized(root, "folder"))
    schema = DRIVER_SCHEMA if driver else ROW_SCHEMA
    tables = shard_tables(root, schema, driver)
    if not tables:
        return pd.DataFrame(columns=schema.names)
    return _fill_run_columns(root, pa.concat_tables(tables).to_pandas())


def _manifest_content(root: Path) -> Optional[str]:
    try:
        return json.loads((root / storage.MANIFEST).read_text()).get("content")
    except (OSError, ValueError, AttributeError):
        return None


def _realized(root: Path, what: str) -> str:
    """The refusal of a realized-rows ``what`` (folder or archive, eval.run) given as same-state rows
    (the reverse of storage.require_results_dir's)."""
    return (f"{root} is a {what} of realized rows (eval.run), not same-state rows (measure=same_state): its "
            f"tables are `rheo tables --results {root}` (make tables RESULTS={root})")


#: the driver key's device and dtype as configured ("None": the model's default); shards written
#: before these columns existed lack them, and their driver's config.json holds them
RUN_COLUMNS = ("device", "dtype")


def _fill_run_columns(root: Path, frame):
    """``frame`` with RUN_COLUMNS filled, where a shard lacks them, from the config.json of the
    row's driver folder under ``root`` (the key its rows were made with)."""
    missing = frame[list(RUN_COLUMNS)].isna().any(axis=1)
    for (model, dhash), idx in frame[missing].groupby(["model", "driver_hash"]).groups.items():
        key = json.loads((root / model / dhash / "config.json").read_text())
        for col in RUN_COLUMNS:
            frame.loc[idx, col] = str(key[col])
    return frame
