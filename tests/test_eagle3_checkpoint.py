"""EAGLE-3 checkpoints: the official layout loads against a tiny random Llama, and a head that does
not fit is refused naming what is wrong (feature width, id map, head size, embeddings, truncated weights)."""

from __future__ import annotations

import json

import pytest
import torch
from eagle3_heads import (ATOL, DRAFT_VOCAB, FFN, HEADS, KV_HEADS, VOCAB, H,  # noqa: F401; drafter, tiny: fixtures
                          drafter, official_config, official_state, tiny, write_head)

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models.eagle3 import Eagle3LoadError, load_eagle3_drafter
from rheo.models.hf_target import HFTarget


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_loads_official_layout_and_maps_ids(tiny, tmp_path, fmt):
    state, target_ids = official_state(seed=1)
    d = load_eagle3_drafter(write_head(tmp_path, state, fmt), tiny)
    assert d.vocab_size == DRAFT_VOCAB
    assert torch.equal(d.draft_to_target, target_ids)
    assert torch.equal(d.head.midlayer.self_attn.q_proj.weight, state["midlayer.self_attn.q_proj.weight"])


def test_rejects_mismatched_heads(tiny, tmp_path):
    state, _ = official_state(fc_in=3 * 32)
    with pytest.raises(Eagle3LoadError, match="3 \\* hidden"):
        load_eagle3_drafter(write_head(tmp_path / "fc", state), tiny)
    state, _ = official_state(d2t_shift=VOCAB)
    with pytest.raises(Eagle3LoadError, match="outside the target vocabulary"):
        load_eagle3_drafter(write_head(tmp_path / "d2t", state), tiny)


@pytest.mark.parametrize("target_ids, needle", [
    (torch.arange(DRAFT_VOCAB) + 200, rf"\[200, {199 + DRAFT_VOCAB}\]"),  # runs past the 256-token vocabulary
    (torch.arange(DRAFT_VOCAB) - 1, rf"\[-1, {DRAFT_VOCAB - 2}\]"),
    (torch.zeros(DRAFT_VOCAB, dtype=torch.long), "two draft ids"),
])
def test_draft_ids_must_map_injectively_into_the_target_vocabulary(tiny, tmp_path, target_ids, needle):
    state, _ = official_state()
    state["d2t"] = target_ids - torch.arange(DRAFT_VOCAB)
    with pytest.raises(Eagle3LoadError, match=needle):
        load_eagle3_drafter(write_head(tmp_path, state), tiny)


def _norm_eps(d) -> set:
    layer = d.head.midlayer
    return {m.variance_epsilon for m in (layer.input_layernorm, layer.hidden_norm,
                                         layer.post_attention_layernorm, d.head.norm)}


def test_config_without_rms_norm_eps_uses_the_official_1e6(tiny, tmp_path):
    state, _ = official_state()
    path = write_head(tmp_path / "head", state)
    config = official_config()
    del config["rms_norm_eps"]
    (path / "config.json").write_text(json.dumps(config))
    assert _norm_eps(load_eagle3_drafter(path, tiny)) == {1e-6}


def test_head_dim_that_differs_from_hidden_over_heads_follows_the_official_code(tiny, drafter, tmp_path):
    state, _ = official_state()
    path = write_head(tmp_path / "head", state)
    (path / "config.json").write_text(json.dumps({**official_config(), "head_dim": 2 * H // HEADS}))
    d = load_eagle3_drafter(path, tiny)  # the official code ignores head_dim: so do we
    assert d.head.cfg.head_dim == H // HEADS
    sess, ref = d.new_session(), drafter.new_session()
    feats = torch.randn(5, 3 * H, generator=torch.Generator().manual_seed(1))
    sess.prefill([3, 4, 5, 6, 7, 8], feats)
    ref.prefill([3, 4, 5, 6, 7, 8], feats)
    assert torch.allclose(sess.root_logits, ref.root_logits, atol=ATOL)


def test_weights_shaped_for_another_head_dim_are_refused_clearly(tiny, tmp_path):
    state, _ = official_state()
    g = torch.Generator().manual_seed(2)
    hd = 2 * H // HEADS
    for name, rows in (("q_proj", HEADS * hd), ("k_proj", KV_HEADS * hd), ("v_proj", KV_HEADS * hd)):
        state[f"midlayer.self_attn.{name}.weight"] = torch.randn(rows, 2 * H, generator=g)
    state["midlayer.self_attn.o_proj.weight"] = torch.randn(H, HEADS * hd, generator=g)
    path = write_head(tmp_path / "head", state)
    (path / "config.json").write_text(json.dumps({**official_config(), "head_dim": hd}))
    with pytest.raises(Eagle3LoadError, match="head_dim"):
        load_eagle3_drafter(path, tiny)


def _small_head_state(hidden: int, target_hidden: int, seed: int = 3) -> dict:
    """An official-layout head of width ``hidden`` reading a target of width ``target_hidden``."""
    state, _ = official_state()
    g = torch.Generator().manual_seed(seed)
    heads, kv, ffn = 4, 2, 48
    hd = hidden // heads
    shapes = {"fc.weight": (hidden, 3 * target_hidden), "midlayer.self_attn.q_proj.weight": (heads * hd, 2 * hidden),
              "midlayer.self_attn.k_proj.weight": (kv * hd, 2 * hidden),
              "midlayer.self_attn.v_proj.weight": (kv * hd, 2 * hidden),
              "midlayer.self_attn.o_proj.weight": (hidden, heads * hd), "midlayer.mlp.gate_proj.weight": (ffn, hidden),
              "midlayer.mlp.up_proj.weight": (ffn, hidden), "midlayer.mlp.down_proj.weight": (hidden, ffn),
              "lm_head.weight": (DRAFT_VOCAB, hidden)}
    for name, shape in shapes.items():
        state[name] = torch.randn(*shape, generator=g) * 0.2
    for name in ("midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
                 "midlayer.post_attention_layernorm.weight", "norm.weight"):
        state[name] = torch.ones(hidden)
    return state


def _small_config(hidden: int, **extra) -> dict:
    return {**official_config(), "hidden_size": hidden, "intermediate_size": 48, **extra}


def test_head_with_target_hidden_size_uses_its_own_embeddings(tiny, tmp_path):
    small = H // 2
    state = _small_head_state(small, H)
    own = torch.randn(VOCAB, small, generator=torch.Generator().manual_seed(4))
    path = write_head(tmp_path / "head", {**state, "embed_tokens.weight": own})
    (path / "config.json").write_text(json.dumps(_small_config(small, target_hidden_size=H)))
    d = load_eagle3_drafter(path, tiny)
    assert torch.equal(d.embed_weight, own)  # as in the official code, not the target's [VOCAB, H]
    cfg = SpecConfig(method="rheo", k=4, m=1, depth=3, tree_size=8, temperature=1.0, sparse_top=None)
    out = speculative_generate(HFTarget(tiny), d, [5, 17, 33], 8, config=cfg, generator=torch.Generator().manual_seed(0))
    assert len(out.tokens) == 8


def test_head_with_target_hidden_size_but_no_embeddings_is_refused(tiny, tmp_path):
    small = H // 2
    path = write_head(tmp_path / "head", _small_head_state(small, H))
    (path / "config.json").write_text(json.dumps(_small_config(small, target_hidden_size=H)))
    with pytest.raises(Eagle3LoadError, match="target_hidden_size=64 != hidden_size=32.*embed_tokens"):
        load_eagle3_drafter(path, tiny)


def test_checkpoint_embeddings_win_over_the_targets_as_in_the_official_code(tiny, tmp_path):
    state, _ = official_state()
    own = torch.randn(VOCAB, H, generator=torch.Generator().manual_seed(5))
    d = load_eagle3_drafter(write_head(tmp_path / "head", {**state, "embed_tokens.weight": own}), tiny)
    assert torch.equal(d.embed_weight, own)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_truncated_head_weights_name_the_file_and_the_fix(tiny, tmp_path, fmt):
    from rheo.models.weights import CorruptWeightsError

    state, _ = official_state()
    path = write_head(tmp_path / "head", state, fmt)
    weights = path / ("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CorruptWeightsError) as err:
        load_eagle3_drafter(path, tiny)
    assert str(weights) in str(err.value) and "fix:" in str(err.value)


def test_saved_head_config_omits_target_hidden_size_equal_to_hidden(tmp_path):
    """So that the official code (which reads its presence as "own embeddings") loads our heads right."""
    from rheo.models.eagle3_head import Eagle3Config, Eagle3Head, save_head

    cfg = Eagle3Config(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       intermediate_size=FFN, vocab_size=VOCAB, draft_vocab_size=DRAFT_VOCAB, target_hidden_size=H)
    save_head(Eagle3Head(cfg), tmp_path / "saved")
    written = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "target_hidden_size" not in written and written["hidden_size"] == H
    assert not [p for p in (tmp_path / "saved").iterdir() if p.name.startswith(".tmp")]
