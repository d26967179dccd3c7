"""The engine in configs, keys and rows: the default ("eager") leaves every config hash as it was, any
other engine is in the key, in the row and in the label, so rows of two engines never pool (neither in
a table's groups nor as a method row and its AR partner); the harness and the command line take it,
and refuse what it cannot run in one line."""

from __future__ import annotations

import pandas as pd
import pytest

from eval.conf.compose import compose_config
from eval.conf.schema import run_plan
from eval.conf.validate import check_values
from eval.report.analysis import add_speedup, add_variant
from eval.store import keys, storage
from rheo.config import SpecConfig
from rheo.generate_cli import build_parser, spec_of

RUN = dict(model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=8)
#: config hashes of these keys before the engine existed (a changed hash would orphan every stored row)
BEFORE = {"rheo": "33a4d6fe5398", "topk T=0": "29d3627d6176", "ar T=0.7": "650995f29bdc"}


def _specs(**engine) -> dict[str, SpecConfig]:
    return {"rheo": SpecConfig(**engine), "topk T=0": SpecConfig(method="topk", temperature=0.0, **engine),
            "ar T=0.7": SpecConfig.for_method(method="ar", temperature=0.7, **engine)}


def test_the_default_engine_leaves_every_config_hash_as_it_was():
    for name, spec in {**_specs(), **{k + " eager": v for k, v in _specs(engine="eager").items()}}.items():
        key = keys.method_key(spec, **RUN)
        assert "engine" not in key and keys.config_hash(key) == BEFORE[name.removesuffix(" eager")], name


@pytest.mark.parametrize("engine", ["static", "graphs"])
def test_another_engine_is_in_the_key_and_the_row(engine):
    for name, spec in _specs(engine=engine).items():
        key = keys.method_key(spec, **RUN)
        assert key["engine"] == engine and keys.config_hash(key) != BEFORE[name]
        assert storage.key_row(key)["engine"] == engine
    assert storage.key_row(keys.method_key(SpecConfig(), **RUN))["engine"] is None
    assert ("engine", "string") in [(f.name, str(f.type)) for f in storage.ROW_SCHEMA]


def _rows(engine, tokens_per_s, method="rheo", m=1):
    """One stored row of ``method`` on one prompt, run on ``engine`` (None: before the column)."""
    return {"model": "p", "target_path": None, "target_sha": None, "head_path": None, "device": "cuda",
            "dtype": "bfloat16", "dataset": "gsm8k", "item_id": 0, "turn": 0, "temperature": 0.0, "seed": 0,
            "max_new_tokens": 8, "method": method, "m": m if method == "rheo" else None,
            "k": None if method == "ar" else 10,
            "depth": 8, "tree_size": 60, "sparse_top": 128, "proxy": "rheo", "verify_order": "stochastic_first",
            "new_tokens": 8, "wall_s": 8 / tokens_per_s, "tokens_per_s": tokens_per_s, "paired_with": None,
            "config_hash": f"{method}-{engine}", "engine": engine}


def test_rows_of_two_engines_never_pool():
    rows = pd.DataFrame([_rows(None, 10.0), _rows("graphs", 40.0), _rows(None, 5.0, "ar"), _rows("graphs", 20.0, "ar")])
    frame = add_speedup(add_variant(rows))
    spec = frame[frame["method"] == "rheo"].set_index("variant")
    assert list(spec.index) == ["rheo m=1", "rheo m=1 engine=graphs"]  # two labels: two groups in every table
    assert spec.loc["rheo m=1", "speedup"] == 2.0 and spec.loc["rheo m=1 engine=graphs", "speedup"] == 2.0
    alone = add_speedup(add_variant(pd.DataFrame([_rows("graphs", 40.0), _rows(None, 5.0, "ar")])))
    assert alone["speedup"].isna().all()  # a graphs row has no eager AR partner


def test_the_harness_takes_the_engine_for_the_method_and_its_ar_baseline(tmp_path):
    base = ["model=tiny_random", "dataset=gsm8k", "method=topk", f"output_dir={tmp_path}"]
    plan = run_plan(compose_config(base + ["engine=graphs"]))
    assert plan.spec.engine == "graphs" and plan.key["engine"] == "graphs"
    assert [(s.method, k["engine"]) for s, k in plan.alongside] == [("ar", "graphs")]
    assert "engine" not in run_plan(compose_config(base)).key


@pytest.mark.parametrize("overrides, message", [
    (["engine=fast"], r"^unknown engine 'fast'; choose from \['eager', 'static', 'graphs'\]$"),
    (["engine=static"], r"^engine=static needs an EAGLE-3 pair; model 'tiny_random' drafts with a toy model"),
    (["engine=graphs", "model=smollm2_135m", "method=hf_generate"], r"^method 'hf_generate' runs a library's own loop"),
    (["engine=static", "model=smollm2_135m", "measure=same_state", "compare=[{name:topk}]"],
     r"^engine=static runs measure=realized only"),
])
def test_what_an_engine_cannot_run_is_refused_in_one_line(overrides, message, tmp_path):
    cfg = compose_config(["model=tiny_random", "dataset=gsm8k", "method=topk", f"output_dir={tmp_path}", *overrides])
    with pytest.raises(ValueError, match=message) as info:
        check_values(cfg)
    assert "\n" not in str(info.value)


def test_the_command_line_takes_the_engine():
    args = build_parser().parse_args(["hi", "--engine", "graphs", "--method", "rheo_auto"])
    assert spec_of(args, {"k": 4, "depth": 3, "tree_size": 8}).engine == "graphs"
    assert spec_of(build_parser().parse_args(["hi"]), {"k": 4, "depth": 3, "tree_size": 8}).engine == "eager"
