"""The resume policy of every kind of result shard (``eval.run`` rows, same-state rows).

A stored shard is reused only when it is a readable file of the expected rows for its place
(:func:`eval.store.storage.load_existing`: anything else is reported, deleted and recomputed) and
was made from the item's current text (:func:`same_text`). A Ctrl-C ends with one line
saying what is stored (:func:`interrupted_line`), a full disk with the file and the count.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from eval.store.keys import SUITE_FILES

log = logging.getLogger("eval.store.resume")


class OtherPromptsError(ValueError):
    """A stored row of a user's prompt set was made from other text than the item has now."""


def same_text(row: Optional[dict], item, path: Path) -> bool:
    """False (with a warning: the row will be recomputed) when ``row`` was made from other text of
    ``item`` than it has now, for the six benchmark suites (their text was corrected); rows stored
    before ``turns_sha`` existed cannot be checked (True). For a user's prompt set the run is refused
    (:class:`OtherPromptsError`): another file under the same suite name would replace its rows."""
    if row is None:
        return False
    if row.get("turns_sha") not in (None, item.turns_sha):
        if item.suite not in SUITE_FILES:
            raise OtherPromptsError(
                f"{path} holds suite {item.suite!r} item {item.item_id} made from other text than this prompt set "
                f"has (another file under the same suite name?): nothing was replaced. Give this prompt set its own "
                f"suite name (dataset.suites=[mine]) or output_dir, or delete that folder's rows to recompute them")
        log.warning("%s was made from other text of %s item %s (turns hash %s, now %s): recomputing it",
                    path, item.suite, item.item_id, row["turns_sha"], item.turns_sha)
        return False
    return True


def interrupted_line(stored: int, ok: int, failed: int, found: int, unit: str = "row(s)") -> str:
    """The one line a run ends with on Ctrl-C."""
    return (f"interrupted: {stored} {unit} stored by this run ({ok} ok, {failed} failed) and {found} found "
            f"already stored; rerun the same command to resume")


def disk_full_line(error: Exception, stored: int, unit: str = "row(s)") -> str:
    """The one line a run ends with when a shard cannot be written (full disk, quota, read-only)."""
    return f"{error}; {stored} {unit} stored by this run before it: free space there and rerun the same command to resume"
