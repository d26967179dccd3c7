"""Presets (rheo.presets) are one source: each composes from its Hydra file to the same SpecConfig,
and the recommended rule decodes the same tokens for the same seed from the library
(SpecConfig.preset), the command line (rheo generate --method) and the harness (method=NAME)."""

from __future__ import annotations

import pytest
import torch
from local_pair import write_local_head, write_target

from eval.conf.compose import compose_config
from eval.conf.schema import spec_config
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.generate_cli import generate_main
from rheo.models import load_model_pair
from rheo.paths import REPO_ROOT
from rheo.presets import PRESETS

TREE = {"k": 4, "depth": 3, "tree_size": 8}


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("t", [0.0, 0.7, 1.0])
def test_each_preset_has_a_method_file_that_composes_to_it(name, t):
    assert (REPO_ROOT / "configs" / "method" / f"{name}.yaml").is_file(), f"configs/method/{name}.yaml is missing"
    assert spec_config(compose_config([f"method={name}", f"temperature={t}"])) == SpecConfig.preset(name, temperature=t)


def test_rheo_auto_is_the_tempered_one_lead_rule_and_overrides_apply():
    auto = SpecConfig.preset("rheo_auto", temperature=0.5, k=4, tree_size=8)
    assert (auto.method, auto.m, auto.proxy, auto.k, auto.tree_size) == ("rheo", 1, "tempered", 4, 8)
    assert auto != SpecConfig(method="rheo", temperature=0.5, k=4, tree_size=8)  # the paper's proxy


def test_a_preset_is_not_a_method_and_an_unknown_preset_is_named():
    with pytest.raises(ValueError, match=r"'rheo_auto' is a preset, not a method: use SpecConfig.preset\('rheo_auto'"):
        SpecConfig(method="rheo_auto")
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; choose one of \['rheo_adaptive', 'rheo_auto', 'rheo_level'\]"):
        SpecConfig.preset("nope")


def test_rheo_auto_gives_the_same_tokens_from_the_library_the_command_line_and_the_harness(tmp_path, capsys):
    target, head = write_target(tmp_path / "target"), write_local_head(tmp_path / "head")
    t, seed, new = 0.7, 3, 12
    pair = load_model_pair(target_path=str(target), head_path=str(head), chat_format="template", dtype="float32")
    prompt = pair.format_chat([{"role": "user", "content": "w7 w8 w9"}])

    def tokens(config: SpecConfig) -> list[int]:
        return speculative_generate(pair.target, pair.drafter, prompt, new, config, eos_token_id=pair.eos_token_ids,
                                    generator=torch.Generator().manual_seed(seed)).tokens

    library = tokens(SpecConfig.preset("rheo_auto", temperature=t, **TREE))
    harness = tokens(spec_config(compose_config(["method=rheo_auto", f"temperature={t}",
                                                 *(f"method.{f}={v}" for f, v in TREE.items())])))
    assert library == harness and len(library) >= 1
    assert generate_main(["w7 w8 w9", "--target", str(target), "--head", str(head), "--method", "rheo_auto",
                          "--temperature", str(t), "--seed", str(seed), "--max-new-tokens", str(new),
                          "--k", "4", "--depth", "3", "--tree-size", "8", "--dtype", "float32"]) == 0
    out = capsys.readouterr()
    answer = out.out.splitlines()[0]
    assert answer and answer == pair.tokenizer.decode(library, skip_special_tokens=True)
    assert "rheo_auto, tree given K=4 d=3 R=8, float32 (given)" in out.err
