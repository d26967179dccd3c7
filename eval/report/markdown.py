"""Markdown tables: the one writer of every table the project prints or commits (``results/tables/``,
the summaries of the scripts and device checks), so that all of them share one layout::

    | a | b |
    |---|---|
    | 1 | 2 |
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

#: a cell left blank, written ``| |`` (under a total row's unused columns); an empty string is ``|  |``
BLANK = type("Blank", (), {"__repr__": lambda self: "BLANK"})()


def markdown_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """The header line, the ``|---|`` separator and one line per row, joined by newlines (no final one).
    Each cell is written as an f-string writes it, :data:`BLANK` as a blank cell."""
    def line(cells) -> str:
        return "|" + "|".join(" " if c is BLANK else f" {c} " for c in cells) + "|"
    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|"] + [line(r) for r in rows])


def frame_markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    """A DataFrame as a Markdown table (floats rounded to ``digits``; NaN and None as ``-``)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.{digits}f}"
        return "-" if v is None else str(v)
    return markdown_table([str(c) for c in frame.columns], [[cell(v) for v in r] for r in frame.itertuples(index=False)])


def section(title: str, caption: str, blocks: Sequence[str]) -> Optional[str]:
    """A report section: '## title', its caption and its blocks (a heading and a table each), or None
    without blocks (a builder whose rows are absent)."""
    if not blocks:
        return None
    return f"## {title}\n\n{caption}\n\n" + "\n\n".join(blocks) + "\n"
