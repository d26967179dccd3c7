"""Generated outputs (tables, figures) written as a set, never over committed results by accident.

:class:`Outputs` collects every file of one run of ``make_tables`` / ``make_figures`` in memory,
then checks them against git before anything is written: a file tracked by git may only be
rewritten with the same bytes (so ``git status`` stays clean), and a tracked file is never removed
as stale, unless ``update_committed`` is given (``make reproduce`` and the other commands whose
job is to regenerate the committed results pass it). Otherwise :class:`CommittedOutputsError`
names the first such file and the fix, and nothing is written. Outside a git checkout there is
nothing to protect and every file is written.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from eval.store.shard_checks import OutputDirError
from rheo.cli import ArgumentParser, one_line, path_arg
from rheo.io import atomic_write_bytes, remove_stale_outputs
from rheo.paths import folder


class CommittedOutputsError(RuntimeError):
    """Writing these outputs would change or delete files committed to git."""

    user_error = True  # rheo.cli: one line, no traceback


def is_committed(path: Path) -> bool:
    """Whether git tracks the file ``path`` (False outside a checkout)."""
    path = Path(path)
    return path.is_file() and path.resolve() in tracked_files(path.parent)


def check_growth(archive: Path, old, new, key: Sequence[str], settings: Sequence[str]) -> None:
    """A committed archive only grows, and only with rows of the study it holds at the settings it
    holds: raise :class:`CommittedOutputsError` if the rows ``new`` (a DataFrame) that would replace
    those of ``archive`` (``old``) lack one of its rows (by the columns ``key``: the archive would
    shrink) or hold a combination of ``settings`` (config hashes) that it does not (rows of another
    size, length or setting would be mixed in). Holds with ``--update-committed`` too: an archive of
    other settings is a new file, or the old one removed from git on purpose first."""
    fix = (f"write it elsewhere (another --archive / --out; for a study, output_dir= and paths.*=), or `git rm "
           f"{archive}` first to start it again on purpose")
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


class Outputs:
    """The files of one run into ``out``: :meth:`add` them, then :meth:`write` (checked first)."""

    def __init__(self, out: Path, update_committed: bool = False) -> None:
        self.out = Path(out)
        self.update_committed = update_committed
        self.files: dict[Path, bytes] = {}

    def add(self, path: Path, data: bytes) -> Path:
        self.files[Path(path)] = data
        return Path(path)

    def write(self, stale_patterns: tuple[str, ...], source: Path) -> list[Path]:
        """Check, then write every file and remove stale ones (``stale_patterns`` globs of ``out``
        not written now); returns the removed files. ``source``: the results, for the messages."""
        self.check(stale_patterns, source)
        for path, data in self.files.items():
            atomic_write_bytes(path, data)
            print(f"wrote {path}")
        return remove_stale_outputs(self.out, stale_patterns, list(self.files))

    def check(self, stale_patterns: tuple[str, ...], source: Path) -> None:
        """Raise :class:`CommittedOutputsError` if :meth:`write` would change or remove a committed file
        (nothing to check with ``update_committed``); writes nothing."""
        tracked = tracked_files(self.out)
        if tracked and not self.update_committed:
            self._check(tracked, stale_patterns, source)

    def _check(self, tracked: set[Path], stale_patterns: tuple[str, ...], source: Path) -> None:
        fix = (f"write them elsewhere (TABLES= / FIGURES=, --out), or pass --update-committed (make ... "
               f"ARGS=--update-committed) to regenerate the committed results on purpose")
        for path, data in self.files.items():
            if path.resolve() in tracked and path.read_bytes() != data:
                raise CommittedOutputsError(f"{path} is committed and the rows under {source} would change it: "
                                            f"nothing was written; {fix}")
        keep = {p.resolve() for p in self.files}
        for pattern in stale_patterns:
            for path in sorted(self.out.glob(pattern)):
                if path.resolve() in tracked and path.resolve() not in keep:
                    raise CommittedOutputsError(f"{path} is committed and the runs it was drawn from are not under "
                                                f"{source}, so it would be removed: nothing was written; {fix}")


def write_outputs(files, source: Path, update_committed: bool) -> None:
    """Write ``files`` [(path or None, bytes or None)], pairs with no path or no data skipped, through one
    :class:`Outputs` (checked against git first); ``source``: the results, for the messages."""
    outputs = Outputs(Path("."), update_committed=update_committed)
    for path, data in files:
        if path and data is not None:
            outputs.add(path, data)
    outputs.write((), source)


def outputs_main(argv: Optional[Sequence[str]], make: Callable[..., object], what: str, description: str) -> int:
    """The command line of ``make_tables.py`` / ``make_figures.py`` (``what``: "tables" or "figures"):
    ``make(results, out, theory=..., update_committed=...)`` from ``--results`` into ``--out``.
    Returns the exit status; a missing results folder or a refused write is one line, status 2."""
    ap = ArgumentParser(description=description)
    ap.add_argument("--results", type=path_arg, default=folder("runs"))
    ap.add_argument("--out", type=path_arg, default=folder("results", what))
    ap.add_argument("--update-committed", action="store_true",
                    help=f"allow changing or removing {what} committed to git (make reproduce)")
    ap.add_argument("--no-theory", action="store_true", help=f"skip the (Monte-Carlo) theory {what[:-1]}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        make(args.results, args.out, theory=not args.no_theory, update_committed=args.update_committed)
    except (FileNotFoundError, OutputDirError, CommittedOutputsError) as e:
        print(f"make_{what}.py: error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0
