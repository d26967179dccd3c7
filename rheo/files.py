"""File-system walks and reads that stay where they were pointed.

A results or cache folder is data a user (or another program) may have put anything into: a
symlink to ``/usr`` or to its own parent (a loop), a FIFO named like a weights file, a copy of
``/dev/zero`` behind a manifest entry. Every walk here lists entries without following
symlinks (a symlinked folder is neither entered nor yielded as a file), every file it yields
is a regular file, and a read is bounded: nothing can hang on a loop, block on a FIFO or
fill the memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, Path]


class NotRegularFileError(ValueError):
    """A path that should be a regular file but is a FIFO, a device, a folder, or a symlink out."""

    user_error = True  # rheo.cli: one line, no traceback


def walk(root: PathLike) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``os.walk(root)`` that never follows a symlink: (folder, sub-folder names, other names).
    Symlinks (to folders or not) are listed among the other names; remove names from the
    sub-folder list to skip them."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        real = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        links = [d for d in dirs if d not in real]
        dirs[:] = real
        yield Path(folder), dirs, files + links


def is_regular(path: PathLike) -> bool:
    """True for a regular file that is not a symlink (a FIFO, a device or a link is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir(path: PathLike) -> bool:
    """True for a folder that is not a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def files_at_depth(root: PathLike, depth: int, suffix: str = "") -> list[Path]:
    """The regular files exactly ``depth`` real folders below ``root`` (0: in ``root``) whose name
    ends with ``suffix``, sorted; symlinked folders and special files are skipped."""
    level = [Path(root)] if is_real_dir(root) else []
    for _ in range(depth):
        level = [Path(e.path) for folder in level for e in _scan(folder) if e.is_dir(follow_symlinks=False)]
    return sorted(Path(e.path) for folder in level for e in _scan(folder)
                  if e.name.endswith(suffix) and e.is_file(follow_symlinks=False))


def _scan(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:  # vanished or unreadable: nothing to list
        return []


def require_regular_file(path: PathLike, what: str, fix: str) -> Path:
    """``path`` itself (a symlink to a regular file is accepted: a model folder may link its
    weights), after checking that what it points to is a regular file: a FIFO would block
    every reader, a device or folder is not a file. Raises NotRegularFileError naming both."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise NotRegularFileError(f"{what}: {path} cannot be read ({e.strerror}): {fix}") from None
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{what}: {path} is {file_kind(mode)}, not a regular file: {fix}")
    return path


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def read_bounded(path: PathLike, limit: int, what: str, fix: str) -> bytes:
    """The bytes of the regular file ``path`` if it holds at most ``limit`` bytes; otherwise
    NotRegularFileError (``/dev/zero`` or a FIFO are never read)."""
    path = require_regular_file(path, what, fix)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotRegularFileError(f"{what}: {path} is larger than {limit} bytes: {fix}")
    return data
