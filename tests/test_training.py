"""Draft-head training data: contamination, split, corpus format, feature alignment, int8 heads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rheo.training import contamination as C
from rheo.training import prompts as P
from rheo.training.corpus import DEFAULT_DIR, Corpus, load_corpus, pack_samples, save_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return C.benchmark_ngrams()


def test_ngram_check_can_fail(bench):
    """The contamination check fires on a benchmark sentence pasted into a prompt."""
    turn = next(iter(C.benchmark_texts()))
    assert C.shares_ngram("Please answer this: " + " ".join(turn.split()[:12]), bench)
    assert not C.shares_ngram("Write a short poem about honeybees and the water cycle.", bench)


def test_built_prompts_are_clean_and_cover_every_kind(bench):
    prompts = P.build_corpus_prompts(0)
    assert not [p.text for p in prompts if C.shares_ngram(p.text, bench)]
    assert {p.kind for p in prompts} >= {"chat", "code", "math", "qa", "summary"}
    assert len({p.text for p in prompts}) == len(prompts)  # deduplicated


def test_committed_corpus_user_turns_share_no_8gram_with_benchmarks(bench):
    path = DEFAULT_DIR / "user_turns.json.gz"
    with gzip.open(path, "rt") as f:
        turns = json.load(f)
    assert len(turns) > 1000
    contaminated = [t[:80] for t in turns if C.shares_ngram(t, bench)]
    assert not contaminated, contaminated[:5]


def test_held_out_split_is_fixed_and_disjoint():
    texts = [f"prompt number {i}" for i in range(2000)]
    train, held = P.split_prompts(texts)
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(texts)
    share = len(held) / len(texts)
    assert 0.01 < share < 0.06  # HELD_OUT_PERCENT = 3, binomial sd ~0.4%
    assert P.split_prompts(list(reversed(texts)))[1] == list(reversed(held))  # order-independent


def test_committed_corpus_loads_and_is_big_enough():
    c = load_corpus()
    man = json.loads((DEFAULT_DIR / "manifest.json").read_text())
    # the corpus's size target: >= 1M response tokens (passes a, f and part of b)
    assert c.response_tokens() == man["response_tokens"] >= 1_000_000
    assert len(c) == sum(man["by_pass"].values()) == man["sequences"]
    assert c.held_out.any() and (~c.held_out).any()
    assert (c.resp_start > 0).all() and (c.resp_start < c.lengths()).all()
    assert set(np.unique(c.kind)) == {P.KINDS.index(k) for k in man["by_kind"]}


def test_pack_roundtrip_and_hash_check(tmp_path):
    samples = [dict(prompt=[1, 2, 3], response=[4, 5, 2], kind="math", temperature=0.7, split="train"),
               dict(prompt=[7], response=[8, 9], kind="followup", temperature=0.0, split="heldout")]
    save_corpus(pack_samples(samples), tmp_path, {})
    c = load_corpus(tmp_path)
    assert c.sequence(0).tolist() == [1, 2, 3, 4, 5, 2] and c.sequence(1).tolist() == [7, 8, 9]
    assert c.resp_start.tolist() == [3, 1] and c.held_out.tolist() == [False, True]
    assert P.KINDS[c.kind[1]] == "followup" and c.response_tokens() == 5
    np.savez_compressed(tmp_path / "corpus.npz", **{k: getattr(c, k) for k in Corpus.__dataclass_fields__
                                                      if k != "temperature"}, temperature=c.temperature * 0)
    with pytest.raises(ValueError, match="SHA-256"):
        load_corpus(tmp_path)


def test_batch_pairs_align_with_the_target_distribution():
    """Pair j holds (f_j, x_{j+1}) and is scored against p_{j+1} = softmax(W_d final_{j+1})."""
    from rheo.training.eagle3_train import batch_from_sequences

    g = torch.Generator().manual_seed(0)
    n, h, vd = 7, 4, 5
    seq = dict(input_ids=torch.arange(10, 10 + n), features=torch.randn(n, 3 * h, generator=g).half(),
               final=torch.randn(n, h, generator=g).half(), argmax=torch.arange(20, 20 + n), resp_start=3)
    w = torch.randn(vd, h, generator=g)
    embed = torch.nn.Embedding(40, h)
    b = batch_from_sequences([seq], embed, w)
    j = 2
    assert torch.equal(b["feats"][0, j], seq["features"][j].float())
    assert torch.equal(b["embeds"][0, j], embed.weight[seq["input_ids"][j + 1]].detach())
    want = torch.log_softmax(w @ seq["final"][j + 1].float(), -1)
    assert torch.allclose(b["logp"][0, j], want, atol=1e-6)
    assert int(b["argmax"][0, j]) == int(seq["argmax"][j + 1])
    assert b["valid"][0].tolist() == [False, True, True, True, True, False]  # resp_start - 2 .. n - 3


def test_feature_cache_matches_hidden_states_and_resumes(tmp_path):
    from rheo.models.hf_target import eagle3_feature_layers
    from rheo.models.tiny import make_tiny_llama
    from rheo.training.features import FeatureCache, build_features

    model = make_tiny_llama(seed=0)
    samples = [dict(prompt=[1, 2, 3], response=[4, 5, 6, 7], kind="chat", temperature=0.0, split="train"),
               dict(prompt=[3, 9], response=[8, 2], kind="qa", temperature=1.0, split="train")]
    corpus = pack_samples(samples)
    meta = dict(test=True)
    cache = FeatureCache(tmp_path, corpus, model.config.hidden_size, meta, create=True)
    build_features(model, cache, dtype=torch.float32, first=1)  # a run on the first sequence only
    assert cache.done.tolist() == [True, False]
    build_features(model, cache, dtype=torch.float32)
    assert cache.done.all()
    ids = torch.tensor([[3, 9, 8, 2]])
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    want = torch.cat([hs[i] for i in eagle3_feature_layers(model.config.num_hidden_layers)], -1)[0]
    got = FeatureCache(tmp_path, corpus, model.config.hidden_size, meta).sequence(1)
    assert torch.allclose(got["features"].float(), want, atol=1e-2)  # stored fp16
    with pytest.raises(ValueError, match="delete the folder"):
        FeatureCache(tmp_path, corpus, model.config.hidden_size, dict(test=False))


def test_int8_head_storage_roundtrip(tmp_path):
    from rheo.models.eagle3_head import dequantize_int8, quantize_int8

    g = torch.Generator().manual_seed(0)
    state = {"fc.weight": torch.randn(6, 12, generator=g), "d2t": torch.arange(4), "norm.weight": torch.ones(6)}
    q = quantize_int8(state)
    assert q["fc.weight"].dtype == torch.int8 and q["norm.weight"].dtype == torch.float32
    back = dequantize_int8(q)
    err = (back["fc.weight"] - state["fc.weight"]).abs().max() / state["fc.weight"].abs().max()
    assert err < 1 / 127 + 1e-3  # half a quantisation step per row, plus fp16 scale rounding
    assert torch.equal(back["d2t"], state["d2t"])


@torch.no_grad()
def test_ttt_loss_on_selected_pairs_equals_the_dense_computation():
    """ttt_forward computes logits only at valid pairs; it must equal the dense formula."""
    from rheo.models.eagle3_head import Eagle3Config, Eagle3Head
    from rheo.training.eagle3_train import ttt_forward, ttt_steps

    torch.manual_seed(0)
    cfg = Eagle3Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32,
                       vocab_size=40, draft_vocab_size=12, target_hidden_size=16, head_dim=8)
    head = Eagle3Head(cfg)
    for p in head.parameters():
        p.normal_(0, 0.3)
    head.d2t.copy_(torch.arange(12) * 3 - torch.arange(12))  # draft i -> target 3i
    head.t2d.zero_()
    head.t2d[torch.arange(12) * 3] = True
    b, m = 2, 9
    batch = dict(feats=torch.randn(b, m, 48), embeds=torch.randn(b, m, 16),
                 logp=torch.log_softmax(torch.randn(b, m, 12), -1), argmax=torch.randint(0, 40, (b, m)),
                 valid=torch.rand(b, m) < 0.6)
    batch["argmax"][0, :4] = torch.tensor([0, 3, 6, 9])  # some in the draft vocabulary
    losses, stats = ttt_forward(head, batch, 3, head.t2d.clone())
    j = torch.arange(m).expand(b, m)
    for k, logits in enumerate(ttt_steps(head, batch["feats"], batch["embeds"], 3), start=1):
        w = (batch["valid"] & head.t2d[batch["argmax"]] & (j >= k - 1)).float()
        ce = -(batch["logp"].exp() * torch.log_softmax(logits, -1)).sum(-1)
        assert torch.allclose(losses[k - 1], (ce * w).sum() / w.sum().clamp_min(1.0), atol=1e-5)
        ok = batch["valid"] & (j >= k - 1)
        hit = (head.draft_to_target()[logits.argmax(-1)] == batch["argmax"]) & ok
        assert stats[k - 1].tolist() == [int(hit.sum()), int(ok.sum())]


def test_warm_start_copies_the_output_rows_only_when_asked_and_only_for_the_same_vocabulary(tmp_path):
    from rheo.models.eagle3_head import save_head
    from rheo.models.tiny import make_tiny_llama
    from rheo.training import draft_head as td

    target = make_tiny_llama(seed=0, vocab_size=256, num_layers=3)
    ids = torch.arange(0, 256, 2)  # [128] a draft vocabulary
    trained = td.init_head(target, ids, "")
    with torch.no_grad():  # as if --train-lm-head had moved the output rows and the norm
        trained.lm_head.weight.add_(0.25)
        trained.norm.weight.mul_(2.0)
        trained.fc.weight.add_(0.5)
    save_head(trained, tmp_path / "h", dtype=torch.float32)

    body_only = td.init_head(target, ids, str(tmp_path / "h"))
    assert torch.equal(body_only.fc.weight, trained.fc.weight)
    assert torch.equal(body_only.lm_head.weight, target.lm_head.weight[ids])  # the target's rows
    assert not torch.equal(body_only.norm.weight, trained.norm.weight)

    full = td.init_head(target, ids, str(tmp_path / "h"), warm_output=True)
    assert torch.equal(full.lm_head.weight, trained.lm_head.weight)
    assert torch.equal(full.norm.weight, trained.norm.weight)
    with pytest.raises(ValueError, match="draft vocabulary"):
        td.init_head(target, torch.arange(1, 256, 2), str(tmp_path / "h"), warm_output=True)


def test_a_saved_heads_draft_vocabulary_is_recovered_for_eval_only(tmp_path):
    from rheo.models.eagle3_head import save_head
    from rheo.models.tiny import make_tiny_llama
    from rheo.training import draft_head as td

    target = make_tiny_llama(seed=0, vocab_size=256, num_layers=3)
    ids = torch.tensor([3, 7, 8, 40, 41, 200, 255])  # [7] an irregular draft vocabulary
    save_head(td.init_head(target, ids, ""), tmp_path / "h", dtype=torch.float16)
    reloaded = td.saved_head(str(tmp_path / "h"), target, "cpu")
    assert torch.equal(reloaded.draft_to_target().cpu(), ids)
    assert reloaded.t2d.nonzero().flatten().tolist() == ids.tolist()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        td.saved_head(str(tmp_path / "missing"), target, "cpu")


def test_training_data_features_are_the_adapters_features():
    """The training features (rheo.training.features) and the tree adapter read the same layers (a
    drift would silently break every head trained on the data)."""
    from rheo.models.hf_target import HFTarget, eagle3_feature_layers
    from rheo.models.tiny import make_tiny_llama
    from rheo.training.features import forward_features

    model = make_tiny_llama(seed=0, vocab_size=64, num_layers=7)
    ids = [3, 9, 27, 5, 11]
    with torch.no_grad():
        feats = forward_features(model, [np.array(ids)], eagle3_feature_layers(7))[0]["feats"]
        adapter = HFTarget(model).new_session().prefill(ids)  # [5, 3H]: the context's
    torch.testing.assert_close(torch.from_numpy(feats).to(adapter.dtype), adapter, atol=2e-3, rtol=2e-3)
