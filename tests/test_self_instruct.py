"""Self-instructed corpus prompts: parsing, deduplication, the plan, and the committed files."""

import gzip
import json

import numpy as np
import pytest

from rheo.training import contamination as C
from rheo.training import prompts as P
from rheo.training import self_instruct as SI
from rheo.training.corpus import DEFAULT_DIR, Corpus, concat_corpora, load_corpus, pack_samples

SI_DIR = DEFAULT_DIR / "selfinstruct"


def test_topics_are_parsed_from_the_first_line_and_filtered():
    text = " black holes; 2. comets, the Big Bang;; a very long topic that has far too many words in it\nArea: x"
    assert SI.parse_topics(text) == ["black holes", "comets", "the Big Bang"]
    assert SI.parse_topics("\n") == []
    assert SI.parse_topics(" 1990s music; 42") == []  # digits are list numbers or years, not topics


def test_requests_are_cleaned_and_junk_is_refused():
    assert SI.parse_request(' "How do I plant tulip bulbs in the autumn?"\nTopic: x') == \
        "How do I plant tulip bulbs in the autumn?"
    assert SI.parse_request(" Too short") is None
    assert SI.parse_request(" I'm ready to assist you with your request about cats.") is None
    assert SI.parse_request(" Topic: cats Message: what do cats eat every day") is None


def test_passages_end_at_a_full_sentence():
    words = " ".join(["word"] * 45)
    assert SI.parse_passage(f"{words}. And a cut-off sent") == f"{words}."
    assert SI.parse_passage("Too short.") is None


def test_dedupe_drops_exact_and_near_duplicates_and_keeps_distinct_texts():
    texts = ["How do I bake sourdough bread at home?",
             "how do I bake sourdough bread at home",  # exact after normalisation
             "How do I bake sourdough bread at home quickly?",  # near duplicate (Jaccard 6/7)
             "What is the tallest mountain in South America?"]
    assert SI.dedupe(texts) == [texts[0], texts[3]]
    assert SI.dedupe(texts, threshold=0.9) == [texts[0], texts[2], texts[3]]


def test_request_prompts_use_two_examples_of_the_style_on_other_topics():
    for style in SI.STYLES:
        for topic in ("beekeeping", SI.STYLES[style][0][0]):
            prompt = SI.request_prompt(style, topic)
            assert prompt.endswith(f"Topic: {topic}\nMessage:")
            assert prompt.count("Message:") == 3 and prompt.count(f"Topic: {topic}\n") == 1


def test_plan_is_deterministic_and_passage_styles_need_a_passage():
    topics = [f"topic {c}" for c in "abcdefghijklmnop"]
    jobs = SI.plan_requests(topics, {})
    assert jobs == SI.plan_requests(list(topics), {})
    assert all(j.style in SI.STYLES for j in jobs)
    with_passages = SI.plan_requests(topics, {t: "A paragraph." for t in topics})
    assert len(with_passages) == 3 * len(topics)
    assert {j.style for j in with_passages} & set(SI.PASSAGE_STYLES)
    for t in topics:  # three different styles per topic
        assert len({j.style for j in with_passages if j.topic == t}) == 3


def test_diversity_counts_distinct_trigrams():
    d = SI.diversity(["a b c d", "a b c d"])
    assert d["distinct_3grams"] == 2 and d["distinct_3gram_ratio"] == 0.5 and d["words_p50"] == 4


def test_concatenated_parts_keep_every_sequence():
    a = pack_samples([dict(prompt=[1, 2], response=[3], kind="math", temperature=0.0, split="train")])
    b = pack_samples([dict(prompt=[4], response=[5, 6], kind="instruct", temperature=1.0, split="heldout"),
                      dict(prompt=[7, 8, 9], response=[2], kind="followup", temperature=0.7, split="train")])
    c = concat_corpora([a, b])
    assert isinstance(c, Corpus) and len(c) == 3
    assert [c.sequence(s).tolist() for s in range(3)] == [[1, 2, 3], [4, 5, 6], [7, 8, 9, 2]]
    assert c.resp_start.tolist() == [2, 1, 3] and c.held_out.tolist() == [False, True, False]
    assert [P.KINDS[k] for k in c.kind] == ["math", "instruct", "followup"]


@pytest.mark.skipif(not (SI_DIR / "requests.json.gz").exists(), reason="no self-instructed requests committed")
def test_committed_self_instructed_requests_are_clean_and_unique():
    with gzip.open(SI_DIR / "requests.json.gz", "rt") as f:
        requests = json.load(f)
    bench = C.benchmark_ngrams()
    assert len(requests) > 500
    assert not [r["text"][:80] for r in requests if C.shares_ngram(r["text"], bench)]
    assert len({SI.normalise(r["text"]) for r in requests}) == len(requests)
    assert {r["style"] for r in requests} <= set(SI.STYLE_NAMES)


def test_committed_self_instructed_part_loads_and_its_user_turns_are_clean():
    c = load_corpus(SI_DIR)  # SHA-256 checked against the manifest
    man = json.loads((SI_DIR / "manifest.json").read_text())
    assert c.response_tokens() == man["response_tokens"] and len(c) == man["sequences"]
    assert set(np.unique(c.kind)) <= {P.KINDS.index("instruct"), P.KINDS.index("followup")}
    with gzip.open(SI_DIR / "user_turns.json.gz", "rt") as f:
        turns = json.load(f)
    bench = C.benchmark_ngrams()
    assert not [t[:80] for t in turns if C.shares_ngram(t, bench)]


def test_several_corpus_folders_load_as_one(tmp_path):
    from rheo.training.corpus import load_corpora, save_corpus, sha256

    a = pack_samples([dict(prompt=[1, 2], response=[3], kind="math", temperature=0.0, split="train")])
    b = pack_samples([dict(prompt=[4], response=[5, 6], kind="instruct", temperature=1.0, split="heldout")])
    save_corpus(a, tmp_path / "a", {})
    save_corpus(b, tmp_path / "b", {})
    one, sha_a = load_corpora(tmp_path / "a")
    assert len(one) == 1 and sha_a == sha256(tmp_path / "a" / "corpus.npz")  # one folder: its own hash
    both, sha_ab = load_corpora(f"{tmp_path / 'a'},{tmp_path / 'b'}")
    assert [both.sequence(s).tolist() for s in range(2)] == [[1, 2, 3], [4, 5, 6]]
    assert sha_ab not in (sha_a, load_corpora(tmp_path / "b")[1])
    assert load_corpora(f"{tmp_path / 'b'},{tmp_path / 'a'}")[1] != sha_ab  # the order is part of it
    with pytest.raises(ValueError, match="--corpus is empty"):
        load_corpora(" , ")


def test_a_truncated_compressed_shard_is_named(tmp_path):
    import gzip as _gzip

    from rheo.training.corpus import read_shard

    good = tmp_path / "s_00000.json.gz"
    good.write_bytes(_gzip.compress(json.dumps({"samples": [{"response": [1]}]}).encode()))
    assert read_shard(good)["samples"] == [{"response": [1]}]
    bad = tmp_path / "s_00001.json.gz"
    bad.write_bytes(good.read_bytes()[:12])
    with pytest.raises(ValueError, match="s_00001.json.gz is unreadable"):
        read_shard(bad)


@pytest.mark.slow
def test_a_packed_corpus_without_shards_is_left_alone(tmp_path):
    """With the packed corpus beside --out and no pass-s shards, the generator says so and stops
    (before loading the model: it would otherwise restart every pass from nothing)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "corpus.npz").write_bytes(b"packed")
    (tmp_path / "manifest.json").write_text(json.dumps(dict(response_tokens=1234567, sequences=42)))
    for extra in ([], ["--pack"]):
        done = subprocess.run([sys.executable, str(root / "scripts" / "gen_selfinstruct.py"), "--out",
                               str(tmp_path / "shards"), *extra], capture_output=True, text=True, timeout=120, cwd=root)
        assert done.returncode == 0, done.stderr
        assert "is packed: 1,234,567 response tokens in 42 sequences; nothing to generate" in done.stdout
    assert not (tmp_path / "shards").exists() and (tmp_path / "corpus.npz").read_bytes() == b"packed"
