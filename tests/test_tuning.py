"""Tree tuning (eval/device/tuning.py, scripts/tune_tree.py) on the tiny pair: costs, tau runs, the model
of a cycle, the pick, and the config it writes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from toys import root_to_leaf_paths

from baselines import AR
from eval.device import tuning
from eval.measure.pairs import make_tiny_pair
from rheo.config import SpecConfig

ROOT = Path(__file__).resolve().parent.parent


def test_interp_and_synthetic_tree():
    table = {1: 10.0, 9: 30.0}
    assert tuning._interp(table, 5) == pytest.approx(20.0)
    assert tuning._interp(table, 0) == 10.0 and tuning._interp(table, 18) == pytest.approx(60.0)
    import torch

    tree = tuning.synthetic_tree(10, 7, 50, torch.Generator().manual_seed(0))
    assert tree.num_nodes == 10 and int(tree.tokens[0]) == 7
    assert tree.ancestor_mask.diagonal().all() and len(root_to_leaf_paths(tree.parents)) >= 3


@pytest.mark.slow
def test_tuning_prompts_are_held_out_training_prompts():
    from rheo.training.prompts import build_prompts, split_prompts

    train, held = split_prompts(build_prompts(0))
    got = tuning.tuning_prompts(5)
    assert got == held[:5] and not set(got) & set(train)


def test_costs_tau_runs_expected_and_pick_on_the_tiny_pair():
    pair = make_tiny_pair()
    prompts = [pair.format_chat([{"role": "user", "content": t}]) for t in ("alpha", "beta")]
    costs = tuning.measure_costs(pair, prompts[0], [1, 4, 8], [2, 4], reps=2)
    assert set(costs["target_ms"]) == {1, 4, 8} and all(v > 0 for v in costs["target_ms"].values())
    assert set(costs["head_ms"]) == {2, 4} and costs["commit_ms"] >= 0
    ar = tuning.run_tau(pair, prompts, SpecConfig(method=AR.name, temperature=0.0), 6, 0)
    assert ar.tau == 1.0 and ar.new_tokens == 12
    rows = []
    for shape in ((2, 2, 3), (4, 3, 8)):
        run = tuning.run_tau(pair, prompts, tuning.tree_spec("rheo", shape, 1.0, m=1), 6, 0)
        assert run.tau >= 1.0 and run.core_ms > 0 and run.phases_ms["draft"] > 0
        exp = tuning.expected(costs, run)
        k, depth, size = shape
        floor = tuning._interp(costs["target_ms"], size + 1) + (depth - 1) * tuning._interp(costs["head_ms"], k)
        assert exp["cycle_ms"] == pytest.approx(floor + run.core_ms + costs["commit_ms"])
        rows.append({"method": "rheo m=1", "shape": list(shape), "dtype": "float32",
                     "expected_tokens_per_s": exp["tokens_per_s"]})
    best = tuning.pick_best(rows, "rheo m=1")
    assert best["expected_tokens_per_s"] == max(r["expected_tokens_per_s"] for r in rows)
    assert tuning.pick_best(rows, "topk") is None


def test_written_config_is_a_speed_preset_the_gpu_check_reads(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check
    import tune_tree

    report = {"temperatures": [0.0, 1.0], "machine": "cpu x", "host": "h", "device": "cpu", "threads": 1,
              "torch": "t", "date": "d", "prompts": 3, "max_new_tokens": 8}
    path = tune_tree.write_config(tmp_path, SpecConfig(method="rheo", m=1), {"shape": (6, 5, 16), "dtype": "bfloat16",
                                                                             "expected_tokens_per_s": 30.0}, report)
    conf = OmegaConf.load(path)
    assert conf.method.k == 6 and conf.method.depth == 5 and conf.method.tree_size == 16 and conf.method.m == 1
    assert conf.dtype == "bfloat16" and conf.paired_baseline and conf.experiment == "tuned_rheo"
    assert "cpu x" in path.read_text()
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path.parent)
    (tmp_path.parent / "configs" / "experiment").mkdir(parents=True)
    path.rename(tmp_path.parent / "configs" / "experiment" / "tuned_rheo.yaml")
    assert gpu_check.tuned_specs(0.5) == [SpecConfig(method="rheo", m=1, k=6, depth=5, tree_size=16, sparse_top=128,
                                                     temperature=0.5)]


def test_written_preset_names_its_hydra_path_and_model(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import tune_tree

    report = {"temperatures": [0.0], "machine": "m", "host": "h", "device": "cpu", "threads": 1, "torch": "t",
              "date": "d", "prompts": 3, "max_new_tokens": 8, "model": "smollm2_135m_broad_head"}
    best = {"shape": (4, 3, 6), "dtype": "bfloat16", "expected_tokens_per_s": 1.0}
    nested = ROOT / "configs" / "experiment" / "some_head"
    assert tune_tree.preset_path(nested, "tuned_topk") == "some_head/tuned_topk"
    assert tune_tree.preset_path(ROOT / "configs" / "experiment", "tuned_topk") == "tuned_topk"
    text = tune_tree.write_config(tmp_path, SpecConfig(method="topk"), best, report).read_text()
    assert "experiment=tuned_topk model=smollm2_135m_broad_head limit=2" in text
    text = tune_tree.write_config(tmp_path, SpecConfig(method="topk"), best, {**report, "model": "smollm2_135m"}).read_text()
    assert "experiment=tuned_topk limit=2" in text
