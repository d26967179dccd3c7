"""docs/library.md names every SpecConfig field with its allowed values, read against the dataclass:
a new field, a new proxy or a new method that the page does not list fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rheo.config import PROXIES, RANKS, VERIFY_ORDERS, SpecConfig
from rheo.methods import method_names

PAGE = Path(__file__).resolve().parents[1] / "docs" / "library.md"
CHOICES = {"proxy": PROXIES, "rank": RANKS, "verify_order": VERIFY_ORDERS, "method": tuple(method_names())}


def _rows() -> dict[str, str]:
    """field -> its values cell, from the table whose header is | field | values | what it sets |."""
    text = PAGE.read_text()
    table = text[text.index("| field | values | what it sets |"):].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def test_every_specconfig_field_is_listed_with_its_values():
    rows = _rows()
    fields = [f.name for f in dataclasses.fields(SpecConfig)]
    assert list(rows) == fields, f"docs/library.md lists {list(rows)}, SpecConfig has {fields}"
    assert all(CHOICES.values())
    for name, allowed in CHOICES.items():
        listed = set(re.findall(r"`([^`]+)`", rows[name]))
        assert set(allowed) <= listed, f"{name}: docs/library.md lacks {sorted(set(allowed) - listed)}"


def test_the_listed_defaults_are_the_dataclass_defaults():
    rows = _rows()
    for f in dataclasses.fields(SpecConfig):
        shown = re.search(r"\((`?)([^()`]+)\1\)$", rows[f.name])
        if shown:
            text = shown.group(2)
            listed = float(text) if isinstance(f.default, float) else text
            assert listed == (f.default if isinstance(f.default, float) else str(f.default)), (f.name, text, f.default)
