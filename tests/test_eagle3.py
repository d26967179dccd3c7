"""EAGLE-3 head loading and drafting, against a tiny random Llama (CPU, fast).

A random head is written in exactly the official checkpoint layout (config.json
plus model.safetensors or pytorch_model.bin) and loaded against make_tiny_llama.
Numerical comparisons use atol 1e-4 on float32 logits (the batched and the
reference computation differ only in summation order).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.models.base import TreeView
from rheo.models.eagle3 import Eagle3LoadError, load_eagle3_drafter
from rheo.models.eagle3_head import attend
from rheo.models.hf_target import HFTarget
from rheo.models.tiny import make_tiny_llama
from toys import assert_greedy_match

H, VOCAB, DRAFT_VOCAB, HEADS, KV_HEADS, FFN = 64, 256, 120, 4, 2, 96
ATOL = 1e-4


def official_state(seed: int = 0, fc_in: int = 3 * H, d2t_shift: int = 0) -> tuple[dict, torch.Tensor]:
    """Random weights with official key names; returns (state, draft->target ids [DRAFT_VOCAB])."""
    g = torch.Generator().manual_seed(seed)
    hd = H // HEADS
    target_ids = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values + d2t_shift

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[target_ids.clamp(max=VOCAB - 1)] = True
    state = {
        "fc.weight": w(H, fc_in),
        "midlayer.self_attn.q_proj.weight": w(HEADS * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": w(KV_HEADS * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": w(KV_HEADS * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": w(H, HEADS * hd),
        "midlayer.mlp.gate_proj.weight": w(FFN, H),
        "midlayer.mlp.up_proj.weight": w(FFN, H),
        "midlayer.mlp.down_proj.weight": w(H, FFN),
        "midlayer.input_layernorm.weight": 1 + w(H),
        "midlayer.hidden_norm.weight": 1 + w(H),
        "midlayer.post_attention_layernorm.weight": 1 + w(H),
        "norm.weight": 1 + w(H),
        "lm_head.weight": w(DRAFT_VOCAB, H) * 5,
        "d2t": target_ids - torch.arange(DRAFT_VOCAB),
        "t2d": t2d,
    }
    return state, target_ids


def official_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": FFN,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 2048,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "hidden_act": "silu", "bias": False,
    }


def write_head(path, state, fmt="safetensors"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(official_config()))
    if fmt == "safetensors":
        save_file(state, str(path / "model.safetensors"))
    else:
        torch.save(state, path / "pytorch_model.bin")
    return path


@pytest.fixture(scope="module")
def tiny():
    return make_tiny_llama(seed=0, vocab_size=VOCAB, hidden_size=H)


@pytest.fixture(scope="module")
def drafter(tiny, tmp_path_factory):
    state, _ = official_state()
    return load_eagle3_drafter(write_head(tmp_path_factory.mktemp("head"), state), tiny)


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


def reference_chain_logits(drafter, sess, chain_tokens):
    """Plain re-computation of the draft logits after a chain of drafted tokens, one at a time."""
    head = drafter.head
    keys, values, hidden = sess.keys, sess.values, sess.root_hidden[None, None]
    s = sess.committed_len
    for i, tok in enumerate(chain_tokens, start=1):
        emb = drafter.embed_weight[torch.tensor([[tok]])]
        q, k, v = head.qkv(emb, hidden, torch.tensor([[s - 1 + i]]))
        keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        hidden = head.finish(attend(q, keys, values, None), hidden)
    return head.logits(hidden[0, 0]).float()


@torch.no_grad()
def test_batched_tree_draft_equals_each_branch_alone(tiny, drafter):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99, 140, 7]
    feats = target.new_session().prefill(prompt[:-1])
    sess = drafter.new_session()
    sess.prefill(prompt, feats)
    #          node: 0   1   2   3   4   5   6   7   8
    parents = [-1, 0, 0, 0, 1, 2, 2, 5, 4]
    depths = [0, 1, 1, 1, 2, 2, 2, 3, 3]
    tokens = [prompt[-1], 11, 42, 200, 3, 64, 65, 128, 250]
    tree = TreeView(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))
    layers = [[0], [1, 2, 3], [4, 5, 6], [7, 8]]
    got = {}
    for layer in layers:
        logits = sess.draft(tree, torch.tensor(layer))
        assert logits.shape == (len(layer), DRAFT_VOCAB)
        got.update({n: logits[i] for i, n in enumerate(layer)})
    assert torch.allclose(got[0], sess.root_logits)
    for node in range(1, len(tokens)):
        chain, n = [], node
        while n > 0:
            chain.insert(0, tokens[n])
            n = parents[n]
        ref = reference_chain_logits(drafter, sess, chain)
        assert torch.allclose(got[node], ref, atol=ATOL), node


@torch.no_grad()
def test_commit_drops_tree_state_and_matches_fresh_prefill(tiny, drafter):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99]
    accepted = [11, 42, 7]
    t_sess = target.new_session()
    sess = drafter.new_session()
    sess.prefill(prompt, t_sess.prefill(prompt[:-1]))
    tree = TreeView(torch.tensor([prompt[-1], 11, 50]), torch.tensor([-1, 0, 1]), torch.tensor([0, 1, 2]))
    for layer in ([0], [1], [2]):
        sess.draft(tree, torch.tensor(layer))
    full = prompt + accepted
    feats_full = target.new_session().prefill(full[:-1])
    sess.commit(torch.tensor(accepted), feats_full[len(prompt) - 1:])
    fresh = drafter.new_session()
    fresh.prefill(full, feats_full)
    assert sess.committed_len == fresh.committed_len == len(full) - 1
    assert torch.allclose(sess.root_logits, fresh.root_logits, atol=ATOL)
    assert torch.allclose(sess.keys, fresh.keys, atol=ATOL)


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_greedy_speculative_equals_hf_generate(tiny, drafter, method):
    target = HFTarget(tiny)
    prompt = [5, 17, 33, 2, 99, 140, 7]
    n_new = 24
    ref = tiny.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                        max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new)[0, len(prompt):].tolist()
    cfg = SpecConfig(method=method, k=4, m=1, depth=4, tree_size=10, temperature=0.0, sparse_top=None)
    out = speculative_generate(target, drafter, prompt, n_new, config=cfg, generator=torch.Generator().manual_seed(0))
    assert_greedy_match(out.tokens, ref, tiny, prompt)
    assert sum(out.accept_lengths) == n_new


@pytest.mark.parametrize("method", ["topk", "rheo"])
def test_sampling_runs_and_is_seeded(tiny, drafter, method):
    target = HFTarget(tiny)
    cfg = SpecConfig(method=method, k=4, m=1, depth=4, tree_size=10, temperature=1.0, sparse_top=32)
    runs = [speculative_generate(target, drafter, [5, 17, 33], 20, config=cfg,
                                 generator=torch.Generator().manual_seed(3)).tokens for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 20
    assert all(0 <= t < VOCAB for t in runs[0])


@torch.no_grad()
def test_training_time_test_matches_tree_drafting(tiny, drafter):
    """Step k of the unrolled training forward at pair j == drafting x_{j+1} at depth k-1 along the true path."""
    from rheo.training.eagle3_train import ttt_steps

    target = HFTarget(tiny)
    x = [5, 17, 33, 2, 99, 140, 7, 61, 200, 9]
    feats = target.new_session().prefill(x[:-1])  # [N-1, 3H]: f_j for pairs j = 0..N-2
    embeds = drafter.embed_weight[torch.tensor(x[1:])][None]
    steps = 3
    train_logits = list(ttt_steps(drafter.head, feats[None], embeds, steps))
    for k in range(1, steps + 1):
        for j in range(k - 1, len(x) - 1):
            r = j - (k - 1)  # the root's pair
            sess = drafter.new_session()
            sess.prefill(x[: r + 2], feats[: r + 1])
            chain = x[r + 2 : j + 2]  # drafted tokens at depths 1..k-1
            n = len(chain) + 1
            tree = TreeView(torch.tensor(x[r + 1 : j + 2]), torch.arange(-1, n - 1), torch.arange(n))
            for depth in range(n):
                logits = sess.draft(tree, torch.tensor([depth]))
            assert torch.allclose(train_logits[k - 1][0, j], logits[0], atol=ATOL), (k, j)


# ------------------------------------------------------------------ bad checkpoints
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
