"""The one door for every write: the one place where files and folders are put into place.

Every file the project writes goes through here (``tests/test_write_door.py`` walks the source and refuses
any other write outside its allow-list). Each write is checked first: a path in the committed evidence
(rheo.paths.is_committed_evidence: by place, symlinks resolved, no git needed) is refused with
:class:`CommittedOutputsError` before anything is made (only :func:`publish_bytes`, ``rheo publish`` after
its own checks, writes there); a target that exists and is not a regular file (a folder, a FIFO, a device)
is refused without being opened (rheo.files.NotRegularFileError); paths stay Paths, never quoted or split.

A file is written to a hidden temporary file in the same directory, flushed, fsynced and moved over its
destination with ``os.replace`` (atomic on POSIX), so a reader sees either the old file or the complete new
one. A folder is filled under a temporary name and renamed into place the same way. Temporary names carry
their writer, ``.tmp-<name>@<host>@<pid>...``, so that :func:`remove_stale_tmp` deletes exactly what killed
writers on this host left behind, never the file or folder of a writer still running (here or on another
machine sharing the file system).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import stat
import uuid
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO, Union

from rheo.files import NotRegularFileError, file_kind, is_real_dir, read_bounded, walk
from rheo.paths import is_committed_evidence

TMP_PREFIX = ".tmp-"
PathLike = Union[str, Path]


class CommittedOutputsError(RuntimeError):
    """Writing these outputs would change or delete files of the committed evidence (or committed to git)."""

    user_error = True  # rheo.cli: one line, no traceback


def committed_refusal(path: PathLike, why: str = "lies in the committed evidence",
                      source: object = "the run") -> CommittedOutputsError:
    """The one-line refusal of a write to ``path`` (``why``: what it is)."""
    return CommittedOutputsError(f"{path} {why}: nothing was written; write under the output root (the default; "
                                 f"--out elsewhere), then `make publish` to update committed results on purpose "
                                 f"(drawn from {source})")


def check_target(path: PathLike) -> Path:
    """``path`` as a Path, after checking that the door may write it: not in the committed evidence (by
    place, symlinks resolved) and, when it exists, a regular file (a symlink to one is replaced, not
    followed). Raises :class:`CommittedOutputsError` / NotRegularFileError; makes nothing."""
    path = Path(path)
    if is_committed_evidence(path):
        raise committed_refusal(path)
    _check_regular(path)
    return path


def _check_regular(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # not there yet (or its folder not): written fresh
    if stat.S_ISLNK(mode):
        return  # os.replace swaps the link itself; its target is never opened
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path} is {file_kind(mode)}, not a regular file: nothing was written; "
                                  f"remove it or write elsewhere")


def check_dir(path: PathLike) -> Path:
    """``path`` as a Path, after checking that the door may write into it as a folder: not in the
    committed evidence, not a file. A command checks its output folder so before its work; makes nothing."""
    path = Path(path)
    if is_committed_evidence(path):
        raise committed_refusal(path)
    blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise NotADirectoryError(f"{blocker} is a file, not a folder, so {path} cannot be made: nothing was "
                                 f"written; remove it or write elsewhere")
    return path


def make_dir(path: PathLike) -> Path:
    """``mkdir -p path`` after :func:`check_dir` (the committed evidence, or a file in the way: one line)."""
    path = check_dir(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_append(path: PathLike, encoding: str = "utf-8") -> TextIO:
    """A text file opened for appending (a log, a metrics stream; ``with open_append(p) as f``), checked
    as every write is."""
    path = check_target(path)
    make_dir(path.parent)
    return open(path, "a", encoding=encoding)


def owner() -> str:
    """'@host@pid' suffix of temporary names: who wrote them."""
    return f"@{socket.gethostname()}@{os.getpid()}"


def tmp_name(name: str) -> str:
    """The temporary name of ``name`` for this writer."""
    return f"{TMP_PREFIX}{name}{owner()}"


def atomic_write(path: PathLike, write: Callable[[BinaryIO], None], record: bool = False) -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, move it into place (checked first:
    see the module doc). ``record``: list it in its folder's manifest (:data:`MANIFEST`), which makes it
    an output a project writer produced (what ``rheo publish`` offers, what a writer may remove as stale)."""
    path = check_target(path)
    make_dir(path.parent)
    if record:
        read_manifest(path.parent)  # a FIFO or folder in its place: refused before anything is written
    _replace_with(path, write)
    if record:
        record_written([path])
    return path


def _replace_with(path: Path, write: Callable[[BinaryIO], None]) -> Path:
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


def atomic_write_bytes(path: PathLike, data: bytes, record: bool = False) -> Path:
    return atomic_write(path, lambda f: f.write(data), record)


def atomic_write_text(path: PathLike, text: str, record: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), record)


#: the files written into a folder by the project's writers (``record=True``): what ``rheo publish`` offers
#: and the only files a writer may remove as stale (eval.store.committed.Outputs)
MANIFEST = ".rheo-written.json"
#: the largest manifest read (a list of file names)
MANIFEST_LIMIT = 16 << 20


def read_manifest(folder: PathLike) -> set[str]:
    """Names of the files the project's writers wrote into ``folder`` (empty when none did, or when the
    manifest is not a JSON list). A manifest that is a FIFO, a device or a folder is never opened:
    NotRegularFileError, one line."""
    path = Path(folder) / MANIFEST
    if not os.path.lexists(path):
        return set()
    data = read_bounded(path, MANIFEST_LIMIT, "manifest of written files",
                        f"remove {path}; the writers make it again")
    try:
        names = json.loads(data)
    except ValueError:
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def record_written(written: Iterable[PathLike], removed: Iterable[PathLike] = ()) -> None:
    """Add the files ``written`` to their folders' manifests, and drop the ``removed`` ones."""
    written, removed = [Path(p) for p in written], [Path(p) for p in removed]
    for folder in dict.fromkeys(p.parent for p in written + removed):
        names = read_manifest(folder) | {p.name for p in written if p.parent == folder}
        names -= {p.name for p in removed if p.parent == folder}
        _replace_with(check_target(folder / MANIFEST), lambda f: f.write(json.dumps(sorted(names), indent=0).encode()))


def copy_path(src: PathLike, dst: PathLike) -> Path:
    """Copy the file ``src`` to ``dst``, or the folder ``src`` into ``dst`` (files merged in, each written
    through the door; symlinks inside are not followed)."""
    src, dst = Path(src), Path(dst)
    if not is_real_dir(src):
        return atomic_write_bytes(dst, src.read_bytes())
    make_dir(dst)
    for folder, _, names in walk(src):
        for name in names:
            if (folder / name).is_file() and not (folder / name).is_symlink():
                atomic_write_bytes(dst / (folder / name).relative_to(src), (folder / name).read_bytes())
    return dst


def publish_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` in the committed evidence: ``rheo publish`` only, after it checked these
    very bytes (the one writer allowed there; the walk test holds it to that caller). A non-regular target
    is still refused."""
    path = Path(path)
    _check_regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _replace_with(path, lambda f: f.write(data))


@contextlib.contextmanager
def atomic_dir(dest: PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``dest``; on success it becomes ``dest``.

    If ``dest`` already exists when the block ends (another writer won a race), the
    new folder is dropped unless ``replace``, in which case ``dest`` is replaced.
    On an exception the temporary folder is removed and ``dest`` is untouched.
    """
    dest = Path(dest)
    if is_committed_evidence(dest):
        raise committed_refusal(dest)
    make_dir(dest.parent)
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
