"""Every file the project writes goes through one door, :mod:`rheo.io`.

The walk reads each tracked ``.py`` under ``rheo/``, ``eval/``, ``baselines/``, ``scripts/`` and
``custom_generate/`` with ``ast`` and refuses any other write: ``open``/``Path.open``/``gzip.open`` with a
write mode, ``os.open`` with a write flag, ``write_text``, ``write_bytes``, ``touch``, ``mkdir``,
``os.makedirs``, ``os.rename``/``replace``, links, ``shutil`` copies and moves, and a serializer
(``to_parquet``, ``to_csv``, ``savefig``, ``save``, ``savez``, ``save_pretrained``, ``pq.write_table``,
``json.dump``, ...) given a path. A serializer may write into memory (a name bound to ``io.BytesIO()``,
``io.StringIO()``, ``pa.BufferOutputStream()``) or into the stream the door hands it (a lambda's parameter,
a name bound by ``with atomic_dir(...) as tmp``); the bytes then go through the door. :data:`ALLOWED`, the
one allow-list, names the functions that write otherwise, and why. :func:`rheo.io.publish_bytes`, the one
write into the committed evidence, has one caller.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_import_graph import ROOT, tracked_sources

FOLDERS = ("rheo", "eval", "baselines", "scripts", "custom_generate")
DOOR = Path("rheo/io.py")
#: (file, function) -> why it writes outside the door: the whole allow-list
ALLOWED = {
    ("rheo/training/features.py", "reserve"): "reserves the memory-mapped feature cache in place (os.open + "
                                              "fallocate); the cache folder itself is made through the door",
    ("rheo/cli.py", "quiet_pipe_end"): "points stdout at /dev/null after the reader of a pipe went away",
    ("eval/store/export_out.py", "write_out"): "an export into a stream the user names (/dev/stdout, a pipe, "
                                               "a device): opened, never replaced; a file goes through the door",
    ("eval/store/claims.py", "_fd"): "the per-configuration lock file: a POSIX record lock needs an open descriptor "
                                     "that lives with the job (never replaced, holds no data); its folder is the "
                                     "run's output_dir, which the door checked before the run made anything",
}
#: the one caller of the one write into the committed evidence
PUBLISHER = (Path("eval/store/publish.py"), "publish_bytes")
HOW = ("route it through the one door, rheo/io.py: atomic_write_bytes/atomic_write_text(path, data) for bytes "
       "or text made in memory (to_parquet(io.BytesIO()), savefig(buf), json.dumps), atomic_write(path, lambda "
       "f: ...) for a serializer that takes a stream, make_dir(path) for a folder, open_append(path) for a log, "
       "copy_path(src, dst) for a copy, atomic_dir(dest) for a folder of files; only if that is impossible, add "
       "(file, function) with the reason to ALLOWED in tests/test_write_door.py")

WRITE_METHODS = {"write_text", "write_bytes", "touch", "mkdir", "symlink_to", "hardlink_to", "link_to"}
MODULE_WRITES = {("os", "makedirs"), ("os", "mkdir"), ("os", "rename"), ("os", "renames"), ("os", "replace"),
                 ("os", "link"), ("os", "symlink"), ("os", "truncate"), ("os", "mkfifo"), ("shutil", "copy"),
                 ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree"), ("shutil", "move")}
OPEN_MODULES = {"io", "gzip", "bz2", "lzma", "codecs", "tarfile", "zipfile"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
#: serializer -> (position, keywords) of the argument it writes to, by receiver where that decides it
SINKS = {"to_parquet": (0, ("path",)), "to_csv": (0, ("path_or_buf",)), "to_json": (0, ("path_or_buf",)),
         "to_pickle": (0, ("path",)), "to_feather": (0, ("path",)), "to_excel": (0, ("excel_writer",)),
         "savefig": (0, ("fname",)), "savez": (0, ("file",)), "savez_compressed": (0, ("file",)),
         "save_pretrained": (0, ("save_directory",)), "save_file": (1, ("filename",)),
         "write_table": (1, ("where",)), "dump": (1, ("fp", "stream", "file", "f")),
         "safe_dump": (1, ("stream",)), "copyfileobj": (1, ("fdst",))}
MEMORY = {"BytesIO", "StringIO", "BufferOutputStream"}
DOOR_STREAMS = {"atomic_dir", "open_append"}


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _arg(call: ast.Call, pos: int, keywords: tuple[str, ...]):
    for kw in call.keywords:
        if kw.arg in keywords:
            return kw.value
    return call.args[pos] if len(call.args) > pos else None


def _safe_sinks(tree: ast.AST) -> set[str]:
    """Names bound to memory or to a stream the door handed out, anywhere in the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            names |= {a.arg for a in node.args.args}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _name(node.value.func) in MEMORY:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call) \
                and _name(node.context_expr.func) in DOOR_STREAMS | MEMORY and isinstance(node.optional_vars, ast.Name):
            names.add(node.optional_vars.id)
    return names


def _is_safe_sink(node, safe: set[str]) -> bool:
    return node is None or (isinstance(node, ast.Name) and node.id in safe) or \
        (isinstance(node, ast.Call) and _name(node.func) in MEMORY)


def _mode(call: ast.Call, pos: int):
    mode = _arg(call, pos, ("mode",))
    if mode is None:
        return "r"
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "?"


def write_calls(source: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function, what) of every write in ``source``."""
    tree = ast.parse(source)
    safe, found = _safe_sinks(tree), []
    owner = {}
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        for node in ast.walk(fn):  # inner functions are walked later and overwrite: the innermost wins
            owner[id(node)] = fn.name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, what = node.func, None
        name = _name(func)
        base = _name(func.value) if isinstance(func, ast.Attribute) else ""
        if name == "open" and base == "os":
            flags = {_name(n) for n in ast.walk(node.args[1])} if len(node.args) > 1 else set()
            what = "os.open with a write flag" if flags & WRITE_FLAGS else None
        elif name == "open" and (isinstance(func, ast.Name) or base in OPEN_MODULES):
            mode = _mode(node, 1)
            what = f"open(..., {mode!r})" if set(mode) & set("wax+?") else None
        elif name == "open":  # Path.open(mode); another object's open(thing) is no file mode
            first = node.args[0] if node.args else None
            textual = first is None or (isinstance(first, ast.Constant) and isinstance(first.value, str))
            mode = _mode(node, 0) if textual else "r"
            what = f".open({mode!r})" if set(mode) & set("wax+?") else None
        elif isinstance(func, ast.Attribute) and name in WRITE_METHODS:
            what = f".{name}()"
        elif (base, name) in MODULE_WRITES:
            what = f"{base}.{name}()"
        elif name == "save" and isinstance(func, ast.Attribute):
            sink = _arg(node, 1, ("f",)) if base == "torch" else _arg(node, 0, ("file", "fp"))
            what = None if _is_safe_sink(sink, safe) else f"{base or '?'}.save() into a path"
        elif name in SINKS and (name != "write_table" or base in ("pq", "parquet")) \
                and (name not in ("dump", "safe_dump") or base in ("json", "pickle", "yaml", "torch")):
            pos, keywords = SINKS[name]
            what = None if _is_safe_sink(_arg(node, pos, keywords), safe) else f".{name}() into a path"
        if what:
            found.append((node.lineno, owner.get(id(node), "<module>"), what))
    return found


def test_every_write_goes_through_the_door():
    bad = []
    for path in tracked_sources(ROOT, FOLDERS):
        rel = path.relative_to(ROOT)
        if rel == DOOR:
            continue
        for line, fn, what in write_calls(path.read_text()):
            if (str(rel), fn) not in ALLOWED:
                bad.append(f"{rel}:{line} ({fn}): {what}")
    assert not bad, f"{len(bad)} write(s) outside the door: {HOW}\n" + "\n".join(bad)


def test_the_allow_list_is_still_needed():
    """An entry whose function no longer writes outside the door is dropped, so the list stays the truth."""
    seen = set()
    for path in tracked_sources(ROOT, FOLDERS):
        rel = str(path.relative_to(ROOT))
        seen |= {(rel, fn) for _, fn, _ in write_calls(path.read_text())}
    assert set(ALLOWED) <= seen, f"no longer writing outside the door: {sorted(set(ALLOWED) - seen)}"


def test_only_publish_writes_into_the_committed_evidence():
    callers = sorted(str(p.relative_to(ROOT)) for p in tracked_sources(ROOT, FOLDERS)
                     if PUBLISHER[1] in p.read_text() and p.relative_to(ROOT) != DOOR)
    assert callers == [str(PUBLISHER[0])]


@pytest.mark.parametrize("code, line", [
    ("Path('x').write_text('a')", 1), ("open(p, 'w')", 1), ("open(p)", None), ("open(p, mode)", 1),
    ("p.open('ab')", 1), ("Image.open(buf)", None), ("m.open(root)", None), ("gzip.open(p, 'wt')", 1),
    ("os.open(p, os.O_RDWR | os.O_CREAT)", 1),
    ("df.to_parquet(path)", 1), ("df.to_parquet(io.BytesIO())", None), ("buf = io.BytesIO()\ndf.to_csv(buf)", None),
    ("df.to_csv(index=False)", None), ("atomic_write(p, lambda f: torch.save(s, f))", None), ("torch.save(s, p)", 1),
    ("json.dump(x, f)", 1), ("json.dumps(x)", None), ("shutil.copyfile(a, b)", 1), ("fig.savefig(p)", 1),
    ("pq.write_table(t, p)", 1), ("storage.write_table(p, t)", None), ("s.mkdir(parents=True)", 1),
    ("with atomic_dir(d) as tmp:\n    m.save_pretrained(tmp)", None), ("m.save_pretrained(d)", 1),
    ("df.rename(columns={})", None), ("text.replace('a', 'b')", None), ("os.replace(a, b)", 1),
])
def test_the_walk_sees_writes(code, line):
    assert [ln for ln, _, _ in write_calls(code)][:1] == ([line] if line else [])
