"""The wall time of a long make target, recorded by the target itself.

``python -m eval.measure.wall_clock start CLOCK`` writes the start time to CLOCK; ``python -m eval.measure.wall_clock
finish CLOCK OUT`` writes OUT (JSON): start and end (UTC), wall seconds, the CPU model and its core
count, the git commit and whether the checkout had local changes. ``make reproduce`` brackets
itself with the two, so its committed record (``results/reproduce_time.json``) is the run's own.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path

from rheo.cli import ArgumentParser, run_main
from rheo.io import atomic_write_text
from rheo.paths import git_sha, program
from rheo.timing import device_name


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)


def record(start: _dt.datetime, end: _dt.datetime, target: str, sha: str) -> dict:
    """The JSON record of a run of ``target`` from ``start`` to ``end`` on commit ``sha`` (taken at the
    start: the run itself rewrites tracked results)."""
    wall = int((end - start).total_seconds())
    return {"target": target, "start_utc": start.isoformat(), "end_utc": end.isoformat(), "wall_s": wall,
            "wall": f"{wall // 60} min {wall % 60} s", "cpu": device_name("cpu"), "cores": os.cpu_count(),
            "git_sha": sha}


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("action", choices=["start", "finish"])
    ap.add_argument("clock", type=Path, help="the file holding the start time")
    ap.add_argument("out", type=Path, nargs="?", help="finish: the JSON record to write")
    ap.add_argument("--target", default="make reproduce", help="what was timed (stored in the record)")
    args = ap.parse_args(argv)
    if args.action == "start":
        atomic_write_text(args.clock, json.dumps({"start_utc": _now().isoformat(), "git_sha": git_sha()}) + "\n")
        return 0
    if args.out is None:
        ap.error("finish needs OUT, the record to write")
    if not args.clock.is_file():
        raise FileNotFoundError(f"{args.clock} does not exist: run `{program('python')} -m eval.measure.wall_clock start {args.clock}` "
                                "when the timed command starts")
    try:
        started = json.loads(args.clock.read_text())
        start = _dt.datetime.fromisoformat(started["start_utc"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{args.clock} is not a start record of eval.measure.wall_clock ({e}): start the clock again") from None
    text = json.dumps(record(start, _now(), args.target, started.get("git_sha", "unknown")), indent=1) + "\n"
    atomic_write_text(args.out, text, record=True)
    print(f"{args.target}: {json.loads(text)['wall']} -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
