"""The import graph of the whole project (``rheo/``, ``eval/``, ``baselines/``, ``scripts/``) has no cycle.

Every ``import`` and ``from ... import`` statement counts, wherever it stands: at module
level, inside functions and classes, under ``if TYPE_CHECKING:`` and in ``try`` blocks.
A circle that only closes through a function-level or a type-only import still ties the
modules on it together (none can be read, moved or tested without the others), so it
counts like any other. Edges run between modules of the project; importing ``a.b.c``
also runs the ``__init__`` of packages ``a.b`` and ``a``, so those are edges too, except
for the packages that contain the importing module. ``rheo/`` alone, at import time, is
checked by ``test_core_imports``.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("rheo", "eval", "baselines", "scripts")


def tracked_sources(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> list[Path]:
    """The tracked ``.py`` files under ``folders`` (every ``.py`` there outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *folders], cwd=root, capture_output=True,
                             check=True, text=True).stdout
        paths = [root / p for p in out.split("\0") if p.endswith(".py")]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for folder in folders for p in (root / folder).rglob("*.py")]
    return sorted(p for p in paths if p.is_file())


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, name: str, is_pkg: bool, modules: set[str]) -> set[str]:
    """The dotted names one import statement of module ``name`` loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:  # relative import
        anchor = name.split(".") if is_pkg else name.split(".")[:-1]
        base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}


def import_graph(paths: list[Path] | None = None, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project modules (and the packages on their way) that any of its imports loads."""
    files = {module_name(p, root): p for p in (tracked_sources(root) if paths is None else paths)}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(node, name, is_pkg, modules):
                parts = target.split(".")
                for i in range(1, len(parts) + 1):  # the target and the packages its import runs
                    prefix = ".".join(parts[:i])
                    if prefix in modules and not (name == prefix or name.startswith(prefix + ".")):
                        edges.add(prefix)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (or a module importing itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; the project is far below the recursion limit
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _describe(group: list[str], graph: dict[str, set[str]]) -> str:
    ties = "; ".join(f"{a} -> {b}" for a in group for b in sorted(graph[a]) if b in group)
    return f"{', '.join(group)} ({ties})"


def test_the_project_has_no_import_cycle():
    graph = import_graph()
    assert {"rheo.config", "eval.measure.realized", "baselines", "scripts.make_tables"} <= set(graph)
    found = cycles(graph)
    assert found == [], "import cycles:\n" + "\n".join(_describe(g, graph) for g in found)


def test_imports_in_functions_and_type_checking_blocks_count(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("class C:\n    def g(self):\n        import pkg.a\n")
    (pkg / "d.py").write_text('"""import pkg.a"""\nimport os\n')
    graph = import_graph(sorted(pkg.glob("*.py")), root=tmp_path)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert "pkg.a -> pkg.b" in _describe(cycles(graph)[0], graph)


def test_a_package_init_is_on_the_way_of_its_modules():
    assert cycles({"p": {"p.x"}, "p.x": set(), "q": {"p"}}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"c"}}) == [["a", "b"], ["c"]]


# The harness's packages from the top down: each imports only those after it (docs/architecture.md).
EVAL_LAYERS = ("run", "plan", "device", "measure", "states", "conf", "report", "prompts", "store")


def layer_breaches(graph: dict[str, set[str]], layers: tuple[str, ...] = EVAL_LAYERS) -> list[str]:
    """Imports of the harness that run from a package to one listed before it (or to an unlisted one)."""
    def layer(module: str):
        parts = module.split(".")
        return parts[1] if parts[0] == "eval" and len(parts) > 1 else None

    breaches = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            la, lb = layer(a), layer(b)
            if la is None or lb is None or la == lb:
                continue
            if la not in layers or lb not in layers or layers.index(la) > layers.index(lb):
                breaches.append(f"{a} -> {b}")
    return breaches


def test_the_harness_packages_import_downwards_only():
    graph = import_graph()
    packages = {m.split(".")[1] for m in graph if m.startswith("eval.") and m.count(".") >= 1}
    assert packages <= set(EVAL_LAYERS), f"place the new package in EVAL_LAYERS: {packages - set(EVAL_LAYERS)}"
    assert layer_breaches(graph) == []


def test_an_upward_import_of_the_harness_is_caught():
    graph = {"eval.store.keys": {"eval.report.markdown"}, "eval.report.markdown": set(),
             "eval.measure.loop": {"eval.store.keys"}, "eval.extra.x": {"eval.store.keys"}}
    assert layer_breaches(graph) == ["eval.extra.x -> eval.store.keys", "eval.store.keys -> eval.report.markdown"]
