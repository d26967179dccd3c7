"""Method-specific behaviour lives behind the registry: no code outside rheo/methods/ tells methods
apart by comparing a method's name with a literal (it asks the registry what the method reads:
rheo.methods.reads); the one named baseline is eval.states.labels.BASELINE_METHOD."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = "|".join(("rheo", "topk", "static", "chain"))
#: `x.method == "rheo"`, `row["method"] != 'static'`, `args.method == "topk"`, `"rheo" == method`
COMPARISON = re.compile(rf"""method["'\]]*\s*[!=]=\s*["']({NAMES})["']|["']({NAMES})["']\s*[!=]=\s*\w*\.?method""")


def test_no_method_is_told_apart_by_its_name_outside_the_registry():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    found = []
    for name in tracked.stdout.split():
        if not name.startswith(("rheo/", "eval/", "baselines/", "scripts/")) or name.startswith("rheo/methods/"):
            continue
        for number, line in enumerate((ROOT / name).read_text().splitlines(), start=1):
            if COMPARISON.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "ask the registry (rheo.methods.reads) instead:\n" + "\n".join(found)


def test_the_scan_sees_a_comparison():
    assert COMPARISON.search('if config.method == "static":') and COMPARISON.search("rows[rows['method'] != 'rheo']")
    assert not COMPARISON.search('method = "rheo"')
