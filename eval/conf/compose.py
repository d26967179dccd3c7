"""Compose the run config without the command line (tests, notebooks, scripts)."""

from __future__ import annotations

from typing import Sequence

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from eval.conf.schema import register_configs
from rheo.paths import REPO_ROOT

CONFIG_DIR = REPO_ROOT / "configs"


def compose_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """The config ``python -m eval.run <overrides>`` would run with (same schema checks)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name, overrides=list(overrides))
