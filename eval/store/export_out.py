"""Where an export may write: only regular files, never over what it reads.

Both exports (``rheo export``: eval.report.export_rows; the parquet archive: scripts/export_results.py)
write their ``--out`` through :func:`write_out` after :func:`check_out`:

* ``-`` is standard output, and a device, FIFO or socket (``/dev/stdout``, ``/dev/null``, a named pipe,
  or a symlink to one) and any path under ``/dev`` is *streamed into*: opened for writing, never replaced
  by a file;
* a symlink to a file is written through (the file it names is replaced atomically; the link stays);
* a regular file (or a new one) is replaced atomically (rheo.io.atomic_write);
* refused before anything is written: an ``--out`` that is a folder, that is the input itself (the same
  file under any name: same device and inode) or lies inside an input folder; and, where ``committed``
  is asked, a file git tracks in a ``results`` folder or a tracked ``.parquet`` archive (the committed
  results: ``rheo export`` only reads them).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

from rheo.io import atomic_write

__all__ = ["STDOUT", "check_out", "is_stream", "write_out"]

STDOUT = "-"


def is_stream(out: Path | str) -> bool:
    """``-``, or a path that is (or links to) something other than a regular file or a folder."""
    if str(out) == STDOUT or str(Path(str(out)).absolute()).startswith("/dev/"):
        return True  # /dev/stdout redirected to a file resolves to that file: still written as a stream
    try:
        mode = os.stat(out).st_mode  # follows links: what a write would reach
    except OSError:
        return False  # nothing there (or a dangling link): a new regular file
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_out(out: Path, inputs: Sequence[Path], replace: bool, committed: bool = False, opt: str = "--out") -> None:
    """ValueError (one line) when writing ``out`` could destroy one of ``inputs`` or a committed result,
    or replace a file without ``replace``; nothing to check for a stream."""
    if is_stream(out):
        return
    target = Path(os.path.realpath(out))
    if target.is_dir():
        raise ValueError(f"{opt} {out} is a folder: give a file name (e.g. {out}/rows.csv)")
    for given in inputs:
        if target.exists() and Path(given).exists() and os.path.samefile(target, given):
            raise ValueError(f"{opt} {out} is the input itself ({given}, the same file): writing it would destroy "
                             f"the rows it is made from; choose another {opt}")
        if Path(given).is_dir() and Path(os.path.realpath(given)) in target.parents:
            raise ValueError(f"{opt} {out} lies inside --results {given}: write it beside the results "
                             f"(e.g. {opt} {Path(given).name}.csv)")
    why = _committed_reason(target) if committed else None
    if why:
        raise ValueError(f"{opt} {out} {why} (a results file the project keeps): an export only reads "
                         f"it; write elsewhere (e.g. {opt} {target.stem}.csv)")
    if target.exists() and not replace:
        raise ValueError(f"{opt} {out} exists: choose another file, or pass --replace to overwrite it")


def _committed_reason(target: Path):
    """Why the shared guard refuses to write ``target`` (eval.store.committed.committed_reason), or None."""
    from eval.store.committed import committed_reason

    return committed_reason(target)


def _is_own_stdout(out) -> bool:
    """Whether ``out`` names this process's standard output (``/dev/stdout``, ``/dev/fd/1``, ...)."""
    try:
        return os.path.realpath(out) == os.path.realpath(f"/proc/self/fd/{sys.stdout.fileno()}")
    except (OSError, ValueError, AttributeError):  # no /proc, or stdout replaced by an object without a descriptor
        return False


def write_out(out: Path | str, write: Callable[[BinaryIO], None], record: bool = False) -> str:
    """Call ``write(f)`` on ``out`` as the module doc says; returns where it went ('stdout', 'stream' or
    'file'). ``record``: a file is listed in its folder's manifest (a results archive ``rheo publish``
    may offer; a personal export is not)."""
    if str(out) == STDOUT or _is_own_stdout(out):  # written through this process's stdout (its offset, its mode)
        write(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return "stdout"
    if is_stream(out):
        with open(out, "wb") as f:  # opens the device or pipe the path names; nothing is replaced
            write(f)
        return "stream"
    atomic_write(Path(os.path.realpath(out)), write, record)
    return "file"
