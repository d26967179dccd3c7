"""``rheo generate`` uses the threads it is given (default 1, printed with what it used), refuses more
threads than cores in one line before loading, and ``--compare-ar`` reports every timed repeat as it ends."""

from __future__ import annotations

import os
import re

import pytest
import torch
from local_pair import write_local_head, write_target

from rheo import compare_ar
from rheo.generate_cli import DEFAULT_THREADS, build_parser, generate_main


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_default_is_one_thread_and_help_says_why():
    assert DEFAULT_THREADS == 1 and build_parser().parse_args(["hi"]).threads == 1
    text = " ".join(build_parser().format_help().split())
    assert "--threads THREADS torch CPU threads (default 1:" in text and "shared machine" in text


def test_more_threads_than_cores_is_one_line_before_loading(monkeypatch, restore_threads):
    import rheo.models

    loaded = []
    monkeypatch.setattr(rheo.models, "load_model_pair", lambda *a, **k: loaded.append(1) or (_ for _ in ()).throw(
        RuntimeError("loaded")))
    cores = os.cpu_count() or 1
    with pytest.raises(ValueError, match=rf"^--threads {cores + 1} exceeds the {cores} cores of this machine .*"
                                         rf"choose --threads <= {cores}$"):
        generate_main(["hi", "--threads", str(cores + 1)])
    assert not loaded
    with pytest.raises(SystemExit):
        build_parser().parse_args(["hi", "--threads", "0"])


def test_compare_ar_prints_a_line_per_repeat_and_the_threads_it_used(tmp_path, capsys, restore_threads):
    target, head = write_target(tmp_path / "target"), write_local_head(tmp_path / "head")
    torch.set_num_threads(2 if (os.cpu_count() or 1) >= 2 else 1)  # the command must set its own
    assert generate_main(["w7 w8 w9", "--target", str(target), "--head", str(head), "--method", "rheo_auto",
                          "--temperature", "0.7", "--max-new-tokens", "6", "--k", "4", "--depth", "3",
                          "--tree-size", "8", "--dtype", "float32", "--compare-ar", "--repeats", "3"]) == 0
    assert torch.get_num_threads() == 1
    out = capsys.readouterr()
    cores = os.cpu_count() or 1
    assert f"rheo_auto, tree given K=4 d=3 R=8, float32 (given), 1 thread of {cores} cores" in out.err
    repeats = [line for line in out.err.splitlines() if line.startswith("repeat ")]
    assert [line.split(":")[0] for line in repeats] == ["repeat 1/3", "repeat 2/3", "repeat 3/3"]
    assert all(re.fullmatch(r"repeat \d/3: rheo_auto \d+\.\d tokens/s, plain \d+\.\d tokens/s \(\d+\.\d\dx\)", line)
               for line in repeats), repeats
    assert out.err.index("compare-ar: 3 timed repeat(s) of rheo_auto") < out.err.index("repeat 1/3")
    assert re.search(rf"over 3 runs.*: rheo_auto .*, 1 thread of {cores} cores, float32$", out.out.splitlines()[-1])


def test_each_repeat_is_reported_with_its_own_rates():
    seen, now = [], iter(range(100))
    tokens = {"spec": 20, "plain": 10}
    compare_ar.time_pair(lambda i: tokens["spec"], lambda i: tokens["plain"], 2, clock=lambda: float(next(now)),
                         on_repeat=lambda i, s, p: seen.append((i, s, p)))
    assert seen == [(0, 20.0, 10.0), (1, 20.0, 10.0)]  # each call takes one clock tick
    assert compare_ar.repeat_line(0, 2, "rheo", 20.0, 10.0) == "repeat 1/2: rheo 20.0 tokens/s, plain 10.0 tokens/s (2.00x)"
