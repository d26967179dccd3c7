"""Pack the shards of ``scripts/gen_corpus.py`` into the committed corpus + manifest.

Order is fixed (pass a, f, b; batch index; position in batch), so packing the same shards
twice gives the same bytes. The manifest states sizes per kind / setting / split and the
measured generation throughput (response tokens per second of batch wall time).

    python scripts/pack_corpus.py --shards .cache/draft_corpus/shards --out data/draft_corpus
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
from collections import Counter
from pathlib import Path

import torch

from rheo.cli import ArgumentParser, run_main
from rheo.io import atomic_write_bytes, make_dir
from rheo.paths import folder
from rheo.training.corpus import pack_samples, read_shard, save_corpus, shard_files
from rheo.training.prompt_templates import FOLLOWUPS


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default=str(folder("cache", "draft_corpus", "shards")))
    ap.add_argument("--out", default="data/draft_corpus")
    ap.add_argument("--passes", default="a,f,b", help="generation passes to pack (a: first turns, f: follow-ups, b: resampled)")
    args = ap.parse_args()
    files = [f for f in shard_files(args.shards) if f.stem.split("_")[0] in args.passes.split(",")]
    if not files:
        raise SystemExit(f"no shards in {args.shards}: run scripts/gen_corpus.py first")
    samples, seconds, timed_tokens, settings = [], 0.0, 0, Counter()
    records = {f: read_shard(f) for f in files}
    for f, rec in records.items():
        samples += rec["samples"]
        n_resp = sum(len(s["response"]) for s in rec["samples"])
        if "seconds" in rec:
            seconds += rec["seconds"]
            timed_tokens += n_resp
            settings[(rec["workers"], rec["threads"], rec["dtype"])] += 1
    corpus = pack_samples(samples)
    make_dir(Path(args.out))
    resp = corpus.lengths() - corpus.resp_start
    by = lambda key: {str(k): dict(sequences=int(v), response_tokens=int(resp[[i for i, s in enumerate(samples)  # noqa: E731
                                                                             if key(s) == k]].sum()))
                      for k, v in sorted(Counter(key(s) for s in samples).items())}
    manifest = dict(
        sequences=len(corpus), tokens=int(corpus.offsets[-1]), response_tokens=corpus.response_tokens(),
        held_out_sequences=int(corpus.held_out.sum()),
        held_out_response_tokens=int(resp[corpus.held_out].sum()),
        by_kind=by(lambda s: s["kind"]), by_temperature=by(lambda s: s["temperature"]),
        shards=len(files),
        by_pass={p: sum(len(records[f]["samples"]) for f in files if f.stem.startswith(p + "_"))
                 for p in ("a", "f", "b")},
        generation=dict(
            response_tokens_per_batch_second=round(timed_tokens / seconds, 1) if seconds else None,
            note="per worker process; workers ran side by side (workers x threads x dtype -> shards): "
                 + ", ".join(f"{w}x{t}x{d}: {n}" for (w, t, d), n in settings.items()),
            machine=f"{platform.machine()} {platform.processor() or ''}".strip(), torch=torch.__version__,
            max_new_tokens=256, batch=64),
        commands=["python scripts/gen_corpus.py --worker 0 --workers 2 & "
                  "python scripts/gen_corpus.py --worker 1 --workers 2",
                  f"python scripts/pack_corpus.py --shards {args.shards} --out {args.out}"],
    )
    # the user turns as text, for the contamination test (tests/test_training.py)
    users = sorted({s["key"].removesuffix("#b").removesuffix("#f") for s in samples} | set(FOLLOWUPS))
    atomic_write_bytes(Path(args.out) / "user_turns.json.gz", gzip.compress(json.dumps(users).encode(), mtime=0))
    manifest["user_turns"] = dict(file="user_turns.json.gz", count=len(users))
    path = save_corpus(corpus, Path(args.out), manifest)
    print(json.dumps(dict(manifest, path=str(path)), indent=1))


if __name__ == "__main__":
    run_main(main)
