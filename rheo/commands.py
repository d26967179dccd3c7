"""The ``rheo`` command: one entry point for what users run.

    rheo generate "prompt" [--model NAME | --target DIR --head DIR] [--method rheo|topk|rheo_auto] ...
    rheo prompt --suite mt_bench --item 81 [--model NAME] [--protocol template|eagle3]
    rheo run model=smollm2_135m method=rheo dataset=mt_bench limit=5 output_dir=outputs/mine
    rheo tables --results outputs/mine --out outputs/mine/tables
    rheo figures --results outputs/mine --out outputs/mine/figures
    rheo export --results results/runs.parquet              (-> outputs/exports/runs.csv)
    rheo plan reproduce-full model=llama31_8b_instruct device=cuda dtype=bfloat16
    rheo publish [--yes]                                     (outputs/ -> the committed results/)

``run`` is the Hydra harness (``python -m eval.run``, every override accepted); ``tables`` and
``figures`` are the project's ``scripts/make_tables.py`` and ``scripts/make_figures.py`` of the
checkout rheo is installed from (``pip install -e .``). Errors end as ``rheo.cli`` describes.
Every command writes under the output root (``outputs/``; ``RHEO_OUT=DIR`` moves it), said before
its first write; ``publish`` is the one that changes the committed results (eval/store/publish.py).
"""

from __future__ import annotations

import runpy
import sys
from typing import Callable, Optional, Sequence

from rheo.cli import fail, run_main, set_program
from rheo.paths import REPO_ROOT

__all__ = ["main", "COMMANDS"]


def _generate(argv: list[str]) -> int:
    from rheo.generate_cli import generate_main

    return generate_main(argv)


def _prompt(argv: list[str]) -> int:
    from rheo.prompt_cli import prompt_main

    return prompt_main(argv)


def _module(name: str, command: str) -> Callable[[list[str]], int]:
    """Run module ``name`` as ``rheo <command>``."""
    def run(argv: list[str]) -> int:
        sys.argv = [name, *argv]
        set_program(f"rheo {command}")
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return 0
    return run


def _script(file: str, command: str) -> Callable[[list[str]], int]:
    """Run the checkout's ``scripts/<file>`` as ``rheo <command>`` (its --help and errors say so)."""
    def run(argv: list[str]) -> int:
        path = REPO_ROOT / "scripts" / file
        if not path.is_file():
            fail(f"{path} not found: `rheo {file}` runs the scripts of a checkout; install rheo from one "
                 f"(git clone, then pip install -e .)", "rheo")
        sys.argv = [str(path), *argv]
        set_program(f"rheo {command}")  # its usage line and errors: "usage: rheo tables ..."
        runpy.run_path(str(path), run_name="__main__")
        return 0
    return run


#: command -> (what it does, how it runs)
COMMANDS: dict[str, tuple[str, Callable[[list[str]], int]]] = {
    "generate": ("decode a prompt, streaming the answer, with tau and tokens/s", _generate),
    "prompt": ("the exact text and token ids a model receives for an item under a prompt protocol", _prompt),
    "run": ("the benchmark harness (Hydra overrides, as python -m eval.run)", _module("eval.run", "run")),
    "tables": ("result tables from a results folder (scripts/make_tables.py)", _script("make_tables.py", "tables")),
    "figures": ("figures from a results folder (scripts/make_figures.py)", _script("make_figures.py", "figures")),
    "export": ("rows as CSV or JSON (python -m eval.report.export_rows)", _module("eval.report.export_rows", "export")),
    "plan": ("what a sweep target would run: jobs, prompts, tokens, GPU-time estimate (python -m eval.plan)",
             _module("eval.plan", "plan")),
    "publish": ("copy the output root's results into the committed ones (checked; --yes writes)",
                _module("eval.store.publish", "publish")),
}


def usage() -> str:
    lines = ["usage: rheo COMMAND [ARGS...]  (rheo COMMAND --help for its arguments)", "", "commands:"]
    return "\n".join(lines + [f"  {name:<9} {what}" for name, (what, _) in COMMANDS.items()])


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        raise SystemExit(0)
    if args[0] not in COMMANDS:
        fail(f"unknown command {args[0]!r}; choose one of {list(COMMANDS)} (see rheo --help)", "rheo")
    name = args[0]
    if name in ("generate", "prompt"):
        run_main(lambda: COMMANDS[name][1](args[1:]), f"rheo {name}")
    COMMANDS[name][1](args[1:])  # the harness and the scripts end their own errors
    raise SystemExit(0)


if __name__ == "__main__":
    main()
