"""The speed tables' noise floor: Top-K against an exact copy of itself, timed side by side (an A/A check).

One process, one torch thread, the embedded pair on the paper tree (``method=topk``'s defaults), the
speed experiment's settings (64 new tokens, T = 1; dtype=auto: bf16 where the CPU has bf16 instructions,
else float32): for every (suite, item, turn) the two copies generate the same prompt with the same seed,
one after the other, the order turning from item to item, after one untimed warm-up each, exactly as
``alongside`` times two methods in one job. They must emit the
same tokens (checked), so the only difference is when each ran: the ratio of the copies' tokens/s (ratio
of sums, copy B over copy A) has expected value 1, and its 95% interval (cluster bootstrap over items) is
the smallest speed difference the harness can tell on this machine. Every speed table states it
(eval.report.speed.noise_floor reads the summary this writes).

Writes ``speed_check.json`` (the summary), ``speed_check.md`` and ``rows.jsonl`` (one line per timed
prompt, rewritten after each item: a rerun with the same settings resumes) into ``--out``. Run it alone
on the machine (``make speed-check``; ARGS="--limit 1" for a quick look).

    .venv/bin/python scripts/speed_check.py --limit 6
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from rheo.cli import ArgumentParser, path_arg, positive_int, run_main
from rheo.paths import folder

#: items per suite of the default run (36 items, 42 prompts): 22 min 42 s alone on a 2-core AMD EPYC VM at one thread
DEFAULT_LIMIT = 6
COPIES = ("A", "B")


def _settings(args) -> dict:
    return {"model": args.model, "method": "topk", "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens, "dtype": args.dtype, "limit": args.limit, "seed": 0}


def _config(args):
    from eval.conf.compose import compose_config

    return compose_config([f"model={args.model}", "method=topk", "dataset=all", f"limit={args.limit}",
                           f"max_new_tokens={args.max_new_tokens}", f"temperature={args.temperature}",
                           f"dtype={args.dtype}", "num_threads=1", "baseline=false", "profile_phases=false"])


def _done(path: Path, settings: dict) -> list[dict]:
    """The rows of an earlier run with the same settings (a resume), else none."""
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("settings") == settings]


def summary(rows: pd.DataFrame, draws: int = 2000) -> dict:
    """Copy B's tokens/s over copy A's (ratio of sums; same tokens, so Σ wall A / Σ wall B) with its 95%
    interval, a cluster bootstrap over items; and the per-item geometric mean."""
    from eval.report.analysis import cluster_bootstrap, item_clusters

    by_item = rows.assign(_item=item_clusters(rows)).groupby("_item")[["wall_A", "wall_B"]].sum()
    sums = by_item.to_numpy(dtype=float)
    low, high = cluster_bootstrap(sums, lambda t: t[:, 0] / t[:, 1], draws=draws)
    logs = np.log(by_item["wall_A"] / by_item["wall_B"])
    return {"ratio": float(sums[:, 0].sum() / sums[:, 1].sum()), "low": low, "high": high,
            "per_item_geomean": float(math.exp(logs.mean())), "items": int(len(by_item)), "rows": int(len(rows)),
            "tokens": int(rows["new_tokens"].sum())}


def markdown(got: dict) -> str:
    from eval.report.analysis import fmt_interval
    from eval.report.markdown import markdown_table

    body = [[got["items"], got["rows"], f"{got['tok_s_A']:.1f}", f"{got['tok_s_B']:.1f}",
             fmt_interval(got["ratio"], got["low"], got["high"], 3), f"{got['per_item_geomean']:.3f}"]]
    return ("## Noise floor: Top-K against an exact copy of itself, side by side\n\n"
            f"{got['device_name']}, {got['num_threads']} thread(s), {got['run_dtype']}, T={got['temperature']:g}, "
            f"{got['max_new_tokens']} new tokens, paper tree, {got['date']}; the same tokens from both copies on "
            "every prompt (checked). tok/s ratio = copy B over copy A, ratio of sums [95% CI, cluster bootstrap "
            "over items]; its expected value is 1.\n\n"
            + markdown_table(["items", "prompts", "tok/s A", "tok/s B", "tok/s ratio B / A", "per-item geometric mean"],
                             body) + "\n")


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, help="items per suite (mt_bench: both turns)")
    ap.add_argument("--max-new-tokens", type=positive_int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                    help="auto: bfloat16 on a CPU with bf16 instructions, else float32 (as dtype=auto runs)")
    ap.add_argument("--model", default="smollm2_135m", help="a catalog pair (default: the embedded one)")
    ap.add_argument("--out", type=path_arg, default=folder("tables") / "speed_check")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from tqdm import tqdm

    from eval.conf.schema import run_dtype
    from eval.conf.validate import check_run
    from eval.measure.generation import generate
    from eval.measure.pairs import load_pair, pair_args
    from eval.measure.realized import _timed
    from eval.prompts.sources import load_prompts
    from eval.prompts.suites import chat_messages
    from eval.store.code_version import code_version
    from eval.store.committed import write_outputs
    from eval.store.keys import generation_seed
    from rheo.paths import resolve_path
    from rheo.timing import device_name

    cfg = _config(args)
    spec = check_run(cfg).spec
    dtype = run_dtype(cfg).dtype
    settings, out = _settings(args), Path(args.out)
    rows = _done(out / "rows.jsonl", settings)
    seen = {(r["dataset"], r["item_id"]) for r in rows}
    items = [item for suite in load_prompts(cfg, resolve_path).values() for item in suite]
    todo = [(i, item) for i, item in enumerate(items) if (item.suite, item.item_id) not in seen]
    print(f"speed check: Top-K against a copy of itself, {len(items)} items ({len(items) - len(todo)} done), "
          f"{args.max_new_tokens} tokens, T={args.temperature:g}, {args.dtype}, 1 thread -> {out}", flush=True)
    if todo:
        pair = load_pair(*pair_args(cfg))
        eos = list(pair.eos_token_ids) or None

        def run(prompt, seed):
            gen = torch.Generator().manual_seed(seed)
            return _timed(lambda: generate(pair, spec, prompt, int(cfg.max_new_tokens), gen, eos, device="cpu"), "cpu")

        warm = pair.format_chat(chat_messages(items[0], 0, []))
        for _ in COPIES:  # one untimed warm-up per copy, as the harness does per method
            run(warm, 0)
        bar = tqdm(total=sum(len(item.turns) for _, item in todo), desc="speed check", unit="prompt")
        for index, item in todo:
            answers = []
            for turn in range(len(item.turns)):
                prompt = pair.format_chat(chat_messages(item, turn, answers))
                seed = generation_seed(item.suite, item.item_id, turn, 0)
                timed = {}
                for copy in (COPIES if index % 2 == 0 else COPIES[::-1]):
                    timed[copy] = run(prompt, seed)
                (out_a, wall_a), (out_b, wall_b) = timed["A"], timed["B"]
                if list(out_a.tokens) != list(out_b.tokens):
                    raise RuntimeError(f"the two copies of Top-K emitted different tokens on {item.suite} item "
                                       f"{item.item_id} turn {turn}: not an A/A check (a nondeterministic kernel?)")
                rows.append({"settings": settings, "dataset": item.suite, "item_id": item.item_id, "turn": turn,
                             "first": "A" if index % 2 == 0 else "B", "new_tokens": len(out_a.tokens),
                             "wall_A": wall_a, "wall_B": wall_b})
                answers.append(pair.tokenizer.decode(list(out_a.tokens), skip_special_tokens=True))
                bar.update(1)
            write_outputs([(out / "rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())], out)
        bar.close()
    frame = pd.DataFrame(rows)
    got = {**summary(frame), **settings, "run_dtype": dtype, "device_name": device_name("cpu"), "num_threads": 1,
           "date": _dt.date.today().isoformat(), "code_version": code_version(),
           "tok_s_A": float(frame["new_tokens"].sum() / frame["wall_A"].sum()),
           "tok_s_B": float(frame["new_tokens"].sum() / frame["wall_B"].sum())}
    text = markdown(got)
    write_outputs([(out / "speed_check.json", (json.dumps(got, indent=1) + "\n").encode()),
                   (out / "speed_check.md", text.encode())], out)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
