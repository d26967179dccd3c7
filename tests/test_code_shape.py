"""The shape of the code: short files, short functions, no copied blocks.

Every tracked Python file (tests included) has at most MAX_FILE_LINES lines and no function
longer than MAX_FUNCTION_LINES (decorators and docstring included); pylint's duplicate-code
check, configured in pyproject.toml ([tool.pylint.*]), finds no block shared by two places.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 80
DUPLICATE_CHECKED = ("rheo", "eval", "baselines", "scripts")


def tracked_python_files() -> list[Path]:
    """The *.py files git tracks, plus new ones not ignored (a file about to be committed counts)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"git ls-files failed in {ROOT} ({e}): the shape checks need a git checkout")
    return [ROOT / p for p in out.splitlines() if (ROOT / p).is_file()]


def long_files(paths: list[Path], limit: int = MAX_FILE_LINES) -> list[str]:
    out = []
    for path in paths:
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{path.relative_to(ROOT)}: {n} lines")
    return out


def long_functions(paths: list[Path], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                n = node.end_lineno - first + 1
                if n > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    return out


def test_no_python_file_is_over_the_limit():
    too_long = long_files(tracked_python_files())
    assert not too_long, f"split these by concept (at most {MAX_FILE_LINES} lines a file): {too_long}"


def test_no_function_is_over_the_limit():
    too_long = long_functions(tracked_python_files())
    assert not too_long, f"split these (at most {MAX_FUNCTION_LINES} lines a function): {too_long}"


def test_the_limits_see_what_they_measure(tmp_path):
    path = ROOT / "tests" / "test_code_shape.py"
    assert long_files([path], limit=10) == [f"tests/test_code_shape.py: {len(path.read_text().splitlines())} lines"]
    assert any(" long_functions: " in f for f in long_functions([path], limit=5))
    assert not long_files([path]) and not long_functions([path])


def duplicate_code(cwd: Path, paths) -> subprocess.CompletedProcess:
    """pylint's duplicate-code check on ``paths``, configured by ``cwd``/pyproject.toml."""
    if importlib.util.find_spec("pylint") is None:
        pytest.fail("pylint is not installed: `.venv/bin/pip install -e '.[dev]'` (or `make setup`) installs it")
    cmd = [sys.executable, "-m", "pylint", "--disable=all", "--enable=duplicate-code", "--score=n", *map(str, paths)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_no_duplicate_code():
    out = duplicate_code(ROOT, DUPLICATE_CHECKED)
    found = out.stdout + out.stderr
    assert out.returncode == 0 and "R0801" not in found, (
        "pylint found code shared by two places: move it into one function both call\n" + found[-6000:])


def test_the_duplicate_check_finds_a_copied_block(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    body = "".join(f"    total = total * {i} + len(items)  # step {i}\n" for i in range(6))
    (tmp_path / "a.py").write_text(f"def one(items):\n    total = 0\n{body}    return total\n")
    (tmp_path / "b.py").write_text(f'def two(values):\n    """Another name."""\n    total = 0\n'
                                   f"{body.replace('# step', '# stage')}    return total + 1\n")
    out = duplicate_code(tmp_path, ["a.py", "b.py"])
    assert out.returncode != 0 and "R0801" in out.stdout, out.stdout + out.stderr
