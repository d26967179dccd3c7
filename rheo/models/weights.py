"""Weight files that exist but cannot be read: found before loading, named with their fix.

A truncated or garbled ``*.safetensors`` file (an interrupted download or copy,
a full disk) otherwise fails deep inside ``safetensors`` with "header too
large" and no path. :func:`check_weight_files` opens the header of every
safetensors file of a folder (cheap: no tensor is read) and raises
:class:`CorruptWeightsError` naming the file and what to do about it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Optional

from rheo.files import is_regular

__all__ = ["CorruptWeightsError", "check_weight_files", "sampled_fingerprint", "weights_fingerprint", "weights_problem"]
#: bytes read at each of SAMPLES evenly spaced offsets of a weight file by :func:`sampled_fingerprint`
SAMPLE_BYTES, SAMPLES = 1 << 16, 16


class CorruptWeightsError(RuntimeError):
    """A weights file that exists but cannot be read."""

    user_error = True  # rheo.cli: one line, no traceback


def weights_problem(folder: Path) -> str:
    """'' if every safetensors file under ``folder`` has a readable header, else what is wrong."""
    from safetensors import safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        if not is_regular(path.resolve()):  # a FIFO would block the reader forever
            return f"{path} is not a regular file (a FIFO, a device or a folder; 0 bytes readable)"
        try:
            with safe_open(str(path), "pt"):
                pass
        except Exception as e:  # SafetensorError, OSError: truncated, garbage, unreadable
            return f"{path} is unreadable ({type(e).__name__}: {e}; {path.stat().st_size} bytes)"
    return ""


def check_weight_files(folder: Path, what: str, fix: str) -> None:
    """Raise CorruptWeightsError '<what>: <file> is unreadable (...). Fix: <fix>' for a bad file."""
    problem = weights_problem(folder)
    if problem:
        raise CorruptWeightsError(f"{what}: {problem}: truncated or corrupt (interrupted download or copy, "
                                  f"full disk?).\n    fix: {fix}")


def weights_fingerprint(folder: Path) -> Optional[str]:
    """First 12 hex digits of a SHA-256 over the folder's ``*.safetensors`` / ``*.bin`` files
    (names and contents); None when it has none. File digests are cached per (path, size, mtime)."""
    files = sorted(f for f in Path(folder).iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f.name.encode())
        h.update(_file_digest(str(f), st.st_size, st.st_mtime_ns).encode())
    return h.hexdigest()[:12]


def sampled_fingerprint(folder: Path) -> Optional[str]:
    """First 12 hex digits of a SHA-256 over a model folder's ``config.json`` and, for each
    ``*.safetensors`` / ``*.bin`` file, its name, size, header (the first 1 MiB: a safetensors file's
    tensor names, shapes and offsets) and SAMPLES blocks of SAMPLE_BYTES spread over the file and its
    end. None without weight files. Cheap for a target of many GB (about 2 MiB read per file), and
    other weights of the same shapes (a fine-tune, another checkpoint) change it."""
    folder = Path(folder)
    files = sorted(f for f in folder.iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if not files:
        return None
    h = hashlib.sha256()
    config = folder / "config.json"
    h.update(config.read_bytes() if config.is_file() else b"")
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            for i in range(1, SAMPLES + 1):
                fh.seek(max(0, size * i // SAMPLES - SAMPLE_BYTES))
                h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
