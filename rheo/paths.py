"""The project checkout's root folder, for the committed data, assets and configs read from it; the
project's folders (``configs/paths/default.yaml``: results, tables, figures, data, cache); the output
root every command writes under; and how a path a user gives is read against it.

Two places, never mixed: the **output root** (``outputs/`` of the working directory, git-ignored;
``RHEO_OUT=DIR`` or Hydra's ``out_root=DIR`` moves it) holds everything a user runs: rows, studies,
tables, figures, tuned trees, calibration, replays, exports, the executed notebook, Hydra's own files.
The **committed evidence** (``results/`` and the tuned-tree presets of ``configs/experiment/``) is
read-only input: readers take the user's own output when it exists (:func:`own_or_committed`) and fall
back to the committed twin, saying which they read; ``rheo publish`` is the one way to change it.
Every default output path derives from :func:`out_root` here.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

#: the folder holding ``rheo/``, ``data/``, ``configs/`` (the package is installed editable)
REPO_ROOT = Path(__file__).resolve().parent.parent
PATHS_FILE = REPO_ROOT / "configs" / "paths" / "default.yaml"


@functools.lru_cache(maxsize=1)
def folders() -> dict[str, str]:
    """name -> folder (relative to the checkout) of ``configs/paths/default.yaml``: flat
    ``name: value  # comment`` lines, read without a YAML library (the library does not need one)."""
    out = {}
    for line in PATHS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, value = line.partition(":")
            out[name.strip()] = value.strip()
    return out


def folder(name: str, *parts: str) -> Path:
    """The project folder ``name`` (relative to the working directory, ``${out_root}`` filled in from
    :func:`out_root`), with ``parts`` below it."""
    return Path(folders()[name].replace("${out_root}", str(out_root())), *parts)


#: the environment variable that moves the output root (Hydra: ``out_root=``, which reads it too)
OUT_ENV = "RHEO_OUT"
#: the output root when RHEO_OUT is not set (relative to the working directory; git-ignored)
OUT_DEFAULT = "outputs"
#: the committed evidence: archives, tables, figures, tuning, calibration (read-only input)
COMMITTED = REPO_ROOT / "results"
#: the tuned-tree presets: committed under configs/experiment/, a user's own under <out root>/experiment/
PRESETS_DIR = REPO_ROOT / "configs" / "experiment"
TUNED_PRESETS = ("tuned_topk.yaml", "tuned_rheo.yaml")


def out_root() -> Path:
    """The output root: ``$RHEO_OUT`` when set, else ``outputs`` (relative to the working directory)."""
    return Path(os.environ.get(OUT_ENV) or OUT_DEFAULT).expanduser()


def output(*parts: str) -> Path:
    """A default output path: ``parts`` under :func:`out_root`."""
    return out_root().joinpath(*parts)


def announce() -> None:
    """Say once per process, before its first write, where outputs go and how to move them (on stdout:
    a refusal on stderr stays one line)."""
    if not _ANNOUNCED:
        _ANNOUNCED.append(True)
        print(announcement(), flush=True)


_ANNOUNCED: list[bool] = []


def announcement() -> str:
    return (f"outputs: {shown(out_root())}/ (set {OUT_ENV}=DIR, or out_root=DIR for a run, to move it; committed "
            f"results change only by `make publish`)")


def committed_twin(path: Path | str) -> Optional[Path]:
    """The committed file that ``path`` (under the output root) would replace on publishing: the same
    relative path under results/, a tuned-tree preset under configs/experiment/, the notebook under
    notebooks/; None for a path outside the output root."""
    try:
        rel = Path(path).absolute().relative_to(out_root().absolute())
    except ValueError:
        return None
    if rel.parts[:2] == ("experiment", "mine"):  # this machine's tuned presets
        return PRESETS_DIR.joinpath(*rel.parts[2:])
    if rel.parts[:1] == ("notebooks",):  # the executed analysis notebook
        return REPO_ROOT / rel
    return COMMITTED / rel


def own_or_committed(path: Path | str, what: str = "") -> Path:
    """``path`` when it exists (the user's own output), else its committed twin when that exists (said on
    stderr, so a reader never passes committed numbers off as the user's), else ``path`` (the reader
    then says what is missing)."""
    path = Path(path)
    twin = committed_twin(path)
    if path.exists() or twin is None or not twin.exists():
        return path
    if twin not in _SAID:  # once per file and process
        _SAID.add(twin)
        print(f"reading the committed {shown(twin)}{' (' + what + ')' if what else ''}: no {shown(path)} of "
              f"yours", file=sys.stderr)
    return twin


_SAID: set[Path] = set()


def is_committed_evidence(path: Path | str) -> bool:
    """Whether ``path`` lies in the committed evidence (results/, the committed tuned-tree presets,
    the committed notebook), decided by place, so that it holds where git cannot answer."""
    path = Path(path).absolute().resolve()
    places = [COMMITTED.resolve()] + [(PRESETS_DIR / n).resolve() for n in TUNED_PRESETS]
    places.append((REPO_ROOT / "notebooks").resolve())
    return any(path == p or p in path.parents for p in places)


def resolve_path(path: str, must_exist: bool = False) -> Path:
    """Absolute paths as they are; relative ones against the working directory, or
    (for inputs that must exist, like data_dir) the project root when not found there."""
    p = Path(path).expanduser()
    if p.is_absolute() or not must_exist or p.exists():
        return p.absolute()
    return REPO_ROOT / p


def shown(path: Path | str) -> str:
    """``path`` as a shell word: relative to the working directory when it lies inside it."""
    path = Path(path).absolute()
    try:
        text = str(path.relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    return shlex.quote(text)


def program(name: str) -> str:
    """How a printed hint runs ``name`` ("rheo" or "python") so that it works as printed from here: the
    interpreter running now and the ``rheo`` script installed next to it (``.venv/bin/rheo`` after
    ``make setup``, which puts nothing on PATH), else ``python -m rheo.commands``."""
    python = Path(sys.executable)
    if name == "python":
        return shown(python)
    script = python.parent / name
    return shown(script) if script.is_file() else f"{shown(python)} -m rheo.commands"


def git_sha() -> str:
    """HEAD of the checkout, suffixed '-dirty' when tracked files have changes; 'unknown' outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def start_git_sha() -> str:
    """``git_sha()`` as it was the first time this process asked: the code a long run started with,
    even when commits land while it runs."""
    return git_sha()
