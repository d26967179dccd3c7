"""Generated outputs (tables, figures, archives) written as a set, never over the committed evidence.

:class:`Outputs` collects every file of one run of a report in memory, then checks them before anything
is written: no file may land in the committed evidence, decided by place (``results/``, the committed
tuned-tree presets: rheo.paths.is_committed_evidence, which needs no git) and by git where it answers
(a tracked file, asked in that file's own folder). Otherwise :class:`CommittedOutputsError` names the
first such file and the way to change committed results on purpose (``make publish``), and nothing is
written. A stale output (a file of an earlier run that this run no longer draws) is removed only if a
writer of this module wrote it: each folder keeps a manifest (:data:`MANIFEST`) of the files written
into it, and a file not listed there (the user's own ``main.md``) is never deleted.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from eval.store.shard_checks import OutputDirError
from rheo.cli import ArgumentParser, one_line, path_arg
from rheo.files import NotRegularFileError
from rheo.io import MANIFEST  # noqa: F401 -- the writers' manifest, named here for the readers of this module
from rheo.io import CommittedOutputsError, atomic_write_bytes, committed_refusal, read_manifest, record_written
from rheo.paths import announce, folder, is_committed_evidence


def is_committed(path: Path) -> bool:
    """Whether git tracks the file ``path`` (False outside a checkout)."""
    path = Path(path)
    return path.is_file() and path.resolve() in tracked_files(path.parent)


def check_growth(archive: Path, old, new, key: Sequence[str], settings: Sequence[str]) -> None:
    """A committed archive only grows, and only with rows of the study it holds at the settings it
    holds: raise :class:`CommittedOutputsError` if the rows ``new`` (a DataFrame) that would replace
    those of ``archive`` (``old``) lack one of its rows (by the columns ``key``: the archive would
    shrink) or hold a combination of ``settings`` (config hashes) that it does not (rows of another
    size, length or setting would be mixed in). ``rheo publish`` checks every archive it copies so: an
    archive of other settings is a new file, or the old one removed from git on purpose first."""
    fix = (f"keep it under the output root, or `git rm {archive}` first to start it again on purpose")
    lost = old[list(key)].merge(new[list(key)].drop_duplicates(), how="left", indicator=True)
    lost = int((lost["_merge"] == "left_only").sum())
    if lost:
        raise CommittedOutputsError(f"{archive} is committed with {len(old)} rows and would shrink: {lost} of them "
                                    f"are not in the {len(new)} rows given; nothing was written; {fix}")
    held = set(map(tuple, old[list(settings)].drop_duplicates().astype(str).values))
    other = sorted(set(map(tuple, new[list(settings)].drop_duplicates().astype(str).values)) - held)
    if other:
        raise CommittedOutputsError(f"{archive} is committed and the rows given hold {len(other)} setting(s) it does "
                                    f"not ({', '.join(settings)} = {list(other[0])}, ...): rows of another run would "
                                    f"be mixed into it; nothing was written; {fix}")


def tracked_files(folder: Path) -> set[Path]:
    """Resolved paths of the files under ``folder`` that git tracks (empty outside a checkout)."""
    folder = Path(folder)
    if not folder.is_dir():
        return set()
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=folder, capture_output=True,
                                check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {(folder / name).resolve() for name in listed.decode().split("\0") if name}


def committed_reason(path: Path) -> Optional[str]:
    """Why ``path`` may not be written (a place of the committed evidence, or a file git tracks), or None."""
    path = Path(path)
    if is_committed_evidence(path):
        return "lies in the committed evidence"
    if path.is_file() and path.resolve() in tracked_files(path.parent):
        return "is committed to git"
    return None


def refuse_committed(*paths, source="the run") -> None:
    """Raise :class:`CommittedOutputsError` for the first of ``paths`` (None skipped) that :class:`Outputs`
    would refuse: a command checks its outputs so before minutes of work, not after."""
    for path in paths:
        why = committed_reason(Path(path)) if path is not None else None
        if why:
            raise refusal(Path(path), why, source)


def refusal(path: Path, why: str, source) -> CommittedOutputsError:
    return committed_refusal(path, why, source)


class Outputs:
    """The files of one run into ``out``: :meth:`add` them, then :meth:`write` (checked first)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.files: dict[Path, bytes] = {}

    def add(self, path: Path, data: bytes) -> Path:
        self.files[Path(path)] = data
        return Path(path)

    def stale(self, stale_patterns: tuple[str, ...]) -> list[Path]:
        """Files of ``out`` matching ``stale_patterns`` that a writer here wrote before and this run does not."""
        keep, ours = {p.resolve() for p in self.files}, read_manifest(self.out)
        return [path for pattern in stale_patterns for path in sorted(self.out.glob(pattern))
                if path.is_file() and path.name in ours and path.resolve() not in keep]

    def write(self, stale_patterns: tuple[str, ...], source: Path) -> list[Path]:
        """Check, then write every file and remove stale ones (see :meth:`stale`); returns the removed
        files. ``source``: the results, for the messages."""
        self.check(stale_patterns, source)
        if self.files:
            announce()
        for path, data in self.files.items():
            atomic_write_bytes(path, data)
            print(f"wrote {path}")
        removed = self.stale(stale_patterns)
        for path in removed:
            path.unlink()
        self._record(removed)
        return removed

    def _record(self, removed: list[Path]) -> None:
        """Add the files written now to their folders' manifests (and drop the ``removed`` ones)."""
        record_written(list(self.files), removed)

    def check(self, stale_patterns: tuple[str, ...], source: Path) -> None:
        """Raise :class:`CommittedOutputsError` if :meth:`write` would write into or remove from the
        committed evidence, NotRegularFileError if a folder's manifest is not a regular file (a FIFO, a
        folder); writes nothing."""
        for folder_ in dict.fromkeys([self.out] + [p.parent for p in self.files]):
            read_manifest(folder_)  # read bounded: a FIFO never blocks, a folder is one line, before any write
        for path in list(self.files) + self.stale(stale_patterns):
            why = committed_reason(path)
            if why:
                raise refusal(path, why, source)


def write_outputs(files, source: Path) -> None:
    """Write ``files`` [(path or None, bytes or None)], pairs with no path or no data skipped, through one
    :class:`Outputs` (each file checked in its own folder first); ``source``: the results, for the messages."""
    outputs = Outputs(Path("."))
    for path, data in files:
        if path and data is not None:
            outputs.add(path, data)
    outputs.write((), source)


def outputs_main(argv: Optional[Sequence[str]], make: Callable[..., object], what: str, description: str) -> int:
    """The command line of ``make_tables.py`` / ``make_figures.py`` (``what``: "tables" or "figures"):
    ``make(results, out, theory=...)`` from ``--results`` into ``--out``.
    Returns the exit status; a missing results folder or a refused write is one line, status 2."""
    ap = ArgumentParser(description=description)
    ap.add_argument("--results", type=path_arg, default=folder("runs"))
    ap.add_argument("--out", type=path_arg, default=folder(what))
    ap.add_argument("--no-theory", action="store_true", help=f"skip the (Monte-Carlo) theory {what[:-1]}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        make(args.results, args.out, theory=not args.no_theory)
    except (FileNotFoundError, NotADirectoryError, NotRegularFileError, OutputDirError, CommittedOutputsError) as e:
        print(f"make_{what}.py: error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0
