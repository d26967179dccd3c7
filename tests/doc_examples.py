"""The Python examples of the README and docs/ that show what they print (a `# -> ...` comment,
possibly `# on <pair> -> ...`), for the tests that run them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLAIM = re.compile(r"^#[^\n]*?-> (.*)$", re.M)
#: an example for a machine of the reader's own (local folders of their weights): shown, not run
NOT_RUNNABLE = ("~/", "path/to", "/models/")


@dataclass(frozen=True)
class Example:
    doc: Path
    index: int  # its place among the doc's Python blocks
    code: str
    claim: str  # what the doc says it prints ("..." stands for any text)

    @property
    def name(self) -> str:
        return f"{self.doc.name}#{self.index}"

    def code_only(self) -> str:
        return "\n".join(line for line in self.code.splitlines() if not line.lstrip().startswith("#")).strip()

    def matches(self, printed: str) -> bool:
        pattern = ".*?".join(re.escape(part.strip()) for part in self.claim.split("..."))
        return re.fullmatch(pattern, printed.strip(), flags=re.S) is not None


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)


def runnable(code: str) -> bool:
    return not any(mark in code for mark in NOT_RUNNABLE)


def examples(docs: list[Path] = DOCS) -> list[Example]:
    """Every Python block that shows its printed output."""
    found = []
    for doc in docs:
        for i, code in enumerate(python_blocks(doc)):
            claim = CLAIM.search(code)
            if claim:
                found.append(Example(doc, i, code, claim.group(1).strip()))
    return found


def context(example: Example) -> list[str]:
    """The doc's runnable blocks before ``example``, run first in the same namespace (as a reader
    following the page would)."""
    return [code for code in python_blocks(example.doc)[:example.index] if runnable(code)]
