"""Draw a study's tables and figures: the ``report`` commands of ``configs/experiment/<study>.yaml``.

    python scripts/report.py STUDY [STUDY ...] [--update-committed] [--list] [OVERRIDE ...]
    python scripts/report.py --all [--update-committed] [--list]     (every study that registers one)

A study file registers its reports once, beside what it runs: ``report`` is a list of Python
command lines (``-m module ARGS`` or ``scripts/<name>.py ARGS``) that read the study's rows (its folder,
else its archive) and write its tables and figures. They are composed like a run
(``experiment=STUDY`` plus the OVERRIDEs, e.g. ``paths.tables=/tmp/t``), so ``${output_dir}`` and
``${paths.*}`` name the run's own folders. ``{update}`` in a command is ``--update-committed`` with
``--update-committed`` and is dropped otherwise. The commands run one after the other, with this
Python, from the checkout; the first that fails stops the study with its exit status and one line
naming it. ``--list`` prints each study's commands instead of running them.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from eval.conf.compose import compose_config
from rheo.cli import run_main
from rheo.paths import REPO_ROOT

PROG = "report.py"
EXPERIMENTS = REPO_ROOT / "configs" / "experiment"


def studies() -> list[str]:
    """The study files that register reports."""
    return sorted(p.stem for p in EXPERIMENTS.glob("*.yaml") if "\nreport:" in p.read_text())


def commands(study: str, overrides: list[str] = (), update: bool = False) -> list[list[str]]:
    """The words of each report command of ``study`` (after ``python``), ``{update}`` filled in."""
    if not (EXPERIMENTS / f"{study}.yaml").is_file():
        raise SystemExit(f"no study {study!r}: choose from {studies()}")
    words = report_words(compose_config([f"experiment={study}", *overrides]), update)
    if not words:
        raise SystemExit(f"{study} registers no report: choose from {studies()}")
    return words


def report_words(cfg: DictConfig, update: bool = False) -> list[list[str]]:
    """The ``report`` commands of a composed study config as words; a command is split before its
    ``${...}`` are filled, so a folder may hold a space."""
    lines = OmegaConf.to_container(cfg, resolve=False)["report"]
    with open_dict(cfg):
        cfg.report_words = [shlex.split(line) for line in lines]
    flag = ["--update-committed"] if update else []
    return [[w for word in cmd for w in (flag if word == "{update}" else [word])]
            for cmd in OmegaConf.to_container(cfg.report_words, resolve=True)]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    update = "--update-committed" in args
    listing = "--list" in args
    words = [a for a in args if a not in ("--update-committed", "--list")]
    unknown = [a for a in words if a.startswith("--") and a != "--all"]
    if unknown:
        raise SystemExit(f"unknown option {unknown[0]}: STUDY ... [--all] [--list] [--update-committed] [KEY=VALUE ...]")
    overrides = [a for a in words if "=" in a]
    names = studies() if "--all" in words else [a for a in words if "=" not in a]
    if not names:
        raise SystemExit(f"name a study: {studies()}")
    for study in names:
        for cmd in commands(study, overrides, update):
            if listing:
                print(f"{study}: python {shlex.join(cmd)}")
                continue
            code = subprocess.run([sys.executable, *cmd], cwd=REPO_ROOT).returncode
            if code:
                print(f"{PROG}: error: {study}: `python {shlex.join(cmd)}` failed with exit status {code}",
                      file=sys.stderr)
                return code
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (HydraException, OmegaConfBaseException))
