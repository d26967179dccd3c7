"""Source-tree invariants: each shared fact has one definition, and the files docstrings name exist.

The scans fail as soon as a second copy of a pattern appears outside its one home.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("rheo", "eval", "baselines", "scripts") for p in (ROOT / d).rglob("*.py"))


def _grep(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return sorted(str(p.relative_to(ROOT)) for p in SOURCES if rx.search(p.read_text()))


def test_atomic_writes_live_in_one_helper():
    assert _grep(r"os\.replace\(|os\.rename\(|\.replace\((tmp|path)\b|mkdtemp\(") == ["rheo/io.py"]


def test_dtype_map_is_defined_once():
    assert _grep(r"\"bfloat16\"\s*:\s*torch\.bfloat16") == ["rheo/placement.py"]


def test_model_names_are_listed_once():
    assert _grep(r"\"r1_distill_llama_8b\"") == ["rheo/models/catalog.py"]


def test_eagle3_feature_layers_are_defined_once():
    assert _grep(r"//\s*2\]|\[\s*n\s*-\s*3\]|num_layers\s*//\s*2") == ["rheo/models/hf_target.py"]


def test_docstring_paths_exist():
    """Every `rheo/...py` or `tests/...py` a module docstring points at exists."""
    missing = []
    for path in SOURCES:
        for ref in re.findall(r"\b((?:rheo|tests|eval|scripts|baselines)/[\w/]+\.py)\b", path.read_text()):
            if not (ROOT / ref).exists():
                missing.append(f"{path.relative_to(ROOT)} -> {ref}")
    assert not missing
