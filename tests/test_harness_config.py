"""Harness: bad input is rejected at start-up, before any model loads or any row is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigKeyError, ValidationError

import eval.run as entry
from baselines import AR
from eval.conf.compose import compose_config
from eval.conf.schema import method_key
from eval.store.keys import config_hash
from eval.store.storage import FINGERPRINT, MANIFEST, OutputDirError

TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "method.k=4", "method.depth=2",
        "method.tree_size=6", "num_threads=1", "progress=false", "warmup=false"]


@pytest.fixture
def no_model(monkeypatch):
    """Any attempt to load a model fails the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded although the run should have stopped before")
    monkeypatch.setattr("eval.measure.loop.load_pair", forbidden)


@pytest.mark.parametrize("group,choices", [
    ("model", ["smollm2_135m", "llama31_8b_instruct", "vicuna_13b_v13", "r1_distill_llama_8b", "tiny_random"]),
    ("dataset", ["alpaca", "gsm8k", "humaneval", "mt_bench", "nq", "cnn_dm", "all"]),
    ("method", [AR.name, "topk", "rheo"]),
])
def test_unknown_group_choice_lists_the_choices(group, choices):
    with pytest.raises(MissingConfigException) as err:
        compose_config([f"{group}=nonexistent"])
    for choice in choices:
        assert choice in str(err.value)


@pytest.mark.parametrize("override,field", [("model.name=gpt5", "model.name"), ("method.name=beam", "method.name"),
                                            ("dataset.suites=[gsm8k,mmlu]", "dataset suite")])
def test_unknown_name_inside_a_group_is_rejected_with_choices(override, field, tmp_path, no_model):
    cfg = compose_config(TINY + [override, f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(ValueError, match=field) as err:
        entry.run(cfg)
    assert "choose from" in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override", ["method.kk=3", "temperature=hot", "method.k=ten", "seed=0.5", "banana=1"])
def test_unknown_key_or_wrong_type_fails_at_composition(override):
    with pytest.raises((ConfigCompositionException, ValidationError, ConfigKeyError)):
        compose_config([override])


@pytest.mark.parametrize("overrides,message", [
    (["method=rheo", "method.k=4", "method.m=4"], "m must be in"),
    (["method=rheo", "method.k=4", "method.m=7"], "m must be in"),
    (["temperature=-0.5"], "temperature"),
    (["method=ar", "temperature=-1"], "temperature"),
    (["method=topk", "method.tree_size=0"], "tree_size"),
    (["method.depth=0"], "depth"),
    (["max_new_tokens=0"], "max_new_tokens"),
    (["method.sparse_top=2"], "sparse_top"),
])
def test_invalid_method_parameters_rejected_before_model_load(overrides, message, tmp_path, no_model):
    cfg = compose_config(TINY + overrides + [f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(ValueError, match=message):
        entry.run(cfg)
    assert not (tmp_path / "out").exists()  # nothing was created either


def test_missing_weights_offline_names_the_path_to_set(tmp_path, monkeypatch):
    for var in ("RHEO_MODEL_DIR", "RHEO_LLAMA31_8B_INSTRUCT_TARGET", "RHEO_LLAMA31_8B_INSTRUCT_HEAD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hf_cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_config(TINY + ["model=llama31_8b_instruct", f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(FileNotFoundError) as err:
        entry.run(cfg)
    assert "RHEO_LLAMA31_8B_INSTRUCT_TARGET" in str(err.value)
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_unwritable_output_dir_is_a_clear_error(tmp_path, no_model):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    cfg = compose_config(TINY + [f"output_dir={blocker / 'results'}"])
    with pytest.raises(OutputDirError, match="cannot create output_dir"):
        entry.run(cfg)


def test_read_only_output_dir_is_a_clear_error(tmp_path, no_model, monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    import rheo.io

    def refuse(file, mode="r", *args, **kwargs):  # root ignores chmod, so simulate the OS refusing the write
        if "w" in mode and Path(file).parent == out:  # (the write door opens every file it writes)
            raise PermissionError(13, "Permission denied", str(file))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(rheo.io, "open", refuse, raising=False)
    cfg = compose_config(TINY + [f"output_dir={out}"])
    with pytest.raises(OutputDirError, match="not writable"):
        entry.run(cfg)


def test_foreign_output_dirs_are_refused(tmp_path, no_model):
    other = tmp_path / "other_project"
    other.mkdir()
    (other / MANIFEST).write_text(json.dumps({"project": "someone-else", "layout": 7}))
    with pytest.raises(OutputDirError, match="belongs to something else"):
        entry.run(compose_config(TINY + [f"output_dir={other}"]))
    stuff = tmp_path / "home_like"
    stuff.mkdir()
    (stuff / "thesis.tex").write_text("precious")
    with pytest.raises(OutputDirError, match="not empty and has no"):
        entry.run(compose_config(TINY + [f"output_dir={stuff}"]))
    assert (stuff / "thesis.tex").read_text() == "precious" and not (stuff / MANIFEST).exists()


def test_config_dir_of_another_config_is_refused(tmp_path, no_model):
    out = tmp_path / "out"
    cfg = compose_config(TINY + [f"output_dir={out}", "baseline=false"])
    key = method_key(cfg)
    cdir = out / "tiny_random" / config_hash(key)
    cdir.mkdir(parents=True)
    (out / MANIFEST).write_text(json.dumps(FINGERPRINT))
    (cdir / "config.json").write_text(json.dumps({**key, "temperature": 0.123}))
    with pytest.raises(OutputDirError, match="must not mix"):
        entry.run(cfg)


def test_method_key_drops_unused_parameters():
    topk = [method_key(compose_config(["method=topk", f"method.m={m}"])) for m in (0, 1, 2)]
    assert len({config_hash(k) for k in topk}) == 1 and topk[0]["m"] is None
    rheo = [config_hash(method_key(compose_config(["method=rheo", f"method.m={m}"]))) for m in (0, 1)]
    assert rheo[0] != rheo[1]
    ar = method_key(compose_config(["method=rheo", "model.head_path=/elsewhere/head"]), AR.name)
    assert ar["k"] is None and ar["tree_size"] is None and ar["method"] == AR.name and ar["head_path"] is None


def test_output_dir_being_initialised_by_a_parallel_job_is_accepted(tmp_path):
    from eval.store.storage import TMP_PREFIX, prepare_output_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / f"{TMP_PREFIX}{MANIFEST}-12345").write_text("{")  # another sweep job mid-write
    prepare_output_dir(out)
    assert json.loads((out / MANIFEST).read_text()) == FINGERPRINT


def test_unknown_item_ids_are_rejected(tmp_path, no_model):
    cfg = compose_config(TINY + ["item_ids=[0,12345]", f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(ValueError, match=r"item_ids \[12345\]"):
        entry.run(cfg)


def test_experiment_overrides_defaults_and_command_line_overrides_experiment():
    smoke = compose_config(["experiment=cpu_smoke"])
    assert (smoke.limit, smoke.max_new_tokens, smoke.method.tree_size, smoke.dataset.name) == (1, 16, 24, "all")
    assert smoke.experiment == "cpu_smoke"
    assert compose_config(["experiment=cpu_smoke", "limit=3", "dataset=gsm8k"]).limit == 3
    assert compose_config(["experiment=cpu_smoke", "dataset=gsm8k"]).dataset.suites == ["gsm8k"]


def test_method_key_holds_the_head_weights_fingerprint(tmp_path, monkeypatch):
    """A retrained head at the same path gets new config hashes: a rerun never resumes its old rows."""
    import shutil

    from rheo.models.catalog import get_entry
    from rheo.models.locate import head_fingerprint

    src = Path(get_entry("smollm2_135m").head)
    src = src if src.is_absolute() else Path(__file__).resolve().parents[1] / src
    head = tmp_path / "head"
    shutil.copytree(src, head)
    cfg = compose_config(["model=smollm2_135m", "method=rheo", f"model.head_path={head}"])
    before = method_key(cfg)
    assert before["head_sha"] == head_fingerprint("smollm2_135m", str(head)) and len(before["head_sha"]) == 12
    assert method_key(compose_config(["model=smollm2_135m", "method=rheo", f"model.head_path={head}"])) == before
    with open(head / "model.safetensors", "r+b") as fh:  # same size, one byte changed
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    after = method_key(cfg)
    assert after["head_sha"] != before["head_sha"] and config_hash(after) != config_hash(before)
    assert "head_sha" not in method_key(cfg, AR.name)  # AR never uses the head
