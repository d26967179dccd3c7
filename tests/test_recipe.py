"""scripts/recipe.py: the draft-head recipes are data (configs/recipe/), filled in and run step by
step; a failing command stops the recipe with its status, and a captured output file is written
only when every command succeeded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import recipe  # noqa: E402


def test_words_are_filled_resume_dropped_and_lists_split():
    given = {"out": "o", "resume": "", "extra": "--a 1 --b 'x y'"}
    assert recipe.command(["tool", "--out", "{out}/h", "{resume}", "{*extra}"], given) == \
        ["tool", "--out", "o/h", "--a", "1", "--b", "x y"]
    assert recipe.command(["scripts/x.py", "{resume}"], {**given, "resume": "--resume"}) == \
        [sys.executable, "scripts/x.py", "--resume"]
    assert recipe.command(["tool", "--seeds", ""], given) == ["tool", "--seeds", ""]  # an empty value stays a word


def test_every_recipe_names_scripts_that_exist_and_only_its_own_keys():
    for path in sorted(recipe.RECIPES.glob("*.yaml")):
        book = recipe.load(path.stem)
        given = recipe.values(book, path.stem, [])
        for step in book["steps"]:
            for words in step:
                cmd = recipe.command(words, given)  # a key that is not in defaults raises KeyError
                script = cmd[1] if cmd[0] == sys.executable else None
                assert script is None or (ROOT / script).is_file(), (path.name, script)


def test_a_failing_step_stops_the_recipe_and_nothing_is_captured(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(recipe, "RECIPES", tmp_path)
    monkeypatch.setattr(recipe, "ROOT", tmp_path)
    (tmp_path / "r.yaml").write_text(
        "defaults: {word: hi}\nstdout: out.txt\nsteps:\n"
        "  - [[echo, '{word}'], [echo, two]]\n  - [[sh, -c, 'exit 3']]\n  - [[touch, later]]\n")
    assert recipe.main(["r", "--word", "hey"]) == 3
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "later").exists()
    assert "r: `sh -c exit 3` exited with status 3; nothing after it ran" in capsys.readouterr().err
    (tmp_path / "r.yaml").write_text("defaults: {word: hi}\nstdout: out.txt\nsteps:\n  - [[echo, '{word}'], [echo, two]]\n")
    assert recipe.main(["r"]) == 0 and (tmp_path / "out.txt").read_text() == "hi\ntwo\n"
    with pytest.raises(SystemExit, match="no recipe 'nope'"):
        recipe.main(["nope"])
