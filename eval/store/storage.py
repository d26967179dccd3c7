"""Result shards: one small parquet file per (config, suite, item, turn).

Layout under ``output_dir``::

    MANIFEST.json                               marks the directory as ours
    <model>/<config_hash>/config.json           the method key that was hashed
    <model>/<config_hash>/<suite>/<item>_t<turn>.parquet   exactly one row

A shard is written to a hidden temporary file in the same directory, flushed,
fsynced and moved into place with ``os.replace`` (atomic on POSIX), so a kill
at any moment leaves either the old state or the complete new shard: never a
half-written row, never two rows for one key. Nothing is ever appended.

A shard that cannot be read, or whose single row does not match its path, is
*corrupt*: it is reported with its path and deleted, and the row is computed
again; it is never read as data. A row with ``status == "failed"`` is a
recorded failure: not data, and retried by the next run.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Iterator, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# the row schema, also read as storage.<name> by the runner and the same-state harness
from eval.store.row_schema import (COLUMNS, METHOD_COLUMNS, OPTIONAL_COLUMNS, ROW_SCHEMA, RUN_KEY_COLUMNS,  # noqa: F401
                                   key_row, method_columns)
from eval.store.shard_checks import (CorruptShardError, OutputDirError, ShardWriteError,  # noqa: F401
                                     expected_from_path, folder_method, plain_name, read_table_shard)
from eval.store.export_out import write_out
from eval.store.suite_names import suite_folder
from rheo.files import files_at_depth, is_regular
from rheo.io import TMP_PREFIX, atomic_write, atomic_write_bytes, make_dir, owner, remove_stale_tmp  # noqa: F401
from rheo.paths import own_or_committed, program

log = logging.getLogger(__name__)

MANIFEST = "MANIFEST.json"
HYDRA_RUNS = ".hydra_runs"  # Hydra's records in folders of older runs (now under the output root: configs/config.yaml)
ROW_KEY = ["config_hash", "dataset", "item_id", "turn"]  # one row per key
FINGERPRINT = {"project": "rheo", "content": "rheo-eval result shards", "layout": 1}
#: the manifest content of a same-state results folder (eval.store.state_archive.FINGERPRINT)
SAME_STATE_CONTENT = "rheo same-state rows"


def prepare_output_dir(root: Path, fingerprint: dict = FINGERPRINT) -> None:
    """Create/check ``root``: writable, and either empty or carrying our manifest (``fingerprint``:
    what the directory holds; same-state rows have their own, eval.store.state_archive)."""
    try:
        make_dir(root)
    except OSError as e:
        raise OutputDirError(f"cannot create output_dir {root}: {e}") from e
    if not root.is_dir():
        raise OutputDirError(f"output_dir {root} exists and is not a directory")
    manifest = root / MANIFEST
    others = foreign_entries(root)  # listed before the manifest is looked at (see foreign_entries)
    if manifest.exists():
        try:
            found = json.loads(manifest.read_text())
        except (OSError, ValueError) as e:
            raise OutputDirError(f"{manifest} is unreadable ({e}); not a rheo results directory?") from e
        if found != fingerprint:
            raise OutputDirError(f"output_dir {root} belongs to something else: {manifest} says {found}, "
                                 f"expected {fingerprint}. Choose another output_dir.")
    elif others:
        raise OutputDirError(f"output_dir {root} is not empty and has no {MANIFEST}: refusing to write "
                             "results into a directory that is not a rheo results directory.")
    probe = root / f"{TMP_PREFIX}probe{owner()}"
    try:
        atomic_write_bytes(probe, b"")
        probe.unlink()
    except OSError as e:
        raise OutputDirError(f"output_dir {root} is not writable: {e}") from e
    if not manifest.exists():
        atomic_write_bytes(manifest, json.dumps(fingerprint, indent=1).encode())


def foreign_entries(root: Path) -> list[str]:
    """Names in ``root`` other than the manifest and temporary files (a parallel job may be creating
    the manifest right now). A job writes the manifest before anything else, so an entry listed here
    before the manifest is checked means a foreign folder only if the manifest is still absent."""
    return [p.name for p in root.iterdir() if p.name not in (MANIFEST, HYDRA_RUNS) and not p.name.startswith(TMP_PREFIX)]


def is_archive(root: Path | str) -> bool:
    """A results *archive*: every row of a results directory in one parquet file (:func:`export_results`)."""
    return Path(root).suffix == ".parquet"


def rows_or_archive(root: Path) -> Path:
    """What a report reads for ``root``: ``root`` itself when it is an archive or a folder of rows;
    else its archive ``<root>.parquet`` when that exists; else, for a path under the output root, the
    committed twin of that archive (rheo.paths.own_or_committed: a fresh clone holds the committed
    archives, not the user's folders; said on stderr); else ``root`` (the reader then says what is missing)."""
    root = Path(root)
    if (root / MANIFEST).is_file():
        return root
    if is_archive(root):
        return own_or_committed(root)
    archive = root.with_name(root.name + ".parquet")
    if archive.is_file():
        return archive
    found = own_or_committed(archive)
    return found if found.is_file() else root


def report_source(results: Path, archive: Optional[Path]) -> tuple[Path, Optional[Path]]:
    """(what a report reads, the archive it writes) for ``results`` and ``--archive``: when the folder
    holds no rows and an archive is read instead (rows_or_archive: its own, or the committed one), no
    archive is written (it would only copy the rows it was read from)."""
    source = rows_or_archive(results)
    return (source, None) if source != Path(results) else (Path(results), archive)


def require_results_dir(root: Path) -> None:
    """For readers (tables, figures): ``root`` must be an existing rheo results directory (or archive)."""
    root = Path(root)
    if is_archive(root):
        if not root.is_file():
            raise FileNotFoundError(f"results archive {root} does not exist (RESULTS / --results)")
        return
    if root.is_file():
        raise OutputDirError(f"{root} is a file, not a results directory or a .parquet results archive "
                             f"(RESULTS / --results): give a folder written by eval.run or a .parquet archive")
    if not root.is_dir():
        raise FileNotFoundError(f"results directory {root} does not exist (RESULTS / --results); run "
                                f"`make reproduce` or `{program('python')} -m eval.run output_dir={root}` first, give the "
                                f"committed archive (RESULTS=results/runs.parquet), or fix the path")
    if not (root / MANIFEST).is_file():
        raise OutputDirError(f"{root} has no {MANIFEST}: not a rheo results directory (RESULTS / --results)")
    try:
        content = json.loads((root / MANIFEST).read_text()).get("content")
    except (OSError, ValueError, AttributeError):
        content = None
    if content == SAME_STATE_CONTENT:
        raise OutputDirError(f"{root} is a same-state results folder (measure=same_state), not realized rows: its "
                             f"tables are `python -m eval.states.tables {root} --out {root}/tables.md`")


def prepare_config_dir(root: Path, model: str, chash: str, key: dict) -> Path:
    """The directory of one config hash; refuses one whose config.json differs."""
    cdir = root / model / chash
    make_dir(cdir)
    cfile = cdir / "config.json"
    if cfile.exists():
        try:
            found = json.loads(cfile.read_text())
        except (OSError, ValueError) as e:
            raise OutputDirError(
                f"{cfile} is unreadable ({type(e).__name__}: {e}): truncated by a crash or edited by hand? "
                f"The folder name is the hash of this run's configuration, so its rows were made by it: "
                f"delete {cfile} and rerun to rewrite it (or delete {cdir} to recompute its rows).") from e
        if found != json.loads(json.dumps(key)):
            raise OutputDirError(f"{cfile} does not match this run's configuration "
                                 f"(found {found}, expected {key}); results must not mix.")
    else:
        atomic_write_bytes(cfile, json.dumps(key, indent=1, sort_keys=True).encode())
    return cdir


def shard_path(cdir: Path, suite: str, item_id: int, turn: int) -> Path:
    return cdir / suite_folder(suite) / f"{item_id}_t{turn}.parquet"


def write_row(path: Path, row: dict) -> None:
    """Write one row atomically (temporary file + fsync + os.replace)."""
    missing = set(COLUMNS) - set(row)
    extra = set(row) - set(COLUMNS)
    if missing or extra:
        raise ValueError(f"row columns mismatch: missing {sorted(missing)}, unexpected {sorted(extra)}")
    table = pa.Table.from_pylist([row], schema=ROW_SCHEMA)
    write_table(path, table)


def write_table(path: Path, table: pa.Table) -> None:
    """Write a shard atomically; ShardWriteError naming the file when the disk refuses it."""
    try:
        atomic_write(path, lambda f: pq.write_table(table, f))
    except OSError as e:
        raise ShardWriteError(f"cannot write the shard {path} ({e.strerror or e}: full disk, quota or "
                              f"read-only?)") from None


def _missing_columns(table: pa.Table, what: str, error: type[Exception]) -> set[str]:
    """The optional columns ``table`` lacks (read back as None); ``error`` if it is not the row schema."""
    missing = set(COLUMNS) - set(table.column_names)
    if missing - OPTIONAL_COLUMNS or set(table.column_names) - set(COLUMNS):
        extra = sorted(set(table.column_names) - set(COLUMNS))
        raise error(f"{what}: columns differ from the row schema "
                    f"(missing {sorted(missing - OPTIONAL_COLUMNS)}, unexpected {extra})")
    return missing


def read_row(path: Path, expect: Optional[dict] = None) -> dict:
    """The single row of a shard; CorruptShardError if it is not exactly that."""
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for truncated/garbage files
        raise CorruptShardError(f"corrupt shard {path}: {type(e).__name__}: {e}") from e
    if table.num_rows != 1:
        raise CorruptShardError(f"corrupt shard {path}: {table.num_rows} rows, expected 1")
    missing = _missing_columns(table, f"corrupt shard {path}", CorruptShardError)
    row = {**{c: None for c in missing}, **table.to_pylist()[0]}
    for name, value in (expect or {}).items():
        if row[name] != value:
            raise CorruptShardError(f"corrupt shard {path}: {name}={row[name]!r}, path says {value!r}")
    return row


def load_existing(path: Path, expect: dict, reader: Callable = read_row):
    """Row already stored at ``path`` (ok or failed; ``reader(path, expect)``'s result), or None;
    corrupt, foreign and misplaced shards are reported and deleted (the row is computed again)."""
    if not os.path.lexists(path):
        return None
    if not is_regular(path):
        raise OutputDirError(f"{path} is not a shard file (a folder, a link or a special file where a row is "
                             f"stored): move it out of the results directory and rerun")
    try:
        return reader(path, expect)
    except CorruptShardError as e:
        log.warning("%s -- deleting it; the row will be recomputed", e)
        path.unlink(missing_ok=True)
        return None


def iter_shards(root: Path) -> Iterator[Path]:
    """The shard files <model>/<hash>/<suite>/*.parquet under ``root``: regular files in real
    folders only (a symlinked alias of a folder would give its rows twice; a FIFO would block)."""
    yield from (p for p in files_at_depth(root, 3, ".parquet") if not p.name.startswith(TMP_PREFIX))


def export_results(root: Path | str, out: Path | str) -> int:
    """Every row under the results directory ``root`` (failed ones too) into one parquet file ``out``.

    One shard per row is what makes runs resumable, but each carries the whole schema
    (~12 KB a row); the archive holds the same rows in a few hundred KB, for committing.
    Readers take it wherever they take a results directory. ``out`` is written as
    eval.store.export_out.write_out says (atomically; through a symlink; into a device as a stream).
    Returns the number of rows.
    """
    keys: dict = {}
    rows = [read_row(p, expected_from_path(p, keys)) for p in iter_shards(Path(root))]
    table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
    write_out(out, lambda f: pq.write_table(table, f, compression="zstd"), record=True)
    return len(rows)


def _archive_rows(path: Path) -> list[dict]:
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for truncated/garbage files
        raise OutputDirError(f"results archive {path} is unreadable ({type(e).__name__}: {e}): "
                             f"export it again (scripts/export_results.py)") from e
    missing = _missing_columns(table, f"{path} is not a rheo results archive", OutputDirError)
    rows = [{**{c: None for c in missing}, **r} for r in table.to_pylist()]
    keys = pd.DataFrame(rows, columns=list(COLUMNS))[ROW_KEY]
    twice = keys[keys.duplicated(keep=False)]
    if len(twice):
        first = twice.iloc[0].to_dict()
        raise OutputDirError(f"results archive {path} holds {len(twice)} rows that share their key {ROW_KEY} with "
                             f"another row (e.g. {first}): written twice; export it again from its results "
                             f"directory (scripts/export_results.py --replace)")
    return rows


def load_results(root: Path | str, include_failed: bool = False) -> pd.DataFrame:
    """All rows under ``root`` (a results directory or archive) as one DataFrame; corrupt shards
    are reported and skipped.

    Failed rows are dropped unless ``include_failed`` (they are not data).
    """
    root = Path(root)
    rows, corrupt, keys = (_archive_rows(root) if is_archive(root) else []), [], {}
    for path in [] if is_archive(root) else iter_shards(root):
        try:
            rows.append(read_row(path, expected_from_path(path, keys)))
        except CorruptShardError as e:
            corrupt.append(str(path))
            log.warning("%s -- skipped (rerun the config to recompute it)", e)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df.attrs["corrupt_shards"] = corrupt
    if not include_failed:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    return df

