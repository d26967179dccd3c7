"""A training run's state on disk: the full checkpoint (``state.pt``) and its metrics log.

A checkpoint holds tensors, numbers, strings and containers only, so it is read with
``weights_only=True``; both files are written atomically (``rheo.io``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from rheo.cli import one_line
from rheo.io import atomic_write

__all__ = ["save_state", "load_state", "trim_metrics"]


def save_state(path: Path, **state) -> None:
    atomic_write(path, lambda f: torch.save(state, f))


def load_state(path: Path, device) -> dict:
    """A checkpoint of :func:`save_state`, read with ``weights_only=True``: tensors, numbers, strings
    and containers only, so a crafted file cannot run code; anything else is refused naming it."""
    try:
        return torch.load(path, weights_only=True, map_location=device)
    except pickle.UnpicklingError as e:
        raise SystemExit(f"--resume: {path} holds objects other than tensors and numbers, so it is not a "
                         f"checkpoint of this script and was not loaded ({one_line(e)[:200]}); delete it "
                         f"or choose another --run-dir") from None
    except (RuntimeError, EOFError, OSError) as e:
        raise SystemExit(f"--resume: {path} is unreadable ({type(e).__name__}: {one_line(e)[:200]}): "
                         f"truncated? Delete it (training restarts) or choose another --run-dir") from None


def trim_metrics(path: Path, step: int) -> None:
    """Drop records logged after checkpoint ``step`` (a run killed between its log line and its
    checkpoint): the resumed run logs them again, so no step is logged twice."""
    if not path.is_file():
        return
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    keep = [x for x in lines if json.loads(x).get("step", 0) <= step]
    if len(keep) != len(lines):
        atomic_write(path, lambda f: f.write("".join(x + "\n" for x in keep).encode()))
