"""docs/library.md's three commands that turn a model and a head into a pair of your own run as
written on the tiny local pair (a random Llama checkpoint with a tokenizer, and an official-layout
EAGLE-3 head), from the repository root, and the last one decodes with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from local_pair import write_local_head, write_target

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "docs" / "library.md").read_text()
    block = re.search(r"<!-- own-pair -->\n```bash\n(.*?)```\n<!-- /own-pair -->", text, re.S)
    assert block, "docs/library.md lacks the own-pair block"
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_three_commands_make_a_pair_that_decodes(tmp_path):
    commands = _commands()
    assert len(commands) == 3
    source, head = write_target(tmp_path / "downloaded"), write_local_head(tmp_path / "eagle3-head")
    home = tmp_path / "home"
    (home / "models" / "mine").mkdir(parents=True)
    python = Path(sys.executable)
    env = {**os.environ, "HOME": str(home), "MODEL": str(source), "HEAD": str(head), "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    for command in commands:  # the interpreter running the tests stands for .venv/bin/python
        command = command.replace(".venv/bin/python", str(python)).replace(".venv/bin/rheo", str(python.parent / "rheo"))
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    target = home / "models" / "mine" / "target"
    assert (target / "config.json").is_file() and (target / "tokenizer.json").is_file()
    assert (home / "models" / "mine" / "head" / "config.json").is_file()
    assert re.search(r"^tau \d+\.\d\d \(\d+ tokens in \d+ target calls\)", done.stdout, re.M), done.stdout
