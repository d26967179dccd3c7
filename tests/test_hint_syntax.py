"""A hint is written in the syntax of the command it answers: an option, a config key or a make variable."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from rheo.generate_cli import generate_main
from rheo.placement import as_device, setting

ROOT = Path(__file__).resolve().parents[1]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal needs a machine without CUDA")


def test_a_setting_is_spelled_as_its_context_spells_it():
    assert setting("--device", "cpu") == "--device cpu"
    assert setting("device", "cpu") == "device=cpu"
    assert setting("DEVICE", "cpu") == "DEVICE=cpu"


@no_cuda
@pytest.mark.parametrize("name, fix", [("device", "use device=cpu"), ("--device", "use --device cpu"),
                                       ("DEVICE", "use DEVICE=cpu")])
def test_the_cuda_refusal_names_the_fix_in_the_callers_syntax(name, fix):
    with pytest.raises(ValueError) as err:
        as_device("cuda", name)
    assert str(err.value).endswith(fix)


@no_cuda
def test_rheo_generate_says_use_device_cpu_as_an_option():
    with pytest.raises(ValueError) as err:
        generate_main(["hi", "--device", "cuda"])  # refused before anything loads
    assert str(err.value).startswith("--device cuda but CUDA") and str(err.value).endswith("use --device cpu")


@no_cuda
@pytest.mark.slow
def test_make_gpu_check_says_use_the_make_variable(tmp_path):
    done = subprocess.run(["make", "-s", "gpu-check", f"GPU_OUT={tmp_path}"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "MAKEFLAGS": "", "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0
    assert "DEVICE=cuda but torch.cuda.is_available() is False (use DEVICE=cpu to rehearse)" in done.stderr
    assert "--device cpu" not in done.stderr
