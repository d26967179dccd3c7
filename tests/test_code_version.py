"""Rows record the version of the decoding code (eval.store.code_version); a resume recomputes the rows of
another version and says so, unless keep_stale_rows=true; rows of the same version, and rows stored
before the column (unknown version: committed evidence), are reused."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest

import eval.measure.rows as rows_module
import eval.measure.same_states as same_states_module
import eval.run as entry
import eval.store.code_version as cv
from eval.conf.compose import compose_config
from eval.store import storage
from eval.store.state_archive import load_rows
from eval.store.storage import load_results

TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=5", "method.k=4", "method.depth=2",
        "method.tree_size=6", "num_threads=1", "progress=false", "warmup=false", "baseline=false"]
OTHER = "0123456789ab"


def _cfg(tmp_path, *extra):
    return compose_config(TINY + [f"output_dir={tmp_path / 'out'}", *extra])


def _code_is(monkeypatch, version: str) -> None:
    """The decoding code as if edited: the version rows are stamped with and compared against."""
    for module in (cv, rows_module, same_states_module):
        monkeypatch.setattr(module, "code_version", lambda root=None, v=version: v)


def _no_load(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("model loaded although every row was reusable")
    monkeypatch.setattr("eval.measure.loop.load_pair", forbidden)


def test_the_version_hashes_the_listed_code_and_not_its_comments(tmp_path):
    (tmp_path / "rheo").mkdir()
    code = tmp_path / "rheo" / "decode.py"
    code.write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "README.md").write_text("docs are not listed\n")
    first = cv.code_version.__wrapped__(tmp_path)
    assert len(first) == 12 and cv.decoding_files(tmp_path) == [code]
    code.write_text("# a comment\ndef f(x):\n\n    return x + 1  # same code\n")
    (tmp_path / "README.md").write_text("changed\n")
    assert cv.code_version.__wrapped__(tmp_path) == first
    code.write_text("def f(x):\n    return x + 2\n")
    assert cv.code_version.__wrapped__(tmp_path) != first
    assert all(p.suffix == ".py" and p.is_file() for p in cv.decoding_files())
    assert {"rheo/decode.py", "rheo/verify.py", "rheo/methods/rheo.py", "eval/measure/realized.py"} <= {
        p.relative_to(cv.REPO_ROOT).as_posix() for p in cv.decoding_files()}


def test_a_resume_after_a_change_to_the_decoding_code_recomputes_and_says_so(tmp_path, monkeypatch, caplog):
    cfg, real = _cfg(tmp_path), cv.code_version()
    assert entry.run(cfg).computed == 1
    assert load_results(tmp_path / "out")["code_version"].tolist() == [real]
    with monkeypatch.context() as same:  # the same code: skipped, nothing loaded
        _no_load(same)
        again = entry.run(cfg)
        assert (again.computed, again.skipped) == (0, 1)
    _code_is(monkeypatch, OTHER)
    with caplog.at_level(logging.WARNING, "eval.store.code_version"):
        changed = entry.run(cfg)
    assert (changed.computed, changed.skipped) == (1, 0)
    assert load_results(tmp_path / "out")["code_version"].tolist() == [OTHER]
    assert (f"1 stored row(s) were made by another version of the decoding code ({real}; "
            f"now {OTHER}): recomputing them (keep_stale_rows=true keeps them)") in caplog.text


def test_keep_stale_rows_keeps_them_and_says_so(tmp_path, monkeypatch, caplog):
    entry.run(_cfg(tmp_path))
    _code_is(monkeypatch, OTHER)
    _no_load(monkeypatch)
    with caplog.at_level(logging.WARNING, "eval.store.code_version"):
        kept = entry.run(_cfg(tmp_path, "keep_stale_rows=true"))
    assert (kept.computed, kept.skipped) == (0, 1)
    assert "kept as asked (keep_stale_rows=true)" in caplog.text


def test_a_row_older_than_the_column_is_of_unknown_version_and_kept(tmp_path, monkeypatch, caplog):
    entry.run(_cfg(tmp_path))
    [path] = storage.iter_shards(tmp_path / "out")
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["code_version"]), path)  # as written before the column
    assert load_results(tmp_path / "out")["code_version"].isna().all()
    _code_is(monkeypatch, OTHER)
    _no_load(monkeypatch)
    with caplog.at_level(logging.INFO, "eval.store.code_version"):
        assert entry.run(_cfg(tmp_path)).skipped == 1
    assert "1 stored row(s) predate the code_version column (unknown version): kept" in caplog.text


def test_a_same_state_resume_after_a_change_recomputes(tmp_path, monkeypatch):
    tree = "k:4,depth:2,tree_size:6"
    cfg = compose_config(["measure=same_state", "method=topk", *TINY, f"output_dir={tmp_path / 'ss'}",
                          f"compare=[{{name:topk,{tree}}},{{name:rheo,m:1,{tree}}}]"])
    assert entry.run(cfg).computed == 1
    assert set(load_rows(tmp_path / "ss")["code_version"]) == {cv.code_version()}
    with monkeypatch.context() as same:
        _no_load(same)
        assert entry.run(cfg).skipped == 1
    _code_is(monkeypatch, OTHER)
    again = entry.run(cfg)
    assert (again.computed, again.skipped) == (1, 0)
    assert set(load_rows(tmp_path / "ss")["code_version"]) == {OTHER}
    assert set(load_rows(tmp_path / "ss", driver=True)["code_version"]) == {OTHER}


def test_the_version_is_not_in_the_config_hash():
    from eval.store.keys import EVERY_KEY_FIELDS

    assert "code_version" not in EVERY_KEY_FIELDS and "keep_stale_rows" not in EVERY_KEY_FIELDS
    assert "code_version" in storage.OPTIONAL_COLUMNS  # rows and archives older than it read as None


@pytest.mark.parametrize("version,reused", [(None, True), (float("nan"), True), ("same", True), ("older", False)])
def test_the_policy(version, reused, tmp_path):
    check = cv.VersionCheck(current="same")
    assert check.reusable(version, tmp_path / "x") is reused
    assert cv.VersionCheck(keep_stale=True, current="same").reusable(version, tmp_path / "x") is True


# ---------------------------------------------------------------- the list against the import graph
#: the modules a harness generation starts from: the run loop, its two measurements, the model factory
DECODING_ENTRIES = ("eval.measure.loop", "eval.measure.realized", "eval.measure.same_states", "eval.measure.pairs")
PACKAGES = ("rheo", "eval", "baselines")


def _module_file(name: str):
    path = cv.REPO_ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported(path, name: str):
    """The project modules one file imports, at the top or inside a function (a lazy import counts):
    ``from package import name`` is the submodule ``name`` when there is one, else the module that
    defines ``name`` (a package's lazy re-export resolves to where it lives), plus every parent package."""
    import ast
    import importlib

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            pairs = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            pairs = [(base, alias.name) for alias in node.names]
        else:
            continue
        for base, member in pairs:
            if base.split(".")[0] not in PACKAGES:
                continue
            parts = base.split(".")
            yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))
            if member and _module_file(f"{base}.{member}"):
                yield f"{base}.{member}"
            elif member:
                defined = getattr(getattr(importlib.import_module(base), member, None), "__module__", None)
                if defined and defined.split(".")[0] in PACKAGES:
                    yield defined


def _decoding_path() -> dict:
    """Every project file the decoding path imports (module name -> file), by walking the imports."""
    seen, todo = {}, list(DECODING_ENTRIES)
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_imported(path, name))
    return seen


def test_every_module_the_decoding_imports_is_hashed_or_said_to_decide_no_row():
    reached = {p.relative_to(cv.REPO_ROOT).as_posix() for p in _decoding_path().values()}
    hashed = {p.relative_to(cv.REPO_ROOT).as_posix() for p in cv.decoding_files()}
    outside = {p.relative_to(cv.REPO_ROOT).as_posix() for pattern in cv.OUTSIDE for p in cv.REPO_ROOT.glob(pattern)}
    # the walk reaches the prompt construction through the run loop's and the pair's imports
    assert {"eval/prompts/suites.py", "rheo/models/catalog.py", "rheo/models/protocol.py",
            "rheo/models/loading.py", "rheo/decode.py"} <= reached
    unplaced = sorted(reached - hashed - outside)
    assert not unplaced, (f"modules on the decoding path in neither eval.store.code_version.DECODING_FILES nor "
                          f"OUTSIDE: {unplaced}")
    assert not hashed & outside, sorted(hashed & outside)


def test_the_prompt_construction_is_hashed(tmp_path):
    """An edit that changes every prompt changes the version (a rerun recomputes instead of pooling)."""
    for rel in ("eval/prompts/suites.py", "rheo/models/catalog.py", "rheo/models/protocol.py"):
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("SYSTEM = 'a'\n")
    first = cv.code_version.__wrapped__(tmp_path)
    (tmp_path / "rheo/models/catalog.py").write_text("SYSTEM = 'b'\n")
    assert cv.code_version.__wrapped__(tmp_path) != first
