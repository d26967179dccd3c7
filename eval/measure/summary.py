"""What a run did and where its rows went: the summary of ``eval.run`` and the lines both harness
measurements (``measure=realized``, ``measure=same_state``) end with, naming the rows' folder and the command that
makes tables from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rheo.paths import program, shown


@dataclass
class RunSummary:
    computed: int = 0  # rows generated and stored with status ok
    failed: int = 0  # rows stored with status failed (same-state: units that raised, nothing stored)
    skipped: int = 0  # rows found already done
    rows: int = 0  # same-state rows written (computed counts (item, turn)s there)
    config_hashes: dict = field(default_factory=dict)  # method -> config_hash
    failed_by_method: dict = field(default_factory=dict)  # method -> rows stored as failed in this run
    attempted_by_method: dict = field(default_factory=dict)  # method -> rows generated in this run
    first_error: Optional[str] = None  # the first failed row's error (first line)

    def attempt(self, method: str, error: Optional[str] = None) -> None:
        """Count one unit of work ``method`` tried in this run; ``error``: its first line when it failed."""
        self.attempted_by_method[method] = self.attempted_by_method.get(method, 0) + 1
        self.failed_by_method[method] = self.failed_by_method.get(method, 0) + (error is not None)
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or error

    def failure_report(self) -> str:
        """'' when nothing failed, else one line per method that had failures."""
        return "; ".join(f"{m}: {n} of {self.attempted_by_method.get(m, n)} rows failed"
                         for m, n in self.failed_by_method.items() if n)


def tables_folder(output_dir: Path | str) -> Path:
    """Where a run's tables go: next to a rows folder named ``runs`` (outputs/runs -> outputs/tables,
    outputs/smoke/runs -> outputs/smoke/tables, as ``make tables`` and ``make smoke`` write them),
    else inside it."""
    root = Path(output_dir)
    return root.parent / "tables" if root.name == "runs" else root / "tables"


def rows_went(output_dir: Path | str, model: str, hashes: dict[str, str]) -> str:
    """Two lines after an ``eval.run``: the folders its rows are in, and the tables command for them
    (as printed it runs from the working directory: rheo.paths.program)."""
    root = Path(output_dir)
    folders = ", ".join(f"{method} {shown(root / model / chash)}" for method, chash in hashes.items())
    return (f"rows: {folders}\n"
            f"tables: {program('rheo')} tables --results {shown(root)} --out {shown(tables_folder(root))} --no-theory")


def same_state_rows_went(output_dir: Path | str, model: str) -> str:
    """Two lines after a same-state run: the rows' folder and the tables command for them."""
    return (f"rows: {shown(Path(output_dir) / model)} (a folder per driver hash, in it one per compared method)\n"
            f"tables: {program('python')} -m eval.states.tables {shown(output_dir)}")
