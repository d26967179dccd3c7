"""Fill the generated blocks of README.md and docs/*.md from the committed result tables.

A block is written as

    <!-- table: results/tables/main.md 1 -->
    ...   (replaced by the 1st Markdown table of that file)
    <!-- /table -->

so every number such a block shows is the number a committed table holds. ``--check`` changes
nothing and exits 1 naming each stale block (the docs test runs it).

    python scripts/make_docs.py            # rewrite the blocks
    python scripts/make_docs.py --check    # verify them
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import List

from rheo.cli import ArgumentParser, run_main
from rheo.io import atomic_write_text
from rheo.paths import REPO_ROOT as ROOT

BLOCK = re.compile(r"(<!-- table: (?P<src>\S+) (?P<n>\d+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def doc_files(root: Path = ROOT) -> List[Path]:
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def markdown_tables(text: str) -> List[str]:
    """The Markdown tables of ``text`` (runs of lines starting with '|'), in order."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append("\n".join(current) + "\n")
            current = []
    if current:
        tables.append("\n".join(current) + "\n")
    return tables


def render(text: str, root: Path = ROOT) -> str:
    """``text`` with every generated block refilled from its source table."""

    def fill(m: re.Match) -> str:
        src, n = root / m.group("src"), int(m.group("n"))
        if not src.is_file():
            raise SystemExit(f"{m.group('src')} does not exist (named by a generated block): run make tables")
        tables = markdown_tables(src.read_text())
        if not 1 <= n <= len(tables):
            raise SystemExit(f"{m.group('src')} has {len(tables)} tables, a block asks for table {n}: fix the block")
        return m.group(1) + tables[n - 1] + m.group(5)

    return BLOCK.sub(fill, text)


def main(argv: List[str] | None = None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs from its table; write nothing")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose README.md and docs/ to fill")
    args = ap.parse_args(argv)
    stale = []
    if not (args.root / "README.md").is_file():
        raise SystemExit(f"--root {args.root}: no README.md there")
    for path in doc_files(args.root):
        text = path.read_text()
        new = render(text, args.root)
        if new != text:
            stale.append(path.relative_to(args.root))
            if not args.check:
                atomic_write_text(path, new)
    if args.check and stale:
        print(f"make_docs: stale generated tables in {', '.join(map(str, stale))}: run `make docs`", file=sys.stderr)
        return 1
    if not args.check:
        print(f"make_docs: {len(stale)} file(s) rewritten")
    return 0


if __name__ == "__main__":
    run_main(main)
