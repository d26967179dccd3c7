"""Methods as plug-ins: the registry, per-method validation, the README's "adding a method"
recipe run as written, unchanged hashes and seeds, and the harness on static trees."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from toys import toy_pair

import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.conf.schema import method_key
from eval.conf.validate import validate
from eval.report.analysis import add_variant, display_name
from eval.store import storage
from eval.store.keys import config_hash
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.exact import decoder_distribution, target_distribution, total_variation
from rheo.methods import Method, get_method, method_names, unregister
from rheo.methods.static import PRESETS, num_nodes

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from make_figures import make_figures  # noqa: E402
from make_tables import make_tables  # noqa: E402


def test_builtin_methods():
    assert method_names() == ["chain", "hsd", "hsd_chain", "rheo", "rheo_hsd", "rheo_seq", "static", "topk"]
    assert method_names("dynamic") == ["rheo", "rheo_hsd", "topk"]
    assert method_names("static") == ["chain", "hsd", "hsd_chain", "rheo_seq", "static"]
    spec_fields = set(SpecConfig.__dataclass_fields__)
    for name in method_names():
        method = get_method(name)
        assert method.name == name and set(method.fields) <= spec_fields
        assert callable(method.candidates) and callable(method.build) and callable(method.verify)
    assert [get_method(n).display for n in ("topk", "rheo", "static", "chain")] == ["Top-K", "Rheo", "Static", "Chain"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(method="static"), "branching is required"),
    (dict(method="static", branching=(2, 0)), "branching"),
    (dict(method="static", branching=()), "branching"),
    (dict(method="static", branching=(2, 1.5)), "branching"),
    (dict(method="static", branching=(5, 1), sparse_top=4), r"sparse_top must be None or >= max\(branching\)=5"),
    (dict(method="static", branching=(2,), replacement="yes"), "replacement"),
    (dict(method="chain", depth=0), "depth"),
    (dict(method="rheo", k=4, m=4), "m must be in"),
    (dict(method="topk", k=10, sparse_top=5), "sparse_top"),
    (dict(method="eagle"), r"dynamic trees \['rheo', 'rheo_hsd', 'topk'\], static trees \['chain', 'hsd', 'hsd_chain', 'rheo_seq', 'static'\]"),
])
def test_config_is_validated_per_method(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**kwargs)


def test_fields_a_method_does_not_read_keep_their_defaults():
    """A field the method does not read is not checked against the ones it does (chain's default k=10
    above sparse_top=2), and is refused when set away from its default (static with k=1)."""
    assert SpecConfig(method="chain", depth=3, sparse_top=2).max_children == 1  # k=10 > sparse_top is fine
    assert SpecConfig(method="static", branching=[3, 1], sparse_top=3).branching == (3, 1)  # list -> tuple
    with pytest.raises(ValueError, match=r"method='static' does not read k=1: drop it \(it reads branching"):
        SpecConfig(method="static", branching=[3, 1], k=1, sparse_top=3)
    assert SpecConfig(method="static", branching=(3, 1)).max_children == 3 and SpecConfig().max_children == 10
    target, drafter, _ = toy_pair(4)
    with pytest.raises(ValueError, match="draft vocabulary"):
        speculative_generate(target, drafter, [1], 3, SpecConfig(method="static", branching=(5,), sparse_top=None))


def test_presets_have_the_paper_budget():
    assert num_nodes(PRESETS["deep60"]) == num_nodes(PRESETS["wide60"]) == 60
    assert len(PRESETS["deep60"]) == 8 and PRESETS["wide60"][0] > PRESETS["deep60"][0]  # wider at the top
    target, drafter, _ = toy_pair(12, salt=2)
    for shape in PRESETS.values():
        out = speculative_generate(target, drafter, [1, 2], 6, SpecConfig(method="static", branching=shape),
                                   torch.Generator().manual_seed(0))
        assert set(out.kept_nodes) == {60}


# ------------------------------------------------------------------ existing behaviour unchanged
def test_config_hashes_of_existing_methods_unchanged():
    """Literal hashes computed before the registry existed: the key recipe is unchanged (a drafting
    method's key has since gained ``head_sha``, the head weights' fingerprint, checked apart)."""
    expect = {("method=topk",): ("7052316a1c11", "7e43f93a237c"), ("method=rheo",): ("12bda16cfb59", "7e43f93a237c"),
              ("method=rheo", "method.m=2", "temperature=0"): ("68ed1bf33bc8", "009c6f74f839"),
              ("method=ar",): ("7e43f93a237c", "7e43f93a237c"),
              ("method=rheo", "paired_baseline=true"): ("12bda16cfb59", "ad715d99bbe1")}
    for overrides, (own, ar) in expect.items():
        cfg = compose_config(list(overrides) + ["dtype=null"])  # the default before dtype=auto
        key, ar_key = method_key(cfg), method_key(cfg, AR.name)
        if ar_key["paired_with"] is not None:  # an AR row names the config it was timed next to
            assert ar_key["paired_with"] == config_hash(key)
        assert (key.pop("head_sha", None) is None) == (overrides == ("method=ar",))
        if ar_key["paired_with"] is not None:
            ar_key["paired_with"] = config_hash(key)
        assert (config_hash(key), config_hash(ar_key)) == (own, ar)


def test_seeded_tokens_of_existing_methods_unchanged():
    """Literal outputs computed before the registry existed (same seed, same tokens)."""
    target, drafter, _ = toy_pair(12, salt=3)
    cases = [(SpecConfig(method="topk", k=4, depth=3, tree_size=8, sparse_top=5),
              [10, 10, 7, 10, 6, 6, 1, 3, 6, 4, 6, 2], [1, 1, 1, 1, 2, 1, 2, 1, 1, 1]),
             (SpecConfig(k=4, m=1, depth=3, tree_size=8, sparse_top=5, temperature=0.7),
              [5, 5, 3, 10, 10, 3, 5, 0, 5, 7, 4, 3], [1, 3, 1, 1, 1, 1, 3, 1])]
    for cfg, tokens, accept in cases:
        out = speculative_generate(target, drafter, [1, 2], 12, cfg, torch.Generator().manual_seed(0))
        assert (out.tokens, out.accept_lengths) == (tokens, accept)


# ------------------------------------------------------------------ the README recipe, as written
def _readme_method_module() -> types.ModuleType:
    section = (ROOT / "docs" / "adding-a-method.md").read_text()
    code = re.search(r"```python\n(# rheo/methods/(\w+)\.py\n.*?)```", section, re.S)
    assert code is not None, "the example method of docs/adding-a-method.md is missing"
    module = types.ModuleType(f"rheo.methods.{code.group(2)}")
    exec(compile(code.group(1), "docs/adding-a-method.md", "exec"), module.__dict__)
    return module


@pytest.fixture
def readme_method():
    module = _readme_method_module()
    yield module.TOPP
    unregister(module.TOPP.name)


def test_readme_example_method_is_lossless_and_reaches_the_harness(readme_method):
    name = readme_method.name
    cfg = SpecConfig.for_method(method=name, k=3, depth=2, tree_size=4, temperature=1.0, sparse_top=None)
    target, drafter, t_fn = toy_pair(4)
    got = decoder_distribution(target, drafter, [1, 2], 2, cfg)
    assert total_variation(got, target_distribution(t_fn, [1, 2], 2, 1.0)) < 1e-9
    greedy = dataclasses.replace(cfg, temperature=0.0)
    out = speculative_generate(target, drafter, [1, 2], 10, greedy)
    assert out.tokens == speculative_generate(target, drafter, [1, 2], 10, SpecConfig(
        method="topk", k=3, depth=2, tree_size=4, temperature=0.0, sparse_top=None)).tokens
    # the harness takes the new name (a YAML in configs/method/ would make `method=<name>` choosable)
    run_cfg = compose_config(["method=topk", f"method.name={name}", "method.k=3"])
    assert validate(run_cfg).method == name
    key = method_key(run_cfg)
    assert key["method"] == name and key["k"] == 3 and key["m"] is None
    assert display_name(name) == "Top-P"


def test_readme_example_method_records_its_expected_acceptance(readme_method):
    from rheo.exact import verifier_path_probs
    from rheo.methods import build_tree

    cfg = SpecConfig.for_method(method=readme_method.name, k=3, depth=2, tree_size=4, temperature=1.0, sparse_top=None)
    target, drafter, _ = toy_pair(4)
    out = speculative_generate(target, drafter, [1, 2], 8, cfg, torch.Generator().manual_seed(0), record_expected=True)
    assert len(out.expected_accept_lengths) == out.target_calls
    d_sess, t_sess = drafter.new_session(), target.new_session()
    d_sess.prefill([1, 2], None)
    t_sess.prefill([1])
    built = build_tree(d_sess.draft, 2, cfg, None)  # Top-P draws nothing while drafting
    logits = t_sess.score_tree(built.tree).logits
    exact = sum(verifier_path_probs(readme_method.verify, built, logits, cfg))
    assert abs(out.expected_accept_lengths[0] - exact) < 1e-9


# ------------------------------------------------------------------ harness
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=5", "method.depth=2", "num_threads=1",
        "progress=false", "warmup=false"]


@pytest.mark.slow
def test_static_and_chain_rows_and_the_methods_table(tmp_path):
    out = tmp_path / "out"
    runs = [["method=topk", "method.k=3", "method.tree_size=5"], ["method=static", "method.branching=[3,1]"],
            ["method=static", "method.branching=[3,1]", "method.replacement=true"], ["method=chain"]]
    for t in ("0.0", "1.0"):
        for extra in runs:
            entry.run(compose_config(TINY + extra + [f"temperature={t}", f"output_dir={out}"]))
    df = add_variant(storage.load_results(out))
    assert set(df["variant"]) == {AR.name, "topk", "static rsd (3,1)", "static specinfer (3,1)", "chain d=2"}
    static = df[df["method"] == "static"]
    assert all(list(b) == [3, 1] for b in static["branching"]) and set(static["replacement"]) == {True, False}
    assert (static["kept_nodes_mean"] == 6).all() and static["k"].isna().all() and static["tree_size"].isna().all()
    assert df.loc[df["method"] == "topk", "branching"].isna().all()
    written = make_tables(out, tmp_path / "tables", theory=False)
    table = written["methods"].read_text()
    for name in ("Top-K (K=3 depth=2 R=5)", "RSD (3,1)", "SpecInfer (3,1)", "Chain d=2", "| 0 |", "| 1 |"):
        assert name in table
    figures = make_figures(out, tmp_path / "figures", theory=False)
    assert any(p.name.startswith("methods_tiny_random") and p.stat().st_size > 1000 for p in figures)


def test_tables_without_static_rows_have_no_methods_table(tmp_path, capsys):
    from synthetic_results import write_synthetic_results

    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, seeds=(0,), temperatures=(1.0,))
    assert "methods" not in make_tables(runs, tmp_path / "tables", theory=False)
    assert "skipped methods.md" in capsys.readouterr().out


def test_shards_written_before_the_static_columns_still_load(tmp_path, monkeypatch):
    cfg = compose_config(TINY + ["method=topk", "method.k=3", "method.tree_size=5", f"output_dir={tmp_path / 'out'}"])
    entry.run(cfg)
    shards = list(storage.iter_shards(tmp_path / "out"))
    for shard in shards:  # rewrite each shard as an older version of the code wrote it
        table = pq.read_table(shard)
        pq.write_table(table.drop_columns(sorted(storage.OPTIONAL_COLUMNS & set(storage.METHOD_COLUMNS))), shard)
    rows = storage.load_results(tmp_path / "out")
    assert len(rows) == len(shards) == 2 and rows["branching"].isna().all()

    def forbidden(*args, **kwargs):
        raise AssertionError("an old shard was recomputed")
    monkeypatch.setattr("eval.measure.loop.load_pair", forbidden)
    assert entry.run(cfg).skipped == 2


def test_methods_experiment_is_the_paper_budget():
    cfg = compose_config(["experiment=methods", "method=static"])
    assert cfg.experiment == "methods" and cfg.dataset.name == "all"
    assert num_nodes(validate(cfg).branching) == 60 == cfg.method.tree_size
    for method in ("topk", "rheo", "chain"):
        spec = validate(compose_config(["experiment=methods", f"method={method}"]))
        assert (spec.k, spec.m, spec.depth, spec.tree_size) == (10, 1, 8, 60)
    hashes = {config_hash(method_key(compose_config(["experiment=methods", f"method={m}", f"method.replacement={r}"])))
              for m in ("topk", "static") for r in ("false", "true")}
    assert len(hashes) == 3  # replacement splits static only


@pytest.mark.slow  # minutes of the default suite: `make test-slow`
def test_method_acceptance_table_matches_monte_carlo(tmp_path):
    from eval.report import theory_checks as theory
    assert "Single-node acceptance of every verification rule" in theory.theory_markdown(tmp_path, n_cycles=300)
    frame = pd.read_parquet(tmp_path / "method_acceptance_n300.parquet")
    assert set(frame["method"]) == {"topk", "rheo", "static", "chain"} and len(frame) == 10
    # seeded; a 4-sigma band (false-alarm rate ~6e-4 over the 10 cases) around the closed form
    sigma = (frame["closed_form"] * (1 - frame["closed_form"]) / frame["n_cycles"]) ** 0.5
    assert ((frame["monte_carlo"] - frame["closed_form"]).abs() <= 4 * sigma + 1e-9).all(), frame


def test_baselines_are_reference_methods_run_through_one_generate():
    from baselines import AR, HF_GENERATE, autoregressive_generate
    from eval.measure.generation import generate, phase_timer
    from eval.measure.pairs import make_tiny_pair

    assert method_names("reference") == sorted([AR.name, HF_GENERATE.name]) and AR.name not in method_names()
    pair = make_tiny_pair()
    prompt = pair.format_chat([{"role": "user", "content": "hi"}])
    want = autoregressive_generate(pair.target, prompt, 6, 0.0).tokens
    for name in (AR.name, HF_GENERATE.name, "topk"):
        spec = SpecConfig.for_method(method=name, k=4, depth=2, tree_size=6, temperature=0.0)
        assert generate(pair, spec, prompt, 6, torch.Generator().manual_seed(0)).tokens == want, name
    assert phase_timer(SpecConfig.for_method(method=HF_GENERATE.name), "cpu") is None  # transformers runs that loop
    assert phase_timer(SpecConfig.for_method(method=AR.name), "cpu") is not None
    with pytest.raises(ValueError, match="reference method"):
        speculative_generate(pair.target, pair.drafter, prompt, 4, config=SpecConfig.for_method(method=AR.name))
    with pytest.raises(ValueError, match="needs generate"):
        Method(name="no_loop", display="No loop", kind="reference")
