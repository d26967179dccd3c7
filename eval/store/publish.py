"""``rheo publish`` (``make publish``): the one way to update the committed results, from the output root.

    rheo publish [PATH ...] [--yes]        (make publish [ARGS="PATH ... --yes"])

Every file a command wrote under the output root that has a committed place (rheo.paths.committed_twin:
``tables/``, ``figures/``, the ``<study>.parquet`` archives, ``tune/``, ``draft_head/``, ``gpu/`` ->
``results/``; ``experiment/mine/tuned_*.yaml`` -> ``configs/experiment/``; ``notebooks/`` (``make
notebook``) -> ``notebooks/``) and differs from it is a change; a new file only in a folder the
committed results already have, unless a PATH names it. PATHs (relative to the output root, or
files/folders under it) keep only the changes under them. Rows folders, Hydra's files, exports and the
replay caches are never published (:data:`NEVER`), nor a file whose committed place git ignores.
Before anything is written every change is shown (a text diff, an archive's row counts) and checked
as committed results always were: an archive never shrinks (every committed row is still there),
never takes rows of settings it does not hold, and keeps its columns (the same keys; a newer row
schema may add some); a file whose check fails stops the whole publish (exit status 2, nothing
written). Without ``--yes`` nothing is written either (exit status 2, after the changes are shown).
Then ``make docs`` refills the README's and docs' tables from the new committed ones.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

import pyarrow.parquet as pq

from eval.store.committed import CommittedOutputsError, check_growth
from eval.store.storage import MANIFEST as ROWS_MANIFEST
from rheo.cli import ArgumentParser, one_line, path_arg, run_main
from rheo.io import atomic_write_bytes
from rheo.paths import REPO_ROOT, announce, committed_twin, out_root, shown

PROG = "rheo publish"
#: top-level folders of the output root that are never published: Hydra's records, a smoke check's
#: outputs, the replays' and head reading's caches, exports
NEVER = ("hydra", "smoke", "expected_replay", "head_reading", "exports")
#: lines of one file's diff shown (the rest counted)
DIFF_LINES = 40


def candidates(root: Path) -> list[tuple[Path, Path]]:
    """(output, committed twin) of every publishable file under ``root``: not hidden (the writers'
    manifests, clocks), not in :data:`NEVER`, not inside a rows folder (one holding ``ROWS_MANIFEST``)."""
    pairs = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if rel.parts[0] in NEVER or any(part.startswith(".") for part in rel.parts):
            continue
        if any((root.joinpath(*rel.parts[:i]) / ROWS_MANIFEST).is_file() for i in range(1, len(rel.parts))):
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


def changes(root: Path, only: Sequence[Path] = ()) -> list[tuple[Path, Path]]:
    """The candidates whose bytes differ from their committed twin (or that have none yet), under ``only``;
    without ``only``, a file new to the committed results only in a folder they already have (a folder
    of your own, ``outputs/mine/``, is published only when named)."""
    keep = [p.absolute() for p in only]
    out = []
    for path, twin in candidates(root):
        if keep and not any(k == path.absolute() or k in path.absolute().parents for k in keep):
            continue
        if not keep and not twin.parent.is_dir():
            continue
        if not twin.is_file() or twin.read_bytes() != path.read_bytes():
            out.append((path, twin))
    return out


def check(path: Path, twin: Path) -> None:
    """Raise :class:`CommittedOutputsError` if ``path`` may not replace the committed ``twin``: an archive
    keeps its columns (it may add some), keeps every committed row and takes no rows of settings it does
    not hold."""
    if path.suffix != ".parquet" or not twin.is_file():
        return
    old, new = pq.read_schema(twin).names, pq.read_schema(path).names
    gone = sorted(set(old) - set(new))  # a column added since (a newer row schema) is no loss
    if gone:
        raise CommittedOutputsError(f"{shown(path)} lacks columns of the committed {shown(twin)} ({', '.join(gone[:5])}"
                                    f"{', ...' if len(gone) > 5 else ''}): not the same keys; nothing was written")
    key, settings = archive_key(old)
    if key:
        cols = sorted(set(key + settings))
        check_growth(twin, pq.read_table(twin, columns=cols).to_pandas(), pq.read_table(path, columns=cols).to_pandas(),
                     key, settings)


def archive_key(columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """(row key, settings) of an archive with these ``columns``: same-state rows, realized rows, or ([], [])."""
    from eval.store import state_archive, storage

    for key, settings in ((state_archive.ROW_KEY, state_archive.SETTINGS), (list(storage.ROW_KEY), ["config_hash"])):
        if set(key + settings) <= set(columns):
            return list(key), list(settings)
    return [], []


def describe(path: Path, twin: Path) -> list[str]:
    """Lines saying how ``path`` would change ``twin``: a diff (text), row counts (archive), sizes (else)."""
    head = f"{'new' if not twin.is_file() else 'changed'}: {shown(twin)} <- {shown(path)}"
    if path.suffix == ".parquet":
        old = pq.read_metadata(twin).num_rows if twin.is_file() else 0
        return [f"{head} (rows {old} -> {pq.read_metadata(path).num_rows})"]
    try:
        new_text = path.read_text().splitlines()
        old_text = twin.read_text().splitlines() if twin.is_file() else []
    except UnicodeDecodeError:
        old = twin.stat().st_size if twin.is_file() else 0
        return [f"{head} ({old} -> {path.stat().st_size} bytes)"]
    diff = list(difflib.unified_diff(old_text, new_text, str(shown(twin)), str(shown(path)), lineterm="", n=1))
    more = [f"  ... {len(diff) - DIFF_LINES} more diff lines"] if len(diff) > DIFF_LINES else []
    return [head] + ["  " + line for line in diff[:DIFF_LINES]] + more


def publish(root: Path, only: Sequence[Path] = (), yes: bool = False) -> int:
    """Show, check and (with ``yes``) write the changes of ``root`` into the committed results; the exit status."""
    announce()
    found = changes(root, only)
    if not found:
        print(f"nothing to publish: no file under {shown(root)} differs from the committed results")
        return 0
    for path, twin in found:
        print("\n".join(describe(path, twin)))
    for path, twin in found:
        check(path, twin)
    if not yes:
        raise CommittedOutputsError(f"{len(found)} committed file(s) would change (shown above); nothing was "
                                    f"written: pass --yes (make publish ARGS=--yes) to write them")
    for path, twin in found:
        atomic_write_bytes(twin, path.read_bytes())
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
    only = [p if p.exists() else root / p for p in args.paths]
    try:
        return publish(root, only, args.yes)
    except (OSError, ValueError, CommittedOutputsError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run_main(main, PROG)
