"""Weight files that exist but cannot be read: found before loading, named with their fix.

A truncated or garbled ``*.safetensors`` file (an interrupted download or copy,
a full disk) otherwise fails deep inside ``safetensors`` with "header too
large" and no path. :func:`check_weight_files` opens the header of every
safetensors file of a folder (cheap: no tensor is read) and raises
:class:`CorruptWeightsError` naming the file and what to do about it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CorruptWeightsError", "check_weight_files", "weights_problem"]


class CorruptWeightsError(RuntimeError):
    """A weights file that exists but cannot be read."""


def weights_problem(folder: Path) -> str:
    """'' if every safetensors file under ``folder`` has a readable header, else what is wrong."""
    from safetensors import safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
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
