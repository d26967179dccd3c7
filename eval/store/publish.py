"""``rheo publish`` (``make publish``): the one way to update the committed results, from the output root.

    rheo publish [PATH ...] [--yes]        (make publish [ARGS="PATH ... --yes"])

Offered: every file a project writer wrote under the output root (listed in its folder's manifest,
``.rheo-written.json``; the executed notebook of ``make notebook``) that has a committed place
(rheo.paths.committed_twin: ``tables/``, ``figures/``, the ``<study>.parquet`` archives, ``tune/``,
``draft_head/``, ``gpu/`` -> ``results/``; ``experiment/mine/tuned_*.yaml`` -> ``configs/experiment/``;
``notebooks/`` -> ``notebooks/``) and differs from it; a new file only in a folder the committed results
already have, unless a PATH names it. A file of your own (an export, ``outputs/mine_rows.csv``) is never
offered unless a PATH names that very file. PATHs (relative to the output root, or paths under it;
normalised) keep only the changes under them; a PATH outside the output root, missing, or through a
symlink is refused in one line. Rows folders, Hydra's files, exports and the replay caches are never
published (:data:`NEVER`), nor a file whose committed place git ignores, nor anything but a regular file.

Each offered file is read once, into memory: those bytes are shown, checked and (with ``--yes``) written,
so a command replacing the file meanwhile cannot slip other bytes in. Shown: a summary per file (an
archive's rows added, removed and with changed values; a text file's lines added and removed, with the
first few changed lines; sizes otherwise). Checked as committed results always were: every archive has a
row key (realized rows, same-state rows and their drivers, the head reading; an archive without one is
refused); no key is held twice; an archive never shrinks (every committed key is still there), never
takes rows of settings it does not hold, and keeps its columns (a newer row schema may add some).
Without ``--yes`` it is a dry run: the changes and each refusal are shown, nothing is written, exit
status 0. With ``--yes`` a refused file stops the whole publish (exit status 2, nothing written).
Then ``make docs`` refills the README's and docs' tables from the new committed ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from eval.store.committed import CommittedOutputsError
from eval.store.publish_checks import check, describe
from eval.store.storage import MANIFEST as ROWS_MANIFEST
from rheo.cli import ArgumentParser, one_line, path_arg, run_main
from rheo.files import is_regular, read_bounded, walk
from rheo.io import publish_bytes, read_manifest
from rheo.paths import REPO_ROOT, announce, committed_twin, out_root, shown

PROG = "rheo publish"
#: top-level folders of the output root that are never published: Hydra's records, a smoke check's
#: outputs, the replays' and head reading's caches, exports
NEVER = ("hydra", "smoke", "expected_replay", "head_reading", "exports")
#: files written by a program that keeps no manifest (relative to the output root): offered as the writers'
NO_MANIFEST = (("notebooks", "analysis.ipynb"),)
#: the largest file read (an archive is a few MB)
READ_LIMIT = 1 << 31


def candidates(root: Path, named: Sequence[Path] = ()) -> list[tuple[Path, Path]]:
    """(output, committed twin) of every publishable file under ``root``: a regular file (symlinked folders
    are not entered) that a project writer recorded in its folder's manifest (or one of ``named``, the
    files a PATH names), not hidden (the manifests, clocks), not in :data:`NEVER`, not inside a rows
    folder (one holding ``ROWS_MANIFEST``)."""
    pairs = []
    named = {os.path.normpath(p.absolute()) for p in named}
    for folder, dirs, names in walk(root):
        rel_folder = folder.relative_to(root)
        if rel_folder.parts[:1] and (rel_folder.parts[0] in NEVER or (folder / ROWS_MANIFEST).is_file()):
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        written = read_manifest(folder)
        for name in sorted(names):
            path, rel = folder / name, rel_folder / name
            if name.startswith(".") or not is_regular(path):
                continue
            if name not in written and rel.parts not in NO_MANIFEST and os.path.normpath(path.absolute()) not in named:
                continue
            twin = committed_twin(path)  # experiment/mine/tuned_topk.yaml -> configs/experiment/tuned_topk.yaml
            if rel.parts[0] == "experiment" and (rel.parts[1:2] != ("mine",) or len(rel.parts) != 3):
                twin = None
            if twin is not None:
                pairs.append((path, twin))
    skip = ignored([twin for _, twin in pairs])
    return [(path, twin) for path, twin in pairs if twin not in skip]


def ignored(paths: list[Path]) -> set[Path]:
    """Those of ``paths`` that the checkout's .gitignore keeps out of git (figures a study repeats, rows
    folders): never published; none when git cannot answer."""
    if not paths:
        return set()
    try:
        listed = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-z"], cwd=REPO_ROOT, timeout=60,
                                input=b"\0".join(str(p).encode() for p in paths), capture_output=True).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {Path(name) for name in listed.decode().split("\0") if name}


def changes(root: Path, only: Sequence[Path] = ()) -> list[tuple[Path, Path, bytes]]:
    """(file, committed twin, its bytes, read once) of the candidates whose bytes differ from their twin
    (or that have none yet), under ``only``; without ``only``, a file new to the committed results only in
    a folder they already have (a folder of your own, ``outputs/mine/``, is published only when named)."""
    keep = [Path(os.path.normpath(p.absolute())) for p in only]
    out = []
    for path, twin in candidates(root, [k for k in keep if k.is_file()]):
        here = Path(os.path.normpath(path.absolute()))
        if keep and not any(k == here or k in here.parents for k in keep):
            continue
        if not keep and not twin.parent.is_dir():
            continue
        data = read_bounded(path, READ_LIMIT, "publish", "publish regular files only")
        if not twin.is_file() or twin.read_bytes() != data:
            out.append((path, twin, data))
    return out


def named_paths(root: Path, paths: Sequence[Path]) -> list[Path]:
    """The PATHs of the command line as paths under ``root`` (normalised; relative ones are read against the
    output root unless they exist as given); ValueError, one line, for one outside the root, missing, or
    through a symlink (publish reads only what lies under the root itself)."""
    base = Path(os.path.normpath(root.absolute()))
    out = []
    for given in paths:
        path = Path(os.path.normpath((given if given.exists() or given.is_absolute() else root / given).absolute()))
        if path != base and base not in path.parents:
            raise ValueError(f"{given}: not under the output root {shown(root)}: publish takes files a command "
                             f"wrote there (a path relative to it, or under it)")
        links = [p for p in [path, *path.parents] if base in p.parents and p.is_symlink()]
        if links:
            raise ValueError(f"{given}: {shown(links[-1])} is a symlink: publish reads only files a command wrote "
                             f"under the output root, never through a link; name the folder itself")
        if not path.exists():
            raise ValueError(f"{given}: nothing there under the output root {shown(root)}")
        out.append(path)
    return out


def publish(root: Path, only: Sequence[Path] = (), yes: bool = False) -> int:
    """Show, check and (with ``yes``) write the changes of ``root`` into the committed results; the exit status."""
    announce()
    found = changes(root, only)
    if not found:
        where = ", ".join(map(shown, only)) if only else shown(root)
        print(f"nothing to publish: no file under {where} that a command wrote differs from the committed results")
        return 0
    refused = []
    for path, twin, data in found:
        print("\n".join(describe(path, twin, data)))
        try:
            check(path, twin, data)
        except CommittedOutputsError as e:
            refused.append(e)
            print(f"  refused: {one_line(e)}")
    if yes and refused:
        raise refused[0]
    if not yes:
        print(f"dry run: nothing was written; " + (f"{len(refused)} of the {len(found)} file(s) are refused (shown "
              f"above), so --yes would write none: keep those under the output root, or name the others as PATHs"
              if refused else f"--yes (make publish ARGS=--yes) writes these {len(found)} file(s)"))
        return 0
    for path, twin, data in found:
        publish_bytes(twin, data)  # the bytes shown and checked above, not a second read
        print(f"published {shown(twin)}")
    print("then: `make docs` refills the README's and docs' tables from them; commit with git")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=path_arg, help="publish only the changes under these (relative to "
                    "the output root, or paths under it)")
    ap.add_argument("--yes", action="store_true", help="write the changes (without it: show them, write nothing)")
    args = ap.parse_args(argv)
    root = out_root()
    try:
        return publish(root, named_paths(root, args.paths), args.yes)
    except (OSError, ValueError, CommittedOutputsError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_main(main, PROG)
