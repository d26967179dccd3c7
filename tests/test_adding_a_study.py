"""docs/adding-a-study.md, followed literally in a copy of the configs and the Makefile: the
example study (with the example method of docs/adding-a-method.md) is a make target that calls
its experiment file; its jobs, composed as Hydra's sweep expands them, run through the one loop
and reach the rows, the tables and the figures."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from test_methods_registry import readme_method  # noqa: F401 (the fixture registers Top-P)

import eval.run as entry
from eval.conf.schema import register_configs
from eval.store.storage import load_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import make_figures  # noqa: E402
import make_tables  # noqa: E402
import report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "adding-a-study.md").read_text()
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "method.k=3", "method.depth=2",
        "method.tree_size=4", "method.sparse_top=null", "num_threads=1", "progress=false", "warmup=false"]


def _block(lang: str, first_line: str) -> str:
    return next(b for b in re.findall(rf"```{lang}\n(.*?)```", DOC, re.S) if any(line.startswith(first_line) for line in b.splitlines()[:2]))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_the_target_calls_the_study_file(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text((ROOT / "Makefile").read_text() + "\n" + _block("make", "topp-vs-topk:"))
    plan = subprocess.run(["make", "-s", "-n", "-f", str(makefile), "-C", str(ROOT), "topp-vs-topk"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert plan[0].rstrip().endswith("-m eval.run -m experiment=topp_vs_topk")
    assert any("scripts/report.py topp_vs_topk" in line for line in plan[1:])


@pytest.mark.slow
def test_the_study_reaches_rows_tables_and_figures(tmp_path, readme_method):  # noqa: F811
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    study = _block("yaml", "# configs/experiment/topp_vs_topk.yaml (the package line must come first):")
    (configs / "experiment" / "topp_vs_topk.yaml").write_text(study)
    (configs / "method" / "topp.yaml").write_text("name: topp\n")  # docs/adding-a-method.md, step 3
    out = tmp_path / "rows"
    register_configs()
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        base = compose("config", overrides=["experiment=topp_vs_topk"], return_hydra_config=True)
        params = {k: str(v).split(",") for k, v in base.hydra.sweeper.params.items()}
        assert base.hydra.launcher.n_jobs == 2 and base.output_dir == f"{base.out_root}/topp_vs_topk"
        for combo in itertools.product(*params.values()):
            job = [f"{k}={v}" for k, v in zip(params, combo)]
            cfg = compose("config", overrides=["experiment=topp_vs_topk", *job, *TINY, f"output_dir={out}"])
            assert entry.run(cfg).failed == 0
        folders = [f"output_dir={out}", f"paths.tables={tmp_path / 'tables'}", f"paths.figures={tmp_path / 'figures'}"]
        drawn = report.report_words(compose("config", overrides=["experiment=topp_vs_topk", *folders]))
    rows = load_results(out)
    assert set(zip(rows["method"], rows["temperature"])) == {(m, t) for m in ("topk", "topp") for t in (0.0, 1.0)}
    # (in this process: Top-P is registered here, as it would be by rheo/methods/topp.py)
    scripts = {"scripts/make_tables.py": make_tables.main, "scripts/make_figures.py": make_figures.main}
    assert [cmd[0] for cmd in drawn] == list(scripts)
    for cmd in drawn:
        assert scripts[cmd[0]](cmd[1:]) in (0, None)
    tables = "\n".join(p.read_text() for p in (tmp_path / "tables" / "topp_vs_topk").glob("*.md"))
    assert "Top-P" in tables and "Top-K" in tables
    assert list((tmp_path / "figures" / "topp_vs_topk").glob("*.png"))
