"""The README's first screen and its provenance: setup, one demo, then the tests; the method named and
cited as far as the project knows it; the licence file matching the package metadata."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from rheo.generate_cli import build_parser
from rheo.models.catalog import MODELS
from rheo.models.sources import SOURCES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _sections() -> list[str]:
    return re.findall(r"^## (.+)$", README, re.M)


def test_the_first_block_is_setup_then_a_demo_then_the_tests():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert commands[0] == "make setup" and commands[-1] == "make test" and len(commands) == 3
    demo = shlex.split(commands[1])
    assert demo[:2] == [".venv/bin/rheo", "generate"]
    args = build_parser().parse_args(demo[2:])  # a command the parser takes, on the embedded pair, short
    assert args.model is None and args.target is None and args.max_new_tokens <= 64 and not args.compare_ar
    assert _sections()[0] == "First run"


def test_the_readme_states_the_disk_footprint_and_the_torch_wheel():
    prose = " ".join(README.split())
    assert "`.venv` is 1.9 GB" in prose and "517 MB model cache" in prose
    assert "stock `pip install torch` on Linux pulls the CUDA build" in prose


def test_citing_is_near_the_top_and_invents_nothing():
    assert _sections().index("Citing") <= 1
    citing = README.split("## Citing")[1].split("\n## ")[0]
    assert "RheoSampling" in citing
    # what public arXiv listings confirm is cited and said to come from them; the rest stays unknown
    assert "https://arxiv.org/abs/2609.21827" in citing and "eprint = {2609.21827}" in citing
    assert "Resolving the One-Hot Dilemma in Stochastic Dynamic-Tree Speculative Decoding" in citing
    assert "listing" in citing and "venue, DOI, code | unknown to this project" in citing
    assert "@software{rheo" in citing and "Apache-2.0" in citing
    assert "https://arxiv.org/abs/2503.01840" in citing  # EAGLE-3
    heads = {e.head for e in MODELS.values() if e.head in SOURCES}
    assert heads and all(f"https://huggingface.co/{h}" in citing for h in heads)


def test_the_licence_file_is_the_one_pyproject_names():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "http://www.apache.org/licenses/LICENSE-2.0" in text


def test_the_recommendation_leads_with_one_flag():
    rule = README.split("## Which rule to use")[1].split("\n## ")[0]
    first = rule.strip().split("\n\n")[0]
    assert first.startswith("**One flag: `--method rheo_auto`.**")


def test_make_bench_runs_one_thread_as_its_documented_numbers_did():
    import subprocess

    line = subprocess.run(["make", "-n", "bench"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "scripts/bench_core.py --threads 1" in line
    assert "--threads 1" in (ROOT / "docs" / "harness.md").read_text()


def test_every_documented_sweep_over_seeds_is_bounded():
    """A sweep example over seeds states limit= and max_new_tokens= (unbounded, it runs for hours on a CPU)."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if "eval.run -m" in line and re.search(r"seed=\d+,", line):
                assert "limit=" in line and "max_new_tokens=" in line, (doc.name, line)
