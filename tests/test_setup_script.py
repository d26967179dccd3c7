"""scripts/setup_venv.sh (`make setup`) asks for the torch build it says: the CPU wheel index where it answers
(TORCH=cpu, the default), pip's configured index otherwise (said in one line) or for TORCH=cuda; checked in a
dry run (SETUP_DRY_RUN=1: the choice and the pip commands, nothing created or installed)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rheo.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "setup_venv.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or subprocess.run(
    ["python3", "-c", "import torch"], capture_output=True).returncode == 0,
    reason="needs bash and a system python3 without torch (else the script reuses that torch)")


def _dry(tmp_path, **env):
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SETUP_DRY_RUN": "1", **env})
    assert not (tmp_path / ".venv").exists()  # a dry run creates nothing
    return proc


def test_cpu_asks_the_cpu_wheel_index_where_it_answers(tmp_path):
    index = tmp_path / "index"
    (index / "torch").mkdir(parents=True)
    out = _dry(tmp_path, TORCH_INDEX=index.as_uri()).stdout
    assert f"would run: .venv/bin/pip install --index-url {index.as_uri()} torch==2.13.0" in out
    assert f"torch==2.13.0 from {index.as_uri()} (TORCH=cpu)" in out
    assert "would run: .venv/bin/pip install -e .[dev]" in out


def test_an_index_that_does_not_answer_falls_back_to_the_configured_one_and_says_so(tmp_path):
    missing = (tmp_path / "nowhere").as_uri()
    out = _dry(tmp_path, TORCH_INDEX=missing).stdout
    assert f"note: {missing} does not answer for torch from here" in out
    assert "would run: .venv/bin/pip install torch==2.13.0\n" in out and "--index-url" not in out


def test_cuda_uses_the_configured_index_and_a_bad_choice_is_one_line(tmp_path):
    out = _dry(tmp_path, TORCH="cuda").stdout
    assert "torch==2.13.0 from pip's configured index (TORCH=cuda)" in out and "--index-url" not in out
    bad = _dry(tmp_path, TORCH="gpu")
    assert bad.returncode == 2 and bad.stderr.strip() == "setup: TORCH must be cpu or cuda, got 'gpu'"


def test_the_default_is_the_cpu_index():
    text = SCRIPT.read_text()
    assert "CPU_INDEX=https://download.pytorch.org/whl/cpu" in text and "TORCH=${TORCH:-cpu}" in text
