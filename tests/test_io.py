"""rheo.io: a write is whole or absent, and only a dead local writer's leftovers are removed."""

from __future__ import annotations

import os
import socket

import pytest

from rheo.io import TMP_PREFIX, atomic_dir, atomic_write, atomic_write_text, remove_stale_tmp


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path):
    target = atomic_write_text(tmp_path / "a.txt", "old")

    def crash(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, crash)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_atomic_dir_appears_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "cache"
    with pytest.raises(RuntimeError):
        with atomic_dir(dest) as tmp:
            (tmp / "x").write_text("1")
            raise RuntimeError("killed")
    assert not dest.exists() and not list(tmp_path.iterdir())
    with atomic_dir(dest) as tmp:
        (tmp / "x").write_text("2")
    assert (dest / "x").read_text() == "2" and [p.name for p in tmp_path.iterdir()] == ["cache"]


def test_remove_stale_tmp_removes_only_dead_local_writers(tmp_path):
    host = socket.gethostname()
    dead_file = tmp_path / f"{TMP_PREFIX}row.parquet@{host}@999999999.parquet"
    dead_dir = tmp_path / "sub" / f"{TMP_PREFIX}cache@{host}@999999999.1234"
    alive = tmp_path / f"{TMP_PREFIX}row@{host}@{os.getpid()}"
    remote = tmp_path / f"{TMP_PREFIX}row@some-other-host@999999999"
    dead_dir.mkdir(parents=True)
    for f in (dead_file, alive, remote):
        f.write_text("")
    removed = remove_stale_tmp(tmp_path)
    assert set(removed) == {dead_file, dead_dir} and alive.exists() and remote.exists()
