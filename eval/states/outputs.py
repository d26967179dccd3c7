"""The files one run of ``python -m eval.states.tables`` writes, planned before any is written.

:func:`plan_outputs` reads the rows, renders the markdown (with the renderer it is handed), the figures and
the archive in memory and returns them as an :class:`OutputPlan`: one :class:`eval.store.committed.Outputs` per
folder, each with the globs of its stale figures (a figure of the same prefix that these rows no longer draw).
``OutputPlan.write`` checks all of them first (none may land in the committed evidence), then writes them.
``eval.states.head_quality`` writes through the same plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from eval.store.committed import Outputs
from eval.store.state_archive import ROW_KEY, archive_files, load_rows, without_columns

FIGURE_NAMES = ("m_ablation", "temperature", "families", "depth", "probe", "calibration", "root_gap")


def figure_paths(prefix: str) -> tuple[Path, str]:
    """(folder, file-name prefix) of ``--figures PREFIX``: 'figs/' -> (figs, ''), 'figs/ss_' -> (figs, 'ss_')."""
    if not prefix.strip():
        raise ValueError("--figures is empty: give a folder ending in / or a path prefix, e.g. /tmp/ss/same_state_")
    if prefix.endswith("/") or Path(prefix).is_dir():
        return Path(prefix), ""
    return Path(prefix).parent, Path(prefix).name


class OutputPlan:
    """Files to write, grouped by folder (one :class:`Outputs` each): check every folder, then write."""

    def __init__(self) -> None:
        self.folders: dict[Path, tuple[Outputs, list[str]]] = {}

    def add(self, path: Path, data: bytes, stale: tuple[str, ...] = ()) -> None:
        folder = Path(path).parent
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder: give another path than {path}")
        out, patterns = self.folders.setdefault(folder.resolve(), (Outputs(folder), []))
        out.add(Path(path), data)
        patterns.extend(stale)

    def write(self, source) -> None:
        """Check every folder before writing any (``source``: what the files were made from)."""
        for out, stale in self.folders.values():
            out.check(tuple(stale), source)
        for out, stale in self.folders.values():
            out.write(tuple(stale), source)


def joined_rows(results, also=()) -> pd.DataFrame:
    """The rows of ``results``, then those of each of ``also`` whose ROW_KEY is not already there."""
    frames = [load_rows(results)] + [load_rows(extra) for extra in also]
    frames = [f for f in frames if not f.empty]
    if len(frames) <= 1:
        return frames[0] if frames else load_rows(results)
    rows = pd.concat(frames, ignore_index=True)
    return rows.drop_duplicates(subset=ROW_KEY, keep="first").reset_index(drop=True)


def plan_outputs(args, markdown: Callable[[pd.DataFrame], str]) -> tuple[pd.DataFrame, OutputPlan, list[str]]:
    """(rows, [(Outputs, stale globs)], messages) of the parsed command line ``args``; ``markdown``
    renders the rows' tables (eval.states.tables.report_markdown)."""
    figs = figure_paths(args.figures) if args.figures is not None else None  # a bad prefix fails first
    without = getattr(args, "archive_without", None) or []
    if without and not args.archive:
        raise ValueError("--archive-without needs --archive")
    rows, plan, messages = joined_rows(args.results, getattr(args, "also", [])), OutputPlan(), []
    rows = without_columns(rows, without)  # the tables and figures the archive will give again
    if args.archive:
        if Path(args.archive).resolve() == Path(args.results).resolve():
            raise ValueError(f"--archive {args.archive} is the input itself: give another file")
        files, n = archive_files(args.results, args.archive, without)
        for path, blob in files:
            plan.add(path, blob)
        messages.append(f"{n} rows -> {args.archive}")
    if args.out:
        plan.add(args.out, markdown(rows).encode())
    if (args.figures is not None or args.figure) and rows.empty:
        messages.append(f"no figures: {args.results} holds no same-state rows")
    elif args.figures is not None:
        from eval.states.plots import figures

        folder, prefix = figs
        drawn, skipped = figures(rows)
        stale = tuple(p for name in FIGURE_NAMES for p in (f"{prefix}{name}.png", f"{prefix}{name}_*.png")
                      if not any(d == name or d.startswith(name + "_") for d in drawn))
        for i, (name, data) in enumerate(drawn.items()):
            plan.add(folder / f"{prefix}{name}.png", data, stale if i == 0 else ())
        messages += [f"figure skipped, {why}" for why in skipped]
    if args.figure and not rows.empty:
        from eval.states.plots import summary_png

        plan.add(args.figure, summary_png(rows))
    return rows, plan, messages
