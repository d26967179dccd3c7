"""Draw a study's tables and figures: the ``report`` commands of ``configs/experiment/<study>.yaml``.

    python scripts/report.py STUDY [STUDY ...] [--list] [OVERRIDE ...]
    python scripts/report.py --all [--list]     (every study that registers one)

A study file registers its reports once, beside what it runs: ``report`` is a list of Python
command lines (``-m module ARGS`` or ``scripts/<name>.py ARGS``) that read the study's rows (its folder,
else its archive) and write its tables and figures. They are composed like a run
(``experiment=STUDY`` plus the OVERRIDEs, e.g. ``paths.tables=/tmp/t``), so ``${output_dir}`` and
``${paths.*}`` name the run's own folders, under the output root; a study whose folder is not there
reads its archive (the user's own, else the committed one). The commands run one after the other,
with this Python, from the checkout; the first that fails stops its study with one line naming it,
and the next study still runs; the end is a summary of the studies that failed and the exit status
of the first failure. ``--list`` prints each study's commands instead of running them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from eval.conf.compose import compose_config
from rheo.cli import run_main
from rheo.paths import OUT_ENV, REPO_ROOT, out_root

PROG = "report.py"
EXPERIMENTS = REPO_ROOT / "configs" / "experiment"


def studies() -> list[str]:
    """The study files that register reports."""
    return sorted(p.stem for p in EXPERIMENTS.glob("*.yaml") if "\nreport:" in p.read_text())


def commands(study: str, overrides: list[str] = ()) -> list[list[str]]:
    """The words of each report command of ``study`` (after ``python``)."""
    if not (EXPERIMENTS / f"{study}.yaml").is_file():
        raise SystemExit(f"no study {study!r}: choose from {studies()}")
    words = report_words(compose_config([f"experiment={study}", *overrides]))
    if not words:
        raise SystemExit(f"{study} registers no report: choose from {studies()}")
    return words


def report_words(cfg: DictConfig) -> list[list[str]]:
    """The ``report`` commands of a composed study config as words; a command is split before its
    ``${...}`` are filled, so a folder may hold a space."""
    lines = OmegaConf.to_container(cfg, resolve=False)["report"]
    with open_dict(cfg):
        cfg.report_words = [shlex.split(line) for line in lines]
    return OmegaConf.to_container(cfg.report_words, resolve=True)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    listing = "--list" in args
    words = [a for a in args if a != "--list"]
    unknown = [a for a in words if a.startswith("--") and a != "--all"]
    if unknown:
        raise SystemExit(f"unknown option {unknown[0]}: STUDY ... [--all] [--list] [KEY=VALUE ...]")
    overrides, env = rooted([a for a in words if "=" in a])
    names = studies() if "--all" in words else [a for a in words if "=" not in a]
    if not names:
        raise SystemExit(f"name a study: {studies()}")
    failed: dict[str, int] = {}
    for study in names:
        code = run_study(study, commands(study, overrides), listing, env)
        if code:
            failed[study] = code
    if failed:
        print(f"{PROG}: error: {len(failed)} of {len(names)} studies failed: {', '.join(failed)} (each said why "
              f"above); the others were drawn", file=sys.stderr)
    return next(iter(failed.values()), 0)


def rooted(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """(``overrides`` with the output root as an absolute ``out_root=``, the commands' environment with it
    as RHEO_OUT): the commands run from the checkout, the root is the one seen from here (``out_root=``
    given, else rheo.paths.out_root)."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("out_root=")]
    root = Path(given[-1] if given else out_root()).expanduser().absolute()
    rest = [o for o in overrides if not o.startswith("out_root=")]
    return [f"out_root={root}", *rest], {**os.environ, OUT_ENV: str(root)}


def run_study(study: str, cmds: list[list[str]], listing: bool, env: dict[str, str] | None = None) -> int:
    """Run (or, ``listing``, print) the report commands of ``study``; the exit status of the first that
    fails (the rest of the study is skipped), else 0."""
    for cmd in cmds:
        if listing:
            print(f"{study}: python {shlex.join(cmd)}")
            continue
        code = subprocess.run([sys.executable, *cmd], cwd=REPO_ROOT, env=env).returncode
        if code:
            print(f"{PROG}: error: {study}: `python {shlex.join(cmd)}` failed with exit status {code}",
                  file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (HydraException, OmegaConfBaseException))
