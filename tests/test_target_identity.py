"""A target is keyed by its content, not only its folder: a target replaced in place (same folder,
other weights) and a catalog target swapped through its environment variable get keys of their own
(the catalog's own target keeps the committed rows' keys); rows of two targets under one model name
are tabled apart; the built-in test pair's name with folders is refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import pytest
from local_pair import write_local_head, write_target

from eval.conf import schema
from eval.conf.compose import compose_config
from eval.conf.validate import check_values
from eval.report.analysis import load, settings
from eval.report.speed import speed_table
from eval.store.keys import config_hash
from rheo.models.tiny import make_tiny_llama
from synthetic_results import write_synthetic_results

LOCAL = ["model=local", "model.name=my-llama", "model.chat_format=template", "method=rheo"]


def _hash(overrides: list[str]) -> str:
    return config_hash(schema.method_key(compose_config(overrides)))


def test_a_target_replaced_in_place_gets_another_key(tmp_path):
    target, head = write_target(tmp_path / "target"), write_local_head(tmp_path / "head")
    given = LOCAL + [f"model.target_path={target}", f"model.head_path={head}"]
    before = _hash(given)
    assert _hash(given) == before  # the same folder, the same weights: the same key (rows resume)
    make_tiny_llama(seed=1, vocab_size=256, hidden_size=64, num_layers=4).save_pretrained(target)  # other weights
    assert _hash(given) != before


def test_a_catalog_target_swapped_by_its_variable_is_in_the_key(tmp_path, monkeypatch):
    own = compose_config(["model=smollm2_135m", "method=rheo"])
    committed = schema.method_key(own)
    assert "target_sha" not in committed  # the catalog's own target: the committed rows' keys as they were
    target = write_target(tmp_path / "target")
    monkeypatch.setenv("RHEO_SMOLLM2_135M_TARGET", str(target))
    swapped = schema.method_key(own)
    assert swapped["target_sha"] and config_hash(swapped) != config_hash(committed)
    make_tiny_llama(seed=1, vocab_size=256, hidden_size=64, num_layers=4).save_pretrained(target)
    assert config_hash(schema.method_key(own)) != config_hash(swapped)


def test_rows_of_two_targets_under_one_name_are_tabled_apart(tmp_path):
    one = load(write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,)))
    other = one.assign(target_sha="0123456789ab", config_hash=one["config_hash"] + "x",
                       paired_with=one["paired_with"])
    both = pd.concat([one, other], ignore_index=True)
    groups = settings(both)
    assert len(groups) == 2 * len(settings(one))
    assert all(part["target_sha"].nunique() == 1 for _, part in groups)
    text = speed_table(both)
    assert "(target 0123456789ab)" in text and text.count("### ") == 2 * speed_table(one).count("### ")


def test_the_test_pairs_name_with_folders_is_refused(tmp_path):
    cfg = compose_config(["model=local", "model.name=tiny_random", f"model.target_path={tmp_path}",
                          f"model.head_path={tmp_path}"])
    with pytest.raises(ValueError, match="'tiny_random' is the built-in test pair") as err:
        check_values(cfg)
    assert "\n" not in str(err.value)
    assert Path(tmp_path).is_dir()
