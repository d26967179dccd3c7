"""A SLURM sweep is submitted from a login node: what only the job's machine can say (its device,
its cores) is checked in the job, not in the submitting process; everything else is still checked
before the first job (eval.conf.sweep)."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from eval.conf.schema import register_configs
from eval.conf.sweep import LOCAL_LAUNCHERS, jobs_run_here, validate_sweep

ROOT = Path(__file__).resolve().parents[1]
SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
JOB = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4"]
#: a setting this machine refuses and a GPU node accepts
OTHER_MACHINE = [f"num_threads={(os.cpu_count() or 1) + 1}"] + ([] if torch.cuda.is_available() else ["device=cuda"])


def _validate(overrides: list[str], launcher: str):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        sweep = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
        with open_dict(sweep):
            sweep.hydra.launcher = {"_target_": launcher}
        return validate_sweep(sweep)


def test_a_cluster_sweep_leaves_the_machine_checks_to_its_jobs():
    overrides = JOB + OTHER_MACHINE + ["method=topk,rheo"]
    with pytest.raises(ValueError, match=r"sweep job \[.*\]: .*(CUDA is not usable here|exceeds the \d+ cores)"):
        _validate(overrides, LOCAL_LAUNCHERS[0])  # the jobs would run here: refused before the first
    assert _validate(overrides, SLURM) == (2, 0)  # on a GPU node: submitted
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):  # the rest is still checked here
        _validate(JOB + OTHER_MACHINE + ["max_new_tokens=0"], SLURM)


def test_which_launchers_run_the_jobs_here():
    def config(target):
        return OmegaConf.create({"hydra": {"launcher": {"_target_": target}}})

    assert all(jobs_run_here(config(t)) for t in LOCAL_LAUNCHERS)
    assert not jobs_run_here(config(SLURM))


def test_jobs_that_repeat_a_configuration_are_counted():
    """Top-K does not read m: in an m sweep Top-K's second job repeats its first one's configuration."""
    assert _validate(JOB + ["method=topk", "method.m=0,1", "baseline=false"], LOCAL_LAUNCHERS[0]) == (2, 1)
    assert _validate(JOB + ["method=rheo", "method.m=0,1", "baseline=false"], LOCAL_LAUNCHERS[0]) == (2, 0)


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
                    reason="hydra-submitit-launcher is not installed (pip install -e '.[slurm]')")
def test_a_gpu_sweep_reaches_sbatch_from_a_machine_without_a_gpu(tmp_path):
    """`python -m eval.run -m hydra/launcher=slurm_gpu ... device=cuda` here, with a stand-in sbatch
    on PATH that records the array it is given and submits nothing."""
    bin_dir, log = tmp_path / "bin", tmp_path / "sbatch.log"
    bin_dir.mkdir()
    _stub(bin_dir, "sbatch", 'for a in "$@"; do [ -f "$a" ] && cat "$a" >> "$SBATCH_LOG"; done\n'
                             'echo "sbatch stand-in: recorded, nothing submitted" >&2; exit 1\n')
    _stub(bin_dir, "srun", "exit 1\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "SBATCH_LOG": str(log),
           "PATH": f"{bin_dir}:{os.environ['PATH']}", "RHEO_OUT": str(tmp_path / "out")}
    done = subprocess.run([sys.executable, "-m", "eval.run", "-m", "hydra/launcher=slurm_gpu", *JOB, *OTHER_MACHINE,
                           "method=topk,rheo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert "CUDA is not usable" not in said and "cores of this machine" not in said
    assert "sweep: 2 job configuration(s) validated" in said and "each job checks its own device" in said
    script = log.read_text()  # the job array sbatch was given: one GPU per job, the launcher's time limit
    assert "#SBATCH --array=0-1" in script and "#SBATCH --gpus-per-node=1" in script
    assert "#SBATCH --time=720" in script and "submitit.core._submit" in script
    assert not (tmp_path / "out" / "runs").exists()  # no row was made here
