"""Resume keys: what a resumable measurement stores beside each result, so that a rerun reuses a result
only when everything that decides its value is the same.

A measurement that appends results to a JSON-lines file (eval.measure.expected_replay,
eval.measure.head_reading) or writes one file per batch (scripts/gen_corpus.py,
scripts/gen_selfinstruct.py, scripts/backfill_features.py) stores with each result a ``key``: a dict
of plain JSON values (the inputs, the settings, fingerprints of the prompt and the weights). A result
is reused only when its stored key equals the key the rerun computes for it; a result stored without
a key (written before keys existed) is computed again.

    key = {"mc": 100, "prompt_sha": digest(prompt_ids), ...}
    done = {tuple(r["key"][f] for f in ...): r for r in read_jsonl(path, PROG) if r.get("key") == ...}

The harness's rows (eval.run) are keyed by their config hash instead (eval.store.keys).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, TextIO

from rheo.io import check_target, make_dir, open_append

log = logging.getLogger(__name__)

__all__ = ["append_jsonl", "digest", "read_jsonl"]


def digest(value: Any) -> str:
    """A short SHA-256 of ``value`` as JSON (token ids, texts, settings): equal values, equal digests."""
    blob = json.dumps(value, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_jsonl(path: Path | str, what: str) -> list[dict]:
    """The JSON objects of the lines of ``path`` (none if it is missing). A line that is not one (cut
    by a kill, edited) is skipped with a warning naming ``path:line``; its result is computed again."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            got = json.loads(line)
        except ValueError as e:
            got = e
        if isinstance(got, dict):
            out.append(got)
        else:
            log.warning("%s: %s:%d is not a JSON object (%s): skipped, its result is computed again", what, path, n,
                        f"cut by a kill? {got}" if isinstance(got, ValueError) else type(got).__name__)
    return out


def append_jsonl(path: Path | str) -> TextIO:
    """``path`` opened for appending lines (its folder created); a last line cut by a kill is ended
    first, so the next line is a line of its own."""
    path = Path(path)
    check_target(path)
    make_dir(path.parent)
    cut = False
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"
    sink = open_append(path)
    if cut:
        sink.write("\n")
    return sink
