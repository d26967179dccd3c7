"""The project checkout's root folder, for the committed data, assets and configs read from it; the
project's folders (``configs/paths/default.yaml``: results, tables, figures, data, cache); and how a
path a user gives is read against it."""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
from pathlib import Path

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
    """The project folder ``name`` (relative to the checkout), with ``parts`` below it."""
    return Path(folders()[name], *parts)


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
