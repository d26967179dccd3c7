"""Inputs refused in one line that used to end in another library's error or in silence: a realized
results folder given to the same-state tables, a head of another size, an empty item list, an
argument the command line cannot take suggested as the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eval.states import tables as state_tables

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from synthetic_results import write_synthetic_results  # noqa: E402
from test_weak_inputs import _Loaded, no_load  # noqa: E402,F401 (no_load: a fixture)


@pytest.mark.parametrize("archive", [False, True])
def test_realized_rows_given_to_the_same_state_tables_name_their_command(tmp_path, capsys, archive):
    folder = write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,), n_items=1)
    given = folder
    if archive:
        from eval.store.storage import export_results
        given = tmp_path / "runs.parquet"
        export_results(folder, given)
    assert state_tables.main([str(given)]) == 2
    err = capsys.readouterr().err
    assert "realized rows" in err and f"rheo tables --results {given}" in err, err
    assert len(err.strip().splitlines()) == 1


def _pair(tmp_path):
    from local_pair import write_local_head, write_target
    return write_target(tmp_path / "target"), write_local_head(tmp_path / "head")


def test_a_target_folder_whose_weights_are_of_another_size_names_both_shapes(tmp_path):
    """A head folder given as the target (the two paths swapped): its lm_head is [draft vocabulary, H], the
    Llama layout its config.json describes wants [vocabulary, H]; refused before transformers loads it."""
    from rheo.models.loading import ModelMismatchError, load_model_pair

    target, head = _pair(tmp_path)
    with pytest.raises(ModelMismatchError, match=r"lm_head\.weight .*\[120, 64\].*\[256, 64\]") as err:
        load_model_pair("mine", target_path=str(head), head_path=str(target))
    assert "\n" not in str(err.value) and "ignore_mismatched_sizes" not in str(err.value)
    assert "EAGLE-3 head" in str(err.value)


def test_head_weights_of_another_size_than_its_config_name_both_shapes(tmp_path):
    import torch
    from eagle3_heads import official_state, write_head

    from rheo.models.eagle3 import Eagle3LoadError
    from rheo.models.loading import load_model_pair

    target, _ = _pair(tmp_path)
    state, _ = official_state()
    state["midlayer.mlp.gate_proj.weight"] = torch.zeros(200, 64)
    write_head(tmp_path / "wide", state)
    with pytest.raises(Eagle3LoadError, match=r"midlayer\.mlp\.gate_proj\.weight is \[200, 64\] .* \[96, 64\]") as err:
        load_model_pair("mine", target_path=str(target), head_path=str(tmp_path / "wide"))
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("kwargs, name", [(dict(name=3), "name"), (dict(target_path=7, head_path="h"), "target_path"),
                                          (dict(device=0.5), "device"), (dict(chat_format="chatml"), "chat_format")])
def test_load_model_pair_checks_its_arguments_first(kwargs, name):
    from rheo.models.loading import load_model_pair

    kwargs = {"name": "smollm2_135m", **kwargs}
    with pytest.raises((TypeError, ValueError), match=rf"\b{name}\b.* got ") as err:
        load_model_pair(**kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("preset", ["rheo_auto", "rheo_adaptive"])
def test_a_preset_with_m_0_points_to_the_command_line_that_gives_rheo_m_0(no_load, preset):
    from rheo.generate_cli import generate_main

    with pytest.raises(ValueError) as err:
        generate_main(["hi", "--method", preset, "--m", "0"])
    said = str(err.value)
    assert "--method rheo --m 0" in said and "proxy=" not in said and "\n" not in said, said
    with pytest.raises(_Loaded):  # what it suggests goes on to load the pair
        generate_main(["hi", "--method", "rheo", "--m", "0"])


def test_a_prompt_that_starts_with_at_is_written_with_two(tmp_path, monkeypatch):
    from rheo.cli import text_input

    assert text_input("@@home: is this a mention?") == "@home: is this a mention?"
    assert text_input("@@") == "@"
    with pytest.raises(ValueError, match=r"@@") as err:  # a missing file names the escape
        text_input("@nobody")
    assert "\n" not in str(err.value)
    (tmp_path / "p.txt").write_text("@@ stays as written in a file", encoding="utf-8")
    assert text_input(f"@{tmp_path / 'p.txt'}") == "@@ stays as written in a file"


def test_an_empty_item_list_is_refused_as_limit_0_is():
    from eval.conf.compose import compose_config
    from eval.conf.validate import check_values

    with pytest.raises(ValueError, match=r"item_ids is empty") as err:
        check_values(compose_config(["model=tiny_random", "dataset=gsm8k", "item_ids=[]"]))
    assert "\n" not in str(err.value)
    check_values(compose_config(["model=tiny_random", "dataset=gsm8k", "item_ids=[0]"]))
