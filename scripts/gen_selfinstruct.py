"""Generate the self-instructed part of the draft-head corpus (rheo.training.self_instruct).

Passes, in order (each waits until the previous one is complete, so workers can share them):

* ``t``  topic lists over the hand-written areas (3 samples per area, T = 0.8 / 1.0 / 1.0);
* ``u``  narrower topics: the same prompt with first-level topics as areas (T = 0.8);
* ``w``  a paragraph written by the model for every fourth topic (T = 0.7), for the
  rewrite / summarise requests;
* ``r``  user requests written by the model (few-shot, T = 0.9); after ``r`` the cleaned,
  deduplicated, contamination-filtered requests are written to ``requests.json.gz``;
* ``s``  the target answers every request with its chat template, <= 256 tokens: greedy for
  half of them, T = 0.7 and T = 1.0 for a quarter each (by a hash of the request);
* ``q``  for every third answer that ended, the model writes the user's next message;
* ``g``  the target answers those two-turn conversations (the first answer's setting).

Passes ``s`` and ``g`` are the corpus (kinds ``instruct`` and ``followup``); the others only
make prompts. Each batch is one shard (``<pass>_<batch>.json.gz``, written atomically) in
``--out``; batch k of a pass belongs to worker ``k % workers``; a rerun skips the shards written under
the key it would write (rheo.training.shard_keys), so a killed run continues where it stopped and a run
of other settings generates them again; ``requests.json.gz`` is rebuilt when its shards change. ``--target-tokens`` bounds the
response tokens of passes s + g. Target features for training are kept under
``--features-dir`` (not committed).

Once packed (``--pack``), the corpus is ``corpus.npz`` + ``manifest.json`` + ``requests.json.gz``
beside ``--out``, and the shards are left out of git: with a packed corpus and no shards of
pass s, this script says so and does nothing (the shards are in git history, for anyone who
wants to extend the corpus).

    python scripts/gen_selfinstruct.py --worker 0 --workers 2 & python scripts/gen_selfinstruct.py --worker 1 --workers 2
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List

import gen_corpus  # scripts/ is on sys.path when this file runs
import numpy as np
import torch
from tqdm import tqdm

from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.io import atomic_write, make_dir
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.paths import folder
from rheo.resume_key import digest
from rheo.training import self_instruct as SI
from rheo.training.contamination import benchmark_ngrams, shares_ngram
from rheo.training.corpus import pack_samples, read_shard, save_corpus
from rheo.training.prompts import is_held_out
from rheo.training.shard_keys import counted, run_settings, shard_key, stored_key

ANSWER_SETTINGS = (0.0, 0.0, 0.7, 1.0)
META_PASSES = ("t", "u", "w", "r", "q")
MAX_TOPICS = 2400


def write_shard(path: Path, record: Dict) -> None:
    atomic_write(path, lambda f: f.write(gzip.compress(json.dumps(record).encode(), mtime=0)))


def shards(out: Path, name: str, settings: Dict | None = None) -> List[Path]:
    """The shards of pass ``name`` in ``out`` (with ``settings``: those that count for a run of them)."""
    found = sorted(out.glob(f"{name}_*.json.gz"), key=lambda p: int(p.name.split("_")[1].split(".")[0]))
    return found if settings is None else counted(found, settings)


def samples_of(out: Path, name: str, settings: Dict | None = None) -> List[Dict]:
    return [s for p in shards(out, name, settings) for s in read_shard(p)["samples"]]


class Runner:
    def __init__(self, args, model, tok):
        self.args, self.model, self.tok = args, model, tok
        self.out = Path(args.out)
        newline = [i for t, i in tok.get_vocab().items() if "\u010a" in t]  # byte-level "\n"
        self.stop_line = sorted(set(newline + [tok.eos_token_id]))
        self.stop_para = sorted({i for t, i in tok.get_vocab().items() if "\u010a\u010a" in t} | {tok.eos_token_id})
        self.layers = eagle3_feature_layers(model.config.num_hidden_layers) if args.features else None
        self.settings = run_settings(args)

    def batches(self, convs: List[Dict]) -> List[List[Dict]]:
        return gen_corpus.batches_by_setting(convs, self.args.batch)

    def wait_for(self, name: str, n_batches: int) -> None:
        while len(shards(self.out, name, self.settings)) < n_batches:
            time.sleep(15)

    def corpus_tokens(self, expected: Dict[str, dict] | None = None) -> int:
        """Response tokens of passes s and g that count for this run (shard_keys.counted)."""
        return sum(len(s["response"]) for name in ("s", "g")
                   for p in counted(shards(self.out, name), self.settings, expected) for s in read_shard(p)["samples"])

    def run(self, name: str, convs: List[Dict], max_new: int = 0, stop: List[int] | None = None) -> bool:
        """Generate this worker's batches of pass ``name``; False once the token target is reached."""
        batches = self.batches(convs)
        mine = [k for k in range(len(batches)) if k % self.args.workers == self.args.worker]
        bar = tqdm(mine, desc=f"pass {name} worker {self.args.worker}/{self.args.workers}", mininterval=30)
        keys = {f"{name}_{k:05d}.json.gz": {**shard_key(self.settings, name, k, b), "max_new": max_new,
                                            "stop": stop} for k, b in enumerate(batches)}
        for k in bar:
            path = self.out / f"{name}_{k:05d}.json.gz"
            key = keys[path.name]
            if stored_key(path) == key:  # done under this key; else (re)generated
                continue
            if name not in META_PASSES and self.corpus_tokens(keys) >= self.args.target_tokens:
                return False
            t0, seed = time.time(), self.args.seed * 100003 + SI.stable_hash(name) + k
            if name in META_PASSES:
                samples = gen_corpus.complete_batch(self.model, self.tok, batches[k], max_new, seed, stop)
            else:
                samples, feats = gen_corpus.generate_batch(self.model, self.tok, batches[k],
                                                           self.args.max_new_tokens, seed, self.layers)
                if feats is not None:
                    fdir = make_dir(Path(self.args.features_dir))
                    atomic_write(fdir / f"{name}_{k:05d}.feats.npz", lambda f: np.savez(f, **feats))
            record = dict(pass_=name, batch=k, seconds=round(time.time() - t0, 2), worker=self.args.worker,
                          workers=self.args.workers, threads=self.args.threads, dtype=self.args.dtype,
                          device=self.args.device, batch_size=len(batches[k]), key=key, samples=samples)
            write_shard(path, record)
        self.wait_for(name, len(batches))
        return True


def topic_convs(areas: List[str], temps) -> List[Dict]:
    return [dict(text=SI.topic_prompt(a), key=f"{a}#{j}", temperature=t, n_chars=len(a), meta=dict(area=a))
            for a in areas for j, t in enumerate(temps)]


def collect_topics(out: Path, settings: Dict | None = None) -> List[str]:
    found = [t for name in ("t", "u") for s in samples_of(out, name, settings) for t in SI.parse_topics(s["text"])]
    return SI.dedupe(found, threshold=0.99)[:MAX_TOPICS]


def build_requests(out: Path, settings: Dict | None = None) -> List[Dict]:
    """Requests from pass r (+ the passage styles), cleaned, deduplicated, filtered."""
    written = {s["key"]: s for s in samples_of(out, "r", settings)}
    topics = collect_topics(out, settings)
    passages = {s["topic"]: p for s in samples_of(out, "w", settings) if (p := SI.parse_passage(s["text"]))}
    cands = []
    for job in SI.plan_requests(topics, passages):
        if job.passage is not None:
            cands.append(dict(text=SI.passage_request(job.style, job.topic, job.passage), style=job.style, topic=job.topic))
        elif (s := written.get(f"{job.style}|{job.topic}")) and (text := SI.parse_request(s["text"])):
            cands.append(dict(text=text, style=s["style"], topic=job.topic))
    keep = set(SI.dedupe([c["text"] for c in cands]))
    bench = benchmark_ngrams()
    seen, out_list = set(), []
    for c in cands:
        if c["text"] in keep and c["text"] not in seen and not shares_ngram(c["text"], bench):
            seen.add(c["text"])
            out_list.append(c)
    return out_list


def answer_convs(requests: List[Dict]) -> List[Dict]:
    convs = []
    for r in requests:
        h = SI.stable_hash("answer", r["text"])
        convs.append(dict(messages=[{"role": "user", "content": r["text"]}], kind="instruct",
                          split="heldout" if is_held_out(r["text"]) else "train", key=r["text"],
                          n_chars=len(r["text"]), h=h, temperature=ANSWER_SETTINGS[h % 4]))
    return sorted(convs, key=lambda c: c["h"])


def packed_without_shards(out: Path) -> Dict | None:
    """The manifest of a corpus packed beside ``out`` whose pass-s shards are not here, else None."""
    manifest, corpus = out.parent / "manifest.json", out.parent / "corpus.npz"
    if manifest.is_file() and corpus.is_file() and not shards(out, "s"):
        return json.loads(manifest.read_text())
    return None


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data/draft_corpus/selfinstruct/shards")
    ap.add_argument("--features-dir", default=str(folder("cache", "draft_corpus", "selfinstruct_feats")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=positive_int, default=64)
    ap.add_argument("--max-new-tokens", type=positive_int, default=256)
    ap.add_argument("--target-tokens", type=positive_int, default=1_600_000)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=positive_int, default=1)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-features", dest="features", action="store_false")
    ap.add_argument("--pack", action="store_true",
                    help="pack the finished shards of passes s and g into corpus.npz + manifest.json beside --out")
    args = ap.parse_args()
    done = packed_without_shards(Path(args.out))
    if done is not None:
        print(f"{Path(args.out).parent / 'corpus.npz'} is packed: {done['response_tokens']:,} response tokens in "
              f"{done['sequences']:,} sequences; nothing to generate or pack. To extend it, restore the shards "
              f"first (git log --diff-filter=D -- {args.out} names the commit that removed them)")
        return
    if args.pack:
        print(json.dumps(pack(Path(args.out)), indent=1))
        return
    if not 0 <= args.worker < args.workers:
        ap.error(f"--worker must be in [0, {args.workers - 1}]")
    torch.set_num_threads(args.threads)
    out = make_dir(Path(args.out))
    model, tok = load_smollm2(dtype=getattr(torch, args.dtype))
    run = Runner(args, model.to(args.device), tok)

    run.run("t", topic_convs(list(SI.AREAS), (0.8, 1.0, 1.0)), 60, run.stop_line)
    first = sorted({t for s in samples_of(out, "t", run.settings) for t in SI.parse_topics(s["text"])},
                   key=lambda t: SI.stable_hash(t))
    run.run("u", topic_convs(first[:600], (0.8,)), 60, run.stop_line)
    topics = collect_topics(out, run.settings)
    run.run("w", [dict(text=SI.passage_prompt(t), key=t, temperature=0.7, n_chars=len(t), meta=dict(topic=t))
                  for t in topics if SI.stable_hash("passage", t) % 4 == 0], 150, run.stop_para)
    jobs = [j for j in SI.plan_requests(topics, {}) if j.style in SI.STYLES]
    run.run("r", [dict(text=SI.request_prompt(j.style, j.topic), key=f"{j.style}|{j.topic}", temperature=0.9,
                       n_chars=len(j.topic), meta=dict(style=j.style, topic=j.topic)) for j in jobs], 64, run.stop_line)
    req_path, key_path = out.parent / "requests.json.gz", out.parent / "requests.key.json"
    key = digest([stored_key(p) for name in ("t", "u", "w", "r") for p in shards(out, name, run.settings)])
    if not (req_path.exists() and key_path.is_file() and key_path.read_text() == key):  # built from these shards
        requests = build_requests(out, run.settings)
        atomic_write(req_path, lambda f: f.write(gzip.compress(json.dumps(requests, indent=0).encode(), mtime=0)))
        atomic_write(key_path, lambda f: f.write(key.encode()))
    with gzip.open(req_path, "rt") as f:
        requests = json.load(f)
    if run.run("s", answer_convs(requests)):
        pass_q_and_g(run, out)
    print(f"worker {args.worker}: {run.corpus_tokens()} response tokens (passes s, g) in {out}")


def pack(out: Path) -> Dict:
    """Passes s then g (batch order) -> ``out.parent``/corpus.npz, manifest.json, user_turns.json.gz."""
    files = shards(out, "s") + shards(out, "g")
    if not files:
        raise SystemExit(f"no shards of passes s or g in {out}: run scripts/gen_selfinstruct.py first")
    if not (out.parent / "requests.json.gz").is_file():
        raise SystemExit(f"no {out.parent / 'requests.json.gz'}: pass r has not finished")
    records = [read_shard(f) for f in files]
    samples = [s for r in records for s in r["samples"]]
    corpus = pack_samples(samples)
    resp = corpus.lengths() - corpus.resp_start
    folder = out.parent
    users = sorted({s["key"].split("#g\x1f")[0] for s in samples} | {s["key"].split("#g\x1f")[1]
                                                                        for s in samples if "#g\x1f" in s["key"]})
    atomic_write(folder / "user_turns.json.gz", lambda f: f.write(gzip.compress(json.dumps(users).encode(), mtime=0)))
    with gzip.open(folder / "requests.json.gz", "rt") as f:
        requests = json.load(f)
    seconds = sum(r["seconds"] for r in records)
    manifest = dict(
        sequences=len(corpus), tokens=int(corpus.offsets[-1]), response_tokens=corpus.response_tokens(),
        held_out_sequences=int(corpus.held_out.sum()), held_out_response_tokens=int(resp[corpus.held_out].sum()),
        by_pass={p: sum(len(r["samples"]) for r in records if r["pass_"] == p) for p in ("s", "g")},
        by_temperature={str(t): int(n) for t, n in zip(*np.unique(corpus.temperature, return_counts=True))},
        requests=dict(count=len(requests), styles=dict(Counter(r["style"] for r in requests)),
                      topics=len({r["topic"] for r in requests})),
        diversity=dict(selfinstruct=SI.diversity([r["text"] for r in requests])),
        generation=dict(response_tokens_per_batch_second=round(int(resp.sum()) / seconds, 1),
                        settings=sorted({f"{r['workers']} workers x {r['threads']} thread, {r['dtype']}, "
                                         f"batch {r['batch_size']}" for r in records})),
        user_turns=dict(file="user_turns.json.gz", count=len(users)),
        commands=["python scripts/gen_selfinstruct.py --worker 0 --workers 2 & "
                  "python scripts/gen_selfinstruct.py --worker 1 --workers 2",
                  f"python scripts/gen_selfinstruct.py --pack --out {out}"])
    base = folder.parent / "user_turns.json.gz"
    if base.exists():
        with gzip.open(base, "rt") as f:
            manifest["diversity"]["templated"] = SI.diversity(json.load(f))
    save_corpus(corpus, folder, manifest)
    return manifest


def pass_q_and_g(run: Runner, out: Path) -> None:
    ended = [s for s in samples_of(out, "s", run.settings) if s["response"] and s["response"][-1] == run.tok.eos_token_id][::3]
    answers = {s["key"]: run.tok.decode(s["response"][:-1]) for s in ended}
    run.run("q", [dict(text=SI.followup_prompt(s["key"], answers[s["key"]]), key=s["key"], temperature=0.9,
                       n_chars=len(s["key"]), meta=dict(setting=s["temperature"], split=s["split"])) for s in ended],
            64, run.stop_line)
    convs = []
    for q in samples_of(out, "q", run.settings):
        follow = SI.parse_request(q["text"], min_words=2)
        if follow is None:
            continue
        msgs = [{"role": "user", "content": q["key"]}, {"role": "assistant", "content": answers[q["key"]]},
                {"role": "user", "content": follow}]
        convs.append(dict(messages=msgs, kind="followup", split=q["split"], key=q["key"] + "#g\x1f" + follow,
                          n_chars=len(answers[q["key"]]), temperature=q["setting"], h=SI.stable_hash(q["key"], follow)))
    run.run("g", sorted(convs, key=lambda c: (c["temperature"], c["h"])))


if __name__ == "__main__":
    run_main(main)
