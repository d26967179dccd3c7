"""Rows of a preset's settings carry the preset's name (rheo.presets) in the ``variant`` column, the
tables, the figures' legends and the progress bar; same-state rows stored before presets were named
read the same; labels say only what is true of the rows (the speed table's AR partner, the threads)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from synthetic_results import TREE, _row

from eval.report import analysis, plots, tables
from eval.report.speed import speed_table
from eval.states.labels import with_labels
from eval.store import storage
from eval.store.keys import config_hash, method_key
from rheo.config import SpecConfig
from rheo.methods import current_label, get_method, method_of_variant
from rheo.methods.rheo import LABEL_DEFAULTS, PRESET_RULES
from rheo.presets import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_presets_settings_are_labelled_by_its_name_wherever_they_show(name):
    spec = SpecConfig.preset(name, temperature=0.7, k=4, depth=3, tree_size=8)
    variant = get_method(spec.method).variant(spec)
    assert variant == name and analysis.display_name(variant) == name
    assert method_of_variant(name) is get_method(PRESETS[name]["method"])
    with_option = dataclasses.replace(spec, probe_min=0.1)
    assert get_method("rheo").variant(with_option) == f"{name} probe_min=0.1"


def test_the_label_defaults_are_the_configs_and_other_settings_keep_their_rule_label():
    default = SpecConfig(method="rheo")
    assert {f: getattr(default, f) for f in LABEL_DEFAULTS} == LABEL_DEFAULTS
    assert set(PRESET_RULES.values()) == set(PRESETS)  # every preset today is a Rheo rule
    for spec, label in ((SpecConfig(method="rheo", m=1), "rheo m=1"),
                        (SpecConfig(method="rheo", m=2, proxy="tempered"), "rheo m=2 proxy=tempered"),
                        (SpecConfig(method="rheo", m=1, proxy="tempered", verify_order="deterministic_first"),
                         "rheo m=1 deterministic_first proxy=tempered")):
        assert get_method("rheo").variant(spec) == label and current_label(label) == label


def test_stored_labels_of_earlier_rows_read_as_the_preset():
    assert current_label("rheo m=1 proxy=tempered") == "rheo_auto"
    assert current_label("rheo m=1 proxy=tempered adapt=level") == "rheo_level"
    assert current_label("rheo m=1 proxy=tempered probe_min=0.1") == "rheo_auto probe_min=0.1"
    assert current_label("topk rank=q_T") == "topk rank=q_T"
    rows = pd.DataFrame([{"method": "rheo", "variant": v, "driver": "rheo m=1 proxy=tempered adapt=root",
                          "m": 1, "proxy": "tempered", "head_sha": None, "config_hash": v}
                         for v in ("rheo m=1 proxy=tempered", "rheo m=1")])
    labelled = with_labels(rows)
    assert labelled["variant"].tolist() == ["rheo_auto", "rheo m=1"]
    assert labelled["label"].tolist() == ["rheo_auto", "Rheo m=1"]
    assert set(labelled["driver"]) == {"rheo_adaptive"}


def _write(root, specs, paired: bool) -> None:
    """Synthetic rows (made-up numbers, the harness's layout) of ``specs`` and an AR baseline, paired
    with each spec's config (paired_baseline) or one shared AR row per prompt."""
    import random

    rnd = random.Random(0)
    storage.prepare_output_dir(root)
    run = dict(model="synthetic", device="cpu", dtype="float32", seed=0, max_new_tokens=64)
    jobs = []
    for spec in specs:
        key = method_key(spec, **run)
        ar = SpecConfig(method="ar", temperature=spec.temperature)
        jobs.append((spec, key))
        if paired:
            jobs.append((ar, method_key(ar, **run, paired_with=config_hash(key))))
        elif (ar, method_key(ar, **run)) not in jobs:
            jobs.append((ar, method_key(ar, **run)))
    for spec, key in jobs:
        chash = config_hash(key)
        cdir = storage.prepare_config_dir(root, "synthetic", chash, key)
        for item in range(3):
            row = {**_row(rnd, spec, key, chash, "gsm8k", item, 0), "num_threads": 1}
            storage.write_row(storage.shard_path(cdir, "gsm8k", item, 0), row)


@pytest.mark.parametrize("paired", [True, False])
def test_tables_and_legends_name_the_preset_and_the_ar_partner_truly(tmp_path, paired):
    specs = [one for t in (0.5, 1.0) for one in (SpecConfig(method="topk", temperature=t, **TREE),
                                                  SpecConfig(method="rheo", m=1, temperature=t, **TREE),
                                                  SpecConfig.preset("rheo_auto", temperature=t, **TREE))]
    _write(tmp_path / "runs", specs, paired)
    df = analysis.load(tmp_path / "runs")
    assert "rheo_auto" in set(df["variant"])
    speed = speed_table(df)
    assert "| rheo_auto |" in speed and "proxy=tempered" not in speed
    assert ("AR tok/s (paired)" in speed) == paired and ("AR tok/s (shared)" in speed) == (not paired)
    assert ("paired_baseline=false" in speed) == (not paired)
    assert "threads: 1\n" in speed  # what the rows hold
    assert "| rheo_auto |" in tables.runs_table(df)
    legends = [t.get_text() for _, fig in plots.temperature_figures(df) + plots.suite_bar_figures(df)
               for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "rheo_auto" in legends and all("proxy=tempered" not in t for t in legends)


def test_the_progress_bar_names_the_preset():
    from eval.conf.compose import compose_config
    from eval.conf.validate import check_run
    from eval.measure.realized import Realized

    cfg = compose_config(["method=rheo_auto", "model=tiny_random", "baseline=false"])
    assert Realized(cfg, check_run(cfg)).label == "rheo_auto"
