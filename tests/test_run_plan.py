"""A run is checked once and derives each of its method configurations once (eval.conf.schema.run_plan):
the measurements and the rows read what the checks derived instead of deriving it again."""

from __future__ import annotations

import pytest

import eval.conf.schema as schema
import eval.store.keys as keys
from eval.conf.compose import compose_config
from eval.conf.validate import check_run
from eval.run import run
from eval.store.keys import config_hash
from eval.store.state_shards import DRIVER

TREE = "k:4,depth:2,tree_size:6,sparse_top:32"
TINY = ["model=tiny_random", "dataset=mt_bench", "limit=1", "max_new_tokens=4", "num_threads=1", "progress=false",
        "warmup=false", "method=rheo", "method.k=4", "method.depth=2", "method.tree_size=6", "method.sparse_top=32"]
RUNS = {
    # realized: the run's method, an alongside method and the AR baseline
    "realized": (["alongside=[topk]"], ["rheo", "topk", "ar"]),
    # same-state: the driver and two compared configurations
    "same_state": (["measure=same_state", f"compare=[{{name:topk,{TREE}}},{{name:rheo,m:1,{TREE}}}]"],
                   ["rheo", "topk", "rheo"]),
}


@pytest.fixture
def derivations(monkeypatch):
    """The method of every SpecConfig built from the run config (schema.spec_config) and of every
    method key built (keys.method_key), as (what, method)."""
    calls: list[tuple[str, str]] = []
    spec_config, method_key = schema.spec_config, keys.method_key

    def counted_spec(cfg, method=None, typed=None):
        calls.append(("spec", method or cfg.method.name))
        return spec_config(cfg, method, typed)

    def counted_key(spec, **kwargs):
        calls.append(("key", spec.method))
        return method_key(spec, **kwargs)

    monkeypatch.setattr(schema, "spec_config", counted_spec)
    monkeypatch.setattr(keys, "method_key", counted_key)
    return calls


@pytest.mark.parametrize("measure", sorted(RUNS))
def test_a_run_derives_each_method_configuration_once(measure, derivations, tmp_path):
    extra, methods = RUNS[measure]
    cfg = compose_config(TINY + extra + [f"output_dir={tmp_path / 'out'}"])
    summary = run(cfg)
    assert summary.computed > 0 and summary.failed == 0
    # one SpecConfig and one key per method configuration: none rebuilt per row, per turn or per measurement
    assert sorted(derivations) == sorted([(f, m) for m in methods for f in ("spec", "key")])


@pytest.mark.parametrize("measure", sorted(RUNS))
def test_the_plan_names_every_folder_the_run_writes(measure, tmp_path):
    extra, methods = RUNS[measure]
    cfg = compose_config(TINY + extra + [f"output_dir={tmp_path / 'out'}"])
    plan = check_run(cfg)
    pairs = [(plan.spec, plan.key), *plan.alongside, *plan.compared]
    assert [spec.method for spec, _ in pairs] == methods
    run(cfg)
    model = tmp_path / "out" / "tiny_random"
    hashes = {config_hash(key) for _, key in pairs}
    if measure == "realized":
        written = {p.name for p in model.iterdir()}
    else:  # a folder per driver hash, in it one per compared configuration
        (driver,) = [p for p in model.iterdir() if p.is_dir()]
        written = {driver.name} | {p.name for p in driver.iterdir() if p.is_dir() and p.name != DRIVER}
    assert written == hashes


def test_a_method_whose_parameters_do_not_fit_is_named():
    with pytest.raises(ValueError, match=r"^alongside static: branching is required"):
        check_run(compose_config(TINY + ["alongside=[static]"]))
    with pytest.raises(ValueError, match=r"^compare\[1\]: m must be in"):
        check_run(compose_config(TINY + ["measure=same_state", "compare=[{name:topk},{name:rheo,m:20}]"]))
