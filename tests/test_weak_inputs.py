"""Inputs that used to be accepted meaninglessly, answered misleadingly or ended noisily: repeated
compared entries, a same-state folder given to the realized tables, a reader that stops reading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.conf.compose import compose_config
from eval.conf.schema import run_plan
from eval.store import state_archive, storage

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_tables  # noqa: E402


def test_repeated_compare_entries_are_refused():
    twice = compose_config(["measure=same_state", "method=topk", "compare=[{name:topk},{name:rheo,m:1},{name:topk}]"])
    with pytest.raises(ValueError, match=r"compare\[2\] is compare\[0\] again") as err:
        run_plan(twice)
    assert "\n" not in str(err.value)
    assert len(run_plan(compose_config(["measure=same_state", "method=topk",
                                        "compare=[{name:topk},{name:rheo,m:1}]"])).compared) == 2


def test_a_same_state_folder_given_to_the_realized_tables_names_its_command(tmp_path, capsys):
    folder = tmp_path / "ss"
    storage.prepare_output_dir(folder, state_archive.FINGERPRINT)
    assert make_tables.main(["--results", str(folder), "--out", str(tmp_path / "t"), "--no-theory"]) == 2
    err = capsys.readouterr().err
    assert "same-state results folder" in err and "python -m eval.states.tables" in err
    assert len(err.strip().splitlines()) == 1


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    writer = ("from rheo.cli import run_main\n"
              "def main():\n"
              "    for i in range(200000):\n"
              "        print('token', i)\n"
              "run_main(main, 'rheo generate')\n")
    proc = subprocess.run(f"{sys.executable} -c \"{writer}\" | head -c 10; exit ${{PIPESTATUS[0]}}", shell=True,
                          executable="/bin/bash", cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout == "token 0\nto" and proc.stderr == "", proc.stderr
    assert proc.returncode == 141


@pytest.mark.slow
def test_a_run_from_another_folder_writes_nothing_outside_its_output_dir_and_the_output_root(tmp_path):
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    cmd = [sys.executable, "-m", "eval.run", "model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4",
           "method.k=4", "method.depth=2", "method.tree_size=6", "method.sparse_top=null", "num_threads=1",
           "progress=false", "warmup=false", "baseline=false", f"output_dir={out}"]
    env = {k: v for k, v in os.environ.items() if k != "RHEO_OUT"}  # the default root: outputs/ of the working folder
    done = subprocess.run(cmd, cwd=elsewhere, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in elsewhere.iterdir()] == ["outputs"] and "outputs: outputs/" in done.stdout + done.stderr
    assert list((elsewhere / "outputs" / "hydra").rglob("run.log")) and len(list(storage.iter_shards(out))) == 1
    assert not (out / storage.HYDRA_RUNS).exists()  # Hydra's own files lie under the output root, not in output_dir
    again = subprocess.run(cmd, cwd=elsewhere, capture_output=True, text=True, timeout=300,
                           env={**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert again.returncode == 0 and len(list(storage.iter_shards(out))) == 1, again.stderr[-2000:]


class _Loaded(Exception):
    """Raised by a stand-in for the model loader: the command got as far as loading."""


@pytest.fixture
def no_load(monkeypatch):
    import rheo.models

    def load(*args, **kwargs):
        raise _Loaded()
    monkeypatch.setattr(rheo.models, "load_model_pair", load)


@pytest.mark.parametrize("argv,needle", [(["hi", "--seed", "9" * 40], "seed 9999"),
                                         (["hi", "--m", "10"], "m must be"),
                                         (["hi\udcff"], "not UTF-8 text (byte 0xff")])
def test_the_generate_command_refuses_its_values_before_loading(no_load, argv, needle, capsys):
    from rheo.generate_cli import generate_main

    with pytest.raises((SystemExit, ValueError)) as err:
        generate_main(argv)
    said = str(err.value) if isinstance(err.value, ValueError) else capsys.readouterr().err
    assert needle in said and len(said.strip().splitlines()) == 1, said
    with pytest.raises(_Loaded):  # the same command with good values goes on to load the pair
        generate_main(["hi", "--seed", "7", "--m", "2"])


def test_a_prompt_comes_from_stdin_or_a_file_and_must_be_utf8(tmp_path, monkeypatch):
    import io

    from rheo.cli import text_input

    long_text = "Name three colors. " * 12000  # ~230 KB: more than a shell passes as one argument
    (tmp_path / "p.txt").write_text(long_text, encoding="utf-8")
    assert text_input(f"@{tmp_path / 'p.txt'}") == long_text
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("héllo\n".encode())))
    assert text_input("-") == "héllo\n"
    (tmp_path / "latin1.txt").write_bytes("héllo".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt is not UTF-8 text \(byte 0xe9 at position 1\)"):
        text_input(f"@{tmp_path / 'latin1.txt'}")
    with pytest.raises(ValueError, match="does not exist"):
        text_input(f"@{tmp_path / 'none.txt'}")
    assert text_input("plain words") == "plain words"


def test_an_experiment_file_with_a_duplicate_key_is_named_with_its_line(tmp_path, capsys):
    from omegaconf import OmegaConf

    from rheo.cli import errors_as_one_line

    bad = tmp_path / "dup.yaml"
    bad.write_text("limit: 1\nseed: 0\nlimit: 2\n")
    with pytest.raises(SystemExit) as stop, errors_as_one_line("eval.run"):
        OmegaConf.load(bad)  # the loader Hydra reads experiment files with
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{bad}:3: found duplicate key limit: give each key once" in err and "unexpected" not in err


# ------------------------------------------------------------------ one validation of method/option combinations
@pytest.mark.parametrize("fields,needle", [
    ({"method": "topk", "m": 3}, "method='topk' does not read m=3"),
    ({"method": "topk", "probe_min": 0.1}, "method='topk' does not read probe_min=0.1"),
    ({"method": "topk", "proxy": "tempered"}, "method='topk' does not read proxy='tempered'"),
    ({"method": "static", "rank": "q_T"}, "method='static' does not read rank='q_T'"),
    ({"method": "rheo", "m": 0, "proxy": "tempered"}, "with m=0 there is no lead"),
    ({"method": "rheo", "m": 0, "probe_min": 0.1}, "give probe_min=0 with m=0"),
])
def test_a_value_the_method_does_not_read_is_refused(fields, needle):
    from rheo.config import SpecConfig

    with pytest.raises(ValueError) as err:
        SpecConfig(**fields)
    assert needle in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="with m=0 there is no lead"):
        SpecConfig.preset("rheo_auto", m=0)
    shared = {"k": 4, "m": 3, "probe_min": 0.1}  # one loop over methods: what a method does not read is dropped
    assert SpecConfig.for_method(method="topk", **shared) == SpecConfig(method="topk", k=4)


def test_the_generate_command_refuses_an_unread_value_before_loading(no_load, capsys):
    from rheo.generate_cli import generate_main

    with pytest.raises(ValueError, match=r"method='topk' does not read m=3: drop it") as err:
        generate_main(["hi", "--method", "topk", "--m", "3"])
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"does not take --m 0 .*: for Rheo m=0 give --method rheo --m 0"):
        generate_main(["hi", "--method", "rheo_auto", "--m", "0"])  # the command line's syntax, not proxy='rheo'
    with pytest.raises(_Loaded):
        generate_main(["hi", "--method", "rheo", "--m", "0"])


def test_the_harness_refuses_a_typed_unread_value_and_drops_a_swept_one():
    from eval.conf.schema import spec_config
    from eval.store.keys import config_hash

    topk_m3 = compose_config(["method=topk", "method.m=3"])
    with pytest.raises(ValueError, match=r"method='topk' does not read m=3"):
        spec_config(topk_m3, typed={"m"})  # typed on one run's command line
    plain = run_plan(compose_config(["method=topk"]))
    swept = [run_plan(compose_config(["method=topk", f"method.m={m}"]), typed=set()) for m in (0, 1, 2)]
    assert {config_hash(p.key) for p in swept} == {config_hash(plain.key)}  # a sweep's Top-K jobs share rows
    assert all(p.spec == plain.spec for p in swept)
    with pytest.raises(ValueError, match=r"compare\[1\].*does not read m=3"):  # a compare entry is written
        run_plan(compose_config(["measure=same_state", "method=topk", "compare=[{name:topk},{name:topk,m:3}]"]))


def test_rows_of_one_name_from_two_chat_formats_are_named_not_merged():
    """One model name run with two chat formats keys two configs whose rows share every table column:
    the paired tables refuse them in one line naming both configs (was pandas' "Merge keys are not unique")."""
    import pandas as pd

    from eval.report.analysis import PAIR_KEY, paired

    base = {k: 0 for k in PAIR_KEY} | {"model": "mine", "dataset": "local", "temperature": 1.0}
    rows = pd.DataFrame([base | {"variant": "Top-K", "tau": 2.0, "config_hash": "aaa"},
                         base | {"variant": "Top-K", "tau": 2.5, "config_hash": "bbb"},
                         base | {"variant": "Rheo m=1", "tau": 3.0, "config_hash": "ccc"}])
    with pytest.raises(ValueError, match=r"Top-K: 2 rows share their prompt .* configs \['aaa', 'bbb'\]") as err:
        paired(rows, "Top-K", "Rheo m=1")
    assert "\n" not in str(err.value)
    assert paired(rows.iloc[1:], "Top-K", "Rheo m=1")["diff"].tolist() == [0.5]
