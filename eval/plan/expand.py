"""What a sweep command would run, from the code that runs it: Hydra's expansion of the sweep
(:func:`eval.conf.sweep.sweep_combinations`), each job composed as the sweep composes it, and its
method configurations and prompts as the run loop derives them (:func:`eval.conf.schema.run_plan`,
:func:`eval.prompts.sources.load_prompts`). Nothing is loaded but configs and prompt files.

A ``make`` target's commands come from ``make -n TARGET`` (:func:`make_commands`), so a plan is of
the command lines make would run, with ``ARGS`` where make puts it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import DictConfig, open_dict

from rheo.config import SpecConfig
from rheo.paths import REPO_ROOT, resolve_path

#: what starts a harness command in a line ``make -n`` prints (the Makefile's RUN)
HARNESS = ("-m", "eval.run")


@dataclass(frozen=True)
class Generation:
    """One method configuration of one job: ``config_hash`` names its folder under ``output_dir/model``."""

    spec: SpecConfig
    label: str  # the method as tables name it
    config_hash: str
    reference: bool  # AR / transformers generate: no draft tree
    expected: bool = False  # rows also hold each cycle's exact expectation (record_expected)


@dataclass
class Job:
    """One job of a sweep: its overrides, the composed config's facts a plan reads, its configurations."""

    overrides: list[str]
    model: str
    output_dir: str
    measure: str
    max_new_tokens: int
    device: str
    dtype: Optional[str]
    configs: list[Generation]
    prompts: int  # (suite, item, turn) units
    suites: dict[str, int] = field(default_factory=dict)  # suite -> prompts
    timed: bool = False  # its rows are timed against each other (AR beside, alongside): it runs alone


@dataclass
class Command:
    """One harness command (``python -m eval.run -m OVERRIDES``) and its jobs."""

    overrides: list[str]
    jobs: list[Job]
    condition: str = ""  # a ``[ ! -f FILE ] ||`` guard make would test ("" when none)


def make_commands(target: str, args: str = "", root: Path = REPO_ROOT) -> list[Command]:
    """The harness commands of ``make TARGET ARGS=args`` (``make -n``: nothing runs), each expanded.
    A line guarded by ``[ ! -f FILE ] ||`` is kept when FILE exists, as make would run it. ``args``
    holding ``$`` is refused: make would expand it, and a ``$(shell ...)`` would run."""
    if "$" in args:
        raise ValueError(f"ARGS {args!r} holds '$', which make expands (a $(shell ...) would run while nothing is "
                         f"to be run): rheo plan refuses it; write the values themselves")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PLAN")}
    argv = ["make", "--no-print-directory", "-n", "-C", str(root), target, f"ARGS={args}"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"make -n {target} failed: {last} (see make help for the targets)")
    out = []
    for line in done.stdout.splitlines():
        parsed = harness_overrides(line)
        if parsed is None:
            continue
        overrides, guard = parsed
        if guard and (root / guard).exists():  # `[ ! -f FILE ] || run`: make runs it only when FILE is missing
            continue
        out.append(Command(overrides, expand(overrides), condition=guard))
    if not out:
        raise ValueError(f"make {target} runs no sweep of the harness (python -m eval.run -m): nothing to plan")
    return out


def harness_overrides(line: str) -> Optional[tuple[list[str], str]]:
    """(overrides, guard) of a shell line that runs ``python -m eval.run -m``; None for other lines.
    ``guard``: FILE of a leading ``[ -f FILE ] &&`` / ``[ ! -f FILE ] ||`` test, inverted to "runs when
    FILE is missing" (the Makefile's only form), else ""."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    start = next((i for i in range(len(words) - 1) if tuple(words[i:i + 2]) == HARNESS), None)
    if start is None:
        return None
    rest = words[start + 2:]
    if rest[:1] == ["-m"] or rest[:1] == ["--multirun"]:
        rest = rest[1:]
    guard = ""
    if words[:3] == ["[", "!", "-f"] and "||" in words[:start]:
        guard = words[3]
    return rest, guard


def expand(overrides: Sequence[str]) -> list[Job]:
    """Every job of ``python -m eval.run -m OVERRIDES``, in the sweep's order."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from eval.conf.schema import register_configs
    from eval.conf.sweep import sweep_combinations

    register_configs()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        sweep = loader.load_configuration("config", list(overrides), run_mode=RunMode.MULTIRUN)
        jobs = []
        for combination in sweep_combinations(sweep):
            cfg = loader.load_sweep_config(sweep, list(combination))
            with open_dict(cfg):
                cfg.pop("hydra", None)
            jobs.append(job_of(list(combination), cfg))
    return jobs


def job_of(overrides: list[str], cfg: DictConfig) -> Job:
    """A composed job's configurations (as the run derives them) and prompts; the device is not
    checked (a plan for a GPU is made anywhere)."""
    from eval.conf.schema import run_plan
    from eval.conf.validate import check_values
    from eval.store.keys import config_hash
    from rheo.methods import get_method

    check_values(cfg)
    checked = run_plan(cfg)
    pairs = [(checked.spec, checked.key), *(checked.compared if cfg.measure == "same_state" else checked.alongside)]
    configs = []
    for spec, key in pairs:
        method = get_method(spec.method)
        reference = bool(method.is_reference)
        configs.append(Generation(spec, method.variant(spec), config_hash(key), reference,
                                  bool(cfg.record_expected) and not reference))
    per_suite = _prompts(cfg)
    return Job(overrides, str(cfg.model.name), str(resolve_path(cfg.output_dir)), str(cfg.measure),
               int(cfg.max_new_tokens), str(cfg.device), None if cfg.dtype is None else str(cfg.dtype),
               configs, sum(per_suite.values()), per_suite,
               timed=cfg.measure == "realized" and bool(cfg.baseline or cfg.alongside))


_PROMPTS: dict[str, dict[str, int]] = {}


def _prompts(cfg: DictConfig) -> dict[str, int]:
    """suite -> (item, turn) units of a job (:func:`eval.prompts.sources.load_prompts`, once per prompt selection)."""
    import json

    from omegaconf import OmegaConf

    from eval.prompts.sources import load_prompts

    chosen = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
              for k in ("data_dir", "dataset", "limit", "item_ids")}
    key = json.dumps(chosen, sort_keys=True, default=str)
    if key not in _PROMPTS:
        suites = load_prompts(cfg, resolve_path)
        _PROMPTS[key] = {s: sum(len(item.turns) for item in items) for s, items in suites.items()}
    return dict(_PROMPTS[key])
