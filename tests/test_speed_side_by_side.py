"""The paper protocol's speed part (experiment=speed) times Rheo m=1, Top-K, `transformers generate` and AR
in one job per temperature, item by item in turning order, with the committed rows' config hashes; the
speed table then gives the per-item ratio to Top-K its interval."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import eval.measure.realized as runner
import eval.run as entry
from eval.conf.compose import compose_config
from eval.conf.schema import run_plan
from eval.conf.validate import check_run
from eval.report.analysis import load
from eval.report.speed import speed_table
from eval.store.keys import config_hash

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=3", "max_new_tokens=3", "method.k=4", "method.depth=2",
        "method.tree_size=6", "num_threads=1", "progress=false", "warmup=false", "temperature=1.0"]


def test_one_job_per_temperature_holds_every_method_with_the_committed_hashes():
    committed = set(pd.read_parquet(ROOT / "results" / "speed.parquet", columns=["config_hash"])["config_hash"])
    for t in (0.0, 1.0):  # its sweep: the temperatures only (make reproduce-speed's settings)
        cfg = compose_config(["experiment=speed", f"temperature={t}", "dtype=bfloat16", "max_new_tokens=64"])
        plan = run_plan(cfg, typed=set())
        methods = [plan.spec.method] + [spec.method for spec, _ in plan.alongside]
        assert methods == ["rheo", "topk", "hf_generate", "ar"]
        hashes = [config_hash(plan.key)] + [config_hash(key) for _, key in plan.alongside]
        assert set(hashes) <= committed  # the rows of the committed archive, keyed as before


def test_its_pending_work_turns_the_order_item_by_item(tmp_path):
    cfg = compose_config(["experiment=speed", *TINY, f"output_dir={tmp_path / 'speed'}"])
    realized = runner.Realized(cfg, check_run(cfg))
    realized.open(tmp_path / "speed")
    items = [SimpleNamespace(suite="gsm8k", item_id=i, turns=["q"]) for i in range(4)]
    order = [(item.item_id, job.method) for job, item in realized.pending(items)]
    first = ["rheo", "topk", "hf_generate", "ar"]
    assert order == [(i, m) for i in range(4) for m in first[i:] + first[:i]]


@pytest.mark.slow
def test_the_speed_experiment_times_every_method_in_one_job_and_its_table_gives_intervals(tmp_path):
    entry.run(compose_config(["experiment=speed", *TINY, f"output_dir={tmp_path / 'speed'}"]))
    df = load(tmp_path / "speed")
    assert df["run_id"].nunique() == 1 and len(df) == 4 * 3  # one job: 4 methods x 3 items
    assert sorted(set(df["method"])) == ["ar", "hf_generate", "rheo", "topk"]
    spec = df[df["method"] != "ar"]
    assert (spec["ar_partner"] == "paired").all() and spec["ar_same_job"].all()  # one AR row, every method's partner
    text = speed_table(df)
    rheo = next(line for line in text.splitlines() if line.startswith("| Rheo m=1 "))
    assert "[" in rheo.split("|")[-2] and "separate jobs" not in text.split("###", 1)[1]
