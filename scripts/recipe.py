"""Run a recipe of ``configs/recipe/``: the commands that train or evaluate a draft head, as data.

    python scripts/recipe.py train_head [--out DIR] [--device cuda] [--resume]
    python scripts/recipe.py eval_head --head DIR
    python scripts/recipe.py copy SRC DST       (a file or a folder; the recipes' own copy step)

A recipe (YAML) has ``defaults`` (the values its commands name as ``{key}``; each can be set with
``--key VALUE``), ``env`` (added to the environment), ``steps`` (run one after the other; the
commands of one step run side by side) and optionally ``stdout`` (a file that receives the
commands' standard output, written only when every command succeeded). ``{resume}`` is
``--resume`` with ``--resume`` and is dropped otherwise. A command that fails stops the recipe with
its exit status and one line naming it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from eval.conf.resolvers import register_resolvers
from rheo.io import atomic_write_text, copy_path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "configs" / "recipe"
PROG = "recipe.py"


def load(name: str) -> dict:
    path = RECIPES / f"{name.replace('-', '_')}.yaml"  # make's target names use hyphens
    if not path.is_file():
        known = sorted(p.stem for p in RECIPES.glob("*.yaml"))
        raise SystemExit(f"{PROG}: error: no recipe {name!r}: choose from {known}")
    register_resolvers()  # ${rheo_out:}: the output root (an empty RHEO_OUT is the default)
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def values(recipe: dict, name: str, argv: list[str]) -> dict[str, str]:
    """The recipe's defaults with ``--key VALUE`` and ``--resume`` from ``argv`` applied."""
    out = {k: str(v) for k, v in (recipe.get("defaults") or {}).items()}
    out["resume"] = ""
    args = list(argv)
    while args:
        flag = args.pop(0)
        key = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if key == "resume":
            out["resume"] = "--resume"
        elif key in out and args:
            out[key] = args.pop(0)
        else:
            raise SystemExit(f"{PROG}: error: {name} takes --resume and --KEY VALUE for KEY in "
                             f"{sorted(k for k in out if k != 'resume')}, got {flag!r}")
    return out


def command(words: list[str], given: dict[str, str]) -> list[str]:
    """One command with its ``{key}`` words filled in (``{*key}``: the value split into words, as a
    shell would); ``scripts/*.py`` runs with this Python."""
    filled: list[str] = []
    for word in map(str, words):
        if word.startswith("{*") and word.endswith("}"):
            filled += shlex.split(given[word[2:-1]])
        elif not (word == "{resume}" and not given["resume"]):
            filled.append(word.format(**given))
    return [sys.executable, *filled] if filled[0].endswith(".py") else filled


def run(name: str, argv: list[str]) -> int:
    recipe = load(name)
    given = values(recipe, name, argv)
    env = {**os.environ, **{k: str(v).format(**given) for k, v in (recipe.get("env") or {}).items()}}
    capture = recipe.get("stdout")
    printed: list[str] = []
    for step in recipe["steps"]:
        commands = [command(words, given) for words in step]
        procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.PIPE if capture else None, text=True)
                 for c in commands]
        outs = [p.communicate()[0] for p in procs]
        for c, p in zip(commands, procs):
            if p.returncode:
                print(f"{PROG}: error: {name}: `{' '.join(c[1:] if c[0] == sys.executable else c)}` exited with "
                      f"status {p.returncode}; nothing after it ran", file=sys.stderr)
                return p.returncode
        printed += [o for o in outs if o]
    if capture:
        target = ROOT / capture
        atomic_write_text(target, "".join(printed), record=True)
        print(f"{name}: wrote {capture}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "copy":
        if len(argv) != 3:
            raise SystemExit(f"{PROG}: error: copy takes SRC DST")
        copy_path(Path(argv[1]), Path(argv[2]))
        return 0
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
