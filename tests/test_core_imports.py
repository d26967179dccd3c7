"""The import graph of ``rheo/``: no cycle, and the mechanisms know nothing of the method registry.

Edges are the module-level imports (``if TYPE_CHECKING:`` blocks and imports inside
functions excluded), parsed with ``ast``. Importing ``a.b.c`` also runs the
``__init__`` of packages ``a.b`` and ``a``, so those are edges too, except for the
packages that contain the importing module (already initialising when it runs).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rheo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level_imports(tree: ast.Module):
    """Import statements run when the module is imported (module body, try/if blocks)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [h for x in node.handlers for h in x.body])


def import_graph() -> dict[str, set[str]]:
    """rheo module -> the rheo modules and packages its import runs."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        targets = set()
        for node in _top_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
                continue
            base = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in files else base)
        edges = set()
        for target in targets:
            if not target.startswith("rheo"):
                continue
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the target and the packages it runs
                prefix = ".".join(parts[:i])
                if prefix in files and not (name == prefix or name.startswith(prefix + ".")):
                    edges.add(prefix)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a list of modules (first == last), or [] if there is none."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_import_graph_of_rheo_has_no_cycle():
    graph = import_graph()
    assert {"rheo.config", "rheo.tree", "rheo.methods.registry", "rheo.methods"} <= set(graph)
    assert "rheo.methods.registry" in graph["rheo.config"] and "rheo.methods" in graph["rheo.config"]
    assert find_cycle(graph) == [], " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_mechanisms_import_neither_the_registry_nor_the_config():
    graph = import_graph()
    for mechanism in ("rheo.tree", "rheo.verify", "rheo.candidates", "rheo.probs", "rheo.expected"):
        assert not {"rheo.config", "rheo.methods", "rheo.methods.registry"} & graph[mechanism], mechanism
    code = "import rheo.tree, rheo.verify, rheo.expected, sys; print([m for m in sys.modules if m.startswith('rheo.')])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT).stdout
    assert "rheo.methods" not in loaded and "rheo.config" not in loaded and "rheo.tree" in loaded


def test_the_configuration_is_what_the_mechanisms_read():
    """rheo.spec.Spec (what tree, verify and the methods annotate with) names SpecConfig's members."""
    import dataclasses

    from rheo.config import SpecConfig
    from rheo.spec import Spec
    read = set(Spec.__annotations__) | {n for n, v in vars(Spec).items() if isinstance(v, property)}
    assert read == {f.name for f in dataclasses.fields(SpecConfig)} | {"greedy"}
    assert all(hasattr(SpecConfig(), name) for name in read)
