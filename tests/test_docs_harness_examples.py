"""The harness commands in docs/harness.md write to a folder of their own, never to the folders
`make reproduce` fills (outputs/runs, outputs/speed, outputs/same_state): each command is parsed
and composed as Hydra would, and the first one runs (on the tiny pair) from a scratch folder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store.storage import load_results

ROOT = Path(__file__).resolve().parents[1]
REPRODUCE_FOLDERS = ("outputs/runs", "outputs/speed", "outputs/same_state")
HARNESS = {"eval.run"}
TINY = ["model=tiny_random", "limit=1", "max_new_tokens=4", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false"]


def harness_commands(doc: Path = ROOT / "docs" / "harness.md") -> list[tuple[str, list[str]]]:
    """(config name, overrides) of every `python -m eval.run` line in the doc's code blocks."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if "-m" in words and words[words.index("-m") + 1] in HARNESS:
                at = words.index("-m") + 1
                found.append(("config", [w for w in words[at + 1:] if w != "-m"]))
    return found


def _single(overrides: list[str]) -> list[str]:
    """One job of a sweep (each swept key at its first value), without launcher settings."""
    out = []
    for o in overrides:
        if o.startswith("hydra"):
            continue
        key, _, value = o.partition("=")
        if "," in value and not value.startswith(("[", "{")) and not key.startswith("compare"):
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out


def test_every_harness_example_writes_to_a_folder_of_its_own():
    commands = harness_commands()
    assert len(commands) >= 10
    for config, overrides in commands:
        cfg = compose_config(_single(overrides), config)
        folder = Path(cfg.output_dir)
        assert not folder.is_absolute() and folder.parts[0] == "outputs", (overrides, folder)
        assert not any(folder == Path(f) or Path(f) in folder.parents for f in REPRODUCE_FOLDERS), (overrides, folder)


def test_the_first_example_leaves_the_reproduce_folders_untouched(tmp_path, monkeypatch):
    config, overrides = harness_commands()[0]
    before = {f: sorted(p.name for p in (ROOT / f).iterdir()) if (ROOT / f).is_dir() else None
              for f in REPRODUCE_FOLDERS}
    monkeypatch.chdir(tmp_path)  # relative folders resolve here, as from a checkout's root
    cfg = compose_config(_single(overrides) + TINY, config)
    summary = entry.run(cfg)
    rows = load_results(tmp_path / cfg.output_dir)
    assert summary.computed == len(rows) == 2 and not (tmp_path / "outputs" / "runs").exists()
    after = {f: sorted(p.name for p in (ROOT / f).iterdir()) if (ROOT / f).is_dir() else None
             for f in REPRODUCE_FOLDERS}
    assert after == before
