"""Atomic writes: the one place where files and folders are put into place.

A file is written to a hidden temporary file in the same directory, flushed,
fsynced and moved over its destination with ``os.replace`` (atomic on POSIX),
so a reader sees either the old file or the complete new one. A folder is
filled under a temporary name and renamed into place the same way.

Temporary names carry their writer, ``.tmp-<name>@<host>@<pid>...``, so that
:func:`remove_stale_tmp` deletes exactly what killed writers on this host left
behind, and never the file or folder of a writer that is still running (here
or on another machine sharing the file system).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import uuid
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Union

from rheo.files import is_real_dir, walk

TMP_PREFIX = ".tmp-"
PathLike = Union[str, Path]


def owner() -> str:
    """'@host@pid' suffix of temporary names: who wrote them."""
    return f"@{socket.gethostname()}@{os.getpid()}"


def tmp_name(name: str) -> str:
    """The temporary name of ``name`` for this writer."""
    return f"{TMP_PREFIX}{name}{owner()}"


def atomic_write(path: PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, move it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / tmp_name(path.name)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_dir(dest: PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``dest``; on success it becomes ``dest``.

    If ``dest`` already exists when the block ends (another writer won a race), the
    new folder is dropped unless ``replace``, in which case ``dest`` is replaced.
    On an exception the temporary folder is removed and ``dest`` is untouched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f"{tmp_name(dest.name)}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if replace and dest.exists():
            old = dest.parent / f"{tmp_name(dest.name)}.old.{uuid.uuid4().hex[:8]}"
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.exists():  # not another process winning the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_tmp(root: PathLike, recursive: bool = True) -> list[Path]:
    """Delete temporary files and folders under ``root`` left by killed writers on this host.

    Returns what was removed. A temporary name of another host, or of a pid that
    still runs, is left alone.
    """
    host = socket.gethostname()
    removed = []
    for tmp in _tmp_entries(Path(root), recursive):
        parts = tmp.name.split("@")
        if len(parts) != 3 or parts[1] != host:  # another machine's writer (shared file system)
            continue
        pid = parts[2].split(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            if is_real_dir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            else:  # a file, or a link (removed, never followed)
                tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _tmp_entries(root: Path, recursive: bool) -> list[Path]:
    """Temporary names under ``root`` (in ``root`` only unless ``recursive``); symlinked folders are
    never entered (a link loop or a link to /usr is not walked), temporary folders not descended."""
    found = []
    for folder, dirs, others in walk(root):
        found += [folder / n for n in dirs + others if n.startswith(TMP_PREFIX)]
        dirs[:] = [d for d in dirs if recursive and not d.startswith(TMP_PREFIX)]
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")


def safe_file_name(name: str) -> str:
    """``name`` as one plain file name: separators and other unsafe characters become "_", runs of
    dots one dot, and no leading dot (so "..", "a/../b" and "/abs" cannot leave a folder)."""
    cleaned = re.sub(r"\.{2,}", ".", _UNSAFE.sub("_", str(name))).lstrip("._")
    return cleaned or "unnamed"


def child_path(folder: PathLike, name: str) -> Path:
    """``folder / safe_file_name(name)``, checked to lie directly in ``folder`` (for file names
    built from data, e.g. a row's model or device)."""
    folder = Path(folder)
    path = folder / safe_file_name(name)
    if path.resolve().parent != folder.resolve():
        raise ValueError(f"file name {name!r} would leave the output folder {folder}")
    return path
