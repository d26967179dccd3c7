"""Any local pair in one call: load_model_pair(target_path=, head_path=, chat_format=) on a tiny Llama
checkpoint and an official-layout EAGLE-3 head written to temporary folders; a head that does not
fit its target is refused from the config files and weight headers, before any target weight is read."""

from __future__ import annotations

import pytest
import torch
from eagle3_heads import H
from local_pair import write_local_head, write_target

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models import loading
from rheo.models.loading import ModelMismatchError, load_model_pair


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_target(tmp_path_factory.mktemp("target"))


def test_a_local_pair_loads_in_one_call_and_decodes_as_its_target(target_dir, tmp_path):
    head = write_local_head(tmp_path / "head")
    pair = load_model_pair(target_path=str(target_dir), head_path=str(head), chat_format="template",
                           eos_tokens=["</s>"])
    assert pair.entry.name == "local" and pair.hf_model.dtype == torch.float32
    assert pair.eos_token_ids == [2]
    prompt = pair.format_chat([{"role": "user", "content": "w7 w8 w9"}])
    assert prompt == [1, 4, 7, 8, 9, 2, 3]
    out = speculative_generate(pair.target, pair.drafter, prompt, 8, SpecConfig(method="rheo", temperature=0.0))
    greedy = pair.hf_model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)
    assert len(out.tokens) == 8 and out.tokens == greedy[0, len(prompt):].tolist()
    sampled = speculative_generate(pair.target, pair.drafter, prompt, 6, SpecConfig(temperature=1.0),
                                   generator=torch.Generator().manual_seed(0))
    assert 1 <= len(sampled.tokens) <= 6 and all(0 <= t < 256 for t in sampled.tokens)


def test_a_local_pair_takes_a_name_of_its_own(target_dir, tmp_path):
    pair = load_model_pair("my-llama", target_path=str(target_dir), head_path=str(write_local_head(tmp_path / "h")))
    assert pair.entry.name == "my-llama" and pair.entry.chat_format == "template"


@pytest.mark.parametrize("build, needle", [
    (dict(fc_in=3 * 32), f"head fc reads 96 features, the target gives 3 layers x hidden {H} = {3 * H}"),
    (dict(d2t_shift=200), "head d2t maps draft ids to target ids"),
    (dict(config_changes={"vocab_size": 32000}), "head target vocabulary 32000 != target vocabulary 256"),
    (dict(config_changes={"hidden_size": 128}), "head expects target hidden size 128, target has 64"),
    (dict(config_changes={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 9]}}),
     "head was trained on the outputs of target layers [1, 5, 9], rheo reads [1, 1, 0] from a 4-layer target"),
])
def test_a_head_that_does_not_fit_is_refused_before_weights_are_read(target_dir, tmp_path, monkeypatch,
                                                                      build, needle):
    head = write_local_head(tmp_path / "head", **build)
    monkeypatch.setattr(loading, "_load_target", lambda *a: pytest.fail("read the weights of a mismatched pair"))
    with pytest.raises(ModelMismatchError) as err:
        load_model_pair(target_path=str(target_dir), head_path=str(head))
    message = str(err.value)
    assert "\n" not in message and needle in message, message
    assert f"head {head} does not fit target {target_dir}" in message and "Fix: pair the head" in message


def test_a_target_with_too_few_layers_is_refused(tmp_path, monkeypatch):
    target = write_target(tmp_path / "t2", num_layers=2)
    monkeypatch.setattr(loading, "_load_target", lambda *a: pytest.fail("read the weights of a mismatched pair"))
    with pytest.raises(ModelMismatchError, match="target has 2 decoder layers, EAGLE-3 reads the hidden states of 3"):
        load_model_pair(target_path=str(target), head_path=str(write_local_head(tmp_path / "h")))


def test_a_missing_folder_or_no_name_is_one_line_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"head_path {tmp_path / 'nope'} is not a folder. Fix: pass"):
        load_model_pair(target_path=str(tmp_path), head_path=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="give a catalog name .* or both target_path= and head_path="):
        load_model_pair(head_path=str(tmp_path))
