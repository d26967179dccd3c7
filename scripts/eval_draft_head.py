"""Acceptance length tau of a SmolLM2 EAGLE-3 head, on held-out corpus prompts and benchmark items.

tau = tokens emitted per target call (accepted drafts + the bonus), pooled over all cycles.
Prompts: the first ``--n`` distinct held-out first-turn prompts of the committed training
corpus (``data/draft_corpus``; never trained on), and, with ``--suite-items N``, the first N
items of each benchmark suite (first turn; only measured, never tuned on). Runs, in order:
Top-K at T=0 (``--check-greedy``: tokens compared with ``generate(do_sample=False)``), then
Top-K and Rheo m=1 at T=1 for ``--seeds``. One JSON line per generation, then a summary; with
``--out`` the summary is also written as JSON + Markdown.

    python scripts/eval_draft_head.py --head rheo/assets/eagle3_smollm2_135m --n 16 --max-new-tokens 128 \\
        --check-greedy --seeds 0,1,2 --suite-items 2 --out results/draft_head
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from eval.report.analysis import mean_ci
from eval.report.markdown import markdown_table
from rheo.cli import ArgumentParser, non_negative_int, positive_int, run_main
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.io import atomic_write_text
from rheo.models.eagle3 import load_eagle3_drafter
from rheo.models.hf_target import HFTarget
from rheo.models.smollm2 import load_smollm2
from rheo.paths import REPO_ROOT
from rheo.training.corpus import DEFAULT_DIR, load_corpus
from rheo.training.prompts import KINDS


def held_out_prompts(n: int, corpus: str) -> list[tuple[str, list[int]]]:
    """(kind, chat-formatted prompt ids) of the first n distinct held-out first-turn prompts."""
    if n <= 0:
        return []
    c = load_corpus(corpus)
    out, seen = [], set()
    for s in np.flatnonzero(c.held_out):
        if KINDS[c.kind[s]] == "followup":
            continue
        ids = c.sequence(s)[: c.resp_start[s]].astype(np.int64).tolist()
        if tuple(ids) not in seen:
            seen.add(tuple(ids))
            out.append((KINDS[c.kind[s]], ids))
        if len(out) == n:
            break
    return out


def suite_prompts(tok, items: int) -> list[tuple[str, list[int]]]:
    from eval.prompts.suites import load_suite
    from eval.store.keys import SUITE_FILES

    root = REPO_ROOT / "data" / "benchmarks"
    out = []
    for suite in SUITE_FILES:
        for it in load_suite(root, suite, limit=items):
            ids = tok.apply_chat_template([{"role": "user", "content": it.turns[0]}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"]
            out.append((suite, list(ids)))
    return out


def check_inputs(args) -> None:
    """Before the model loads: the head's files, the corpus, the tree and the seeds."""
    head = Path(args.head)
    if not ((head / "config.json").is_file() and (head / "model.safetensors").is_file()):
        raise SystemExit(f"--head {args.head}: no EAGLE-3 head there (config.json and model.safetensors): "
                         f"give a head folder, e.g. rheo/assets/eagle3_smollm2_135m")
    if not (Path(args.corpus) / "corpus.npz").is_file():
        raise SystemExit(f"--corpus {args.corpus}: no corpus.npz there (the committed one is {DEFAULT_DIR})")
    SpecConfig(method="rheo", k=args.k, m=1, depth=args.depth, tree_size=args.tree_size)  # ValueError naming the field
    bad = [s for s in args.seeds.split(",") if s and not s.strip().lstrip("-").isdigit()]
    if bad:
        raise SystemExit(f"--seeds {args.seeds!r}: {bad} are not integers; give e.g. --seeds 0,1,2 ('' for none)")


def parse_args() -> argparse.Namespace:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default="rheo/assets/eagle3_smollm2_135m")
    ap.add_argument("--corpus", default=str(DEFAULT_DIR))
    ap.add_argument("--n", type=positive_int, default=16)
    ap.add_argument("--suite-items", type=non_negative_int, default=0)
    ap.add_argument("--max-new-tokens", type=positive_int, default=128)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--tree-size", type=int, default=60)
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the T=1 runs ('' = none)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--check-greedy", action="store_true", help="compare T=0 tokens with model.generate (fp32)")
    ap.add_argument("--out", default="")
    ap.add_argument("--no-t0", action="store_true", help="skip the T=0 Top-K run (e.g. T=1 runs in another process)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                    help="no generation: pool the rows.jsonl of these --out folders (runs split over processes) "
                         "into one summary in --out")
    args = ap.parse_args()
    if args.merge and not args.out:
        ap.error("--merge needs --out")
    return args


def merge_parts(args) -> None:
    """Pool the rows of the ``--merge`` folders (one head's runs) into one summary in ``--out``."""
    rows = [json.loads(line) for d in args.merge for line in (Path(d) / "rows.jsonl").read_text().splitlines()
            if line.strip()]
    parts = [json.loads((Path(d) / "summary.json").read_text()) for d in args.merge]
    heads = sorted({p["config"]["head"] for p in parts})
    if len(heads) != 1:
        raise SystemExit(f"--merge: the parts measured different heads {heads}; merge one head's runs only")
    summary = summarise(rows, args, 0.0)
    # the merged config is the parts' (the merging process's own flags describe no measurement)
    summary["config"] = dict(head=heads[0], merged_from=list(args.merge), parts=[p["config"] for p in parts])
    summary["wall_s"] = None
    summary["parts_wall_s"] = [p["wall_s"] for p in parts]
    write_outputs(rows, summary, Path(args.out))
    print(markdown(summary))


def measure(args) -> tuple[list[dict], float]:
    """One row per (prompt group, method, temperature, seed, prompt): tokens, cycles, tau; and the
    seconds the generations took (model loading excluded)."""
    model, tok = load_smollm2(dtype=getattr(torch, args.dtype))
    target, drafter = HFTarget(model), load_eagle3_drafter(args.head, model)
    groups = [("heldout", held_out_prompts(args.n, args.corpus))]
    if args.suite_items:
        groups.append(("suites", suite_prompts(tok, args.suite_items)))
    runs = [("topk", 0.0, 0)] * (not args.no_t0) + [(m, 1.0, int(s)) for s in args.seeds.split(",") if s
                                                     for m in ("topk", "rheo")]
    rows, t0 = [], time.time()
    for group, prompts in groups:
        for method, temp, seed in runs if group == "heldout" else [r for r in runs if r[1] == 0]:
            cfg = SpecConfig.for_method(method=method, k=args.k, m=1, depth=args.depth, tree_size=args.tree_size,
                             temperature=temp)
            for i, (kind, ids) in enumerate(prompts):
                out = speculative_generate(target, drafter, ids, args.max_new_tokens, config=cfg,
                                           generator=torch.Generator().manual_seed(seed * 1000 + i),
                                           eos_token_id=tok.eos_token_id)
                row = dict(group=group, kind=kind, prompt=i, method=method, temperature=temp, seed=seed,
                           tokens=len(out.tokens), cycles=len(out.accept_lengths),
                           tau=round(sum(out.accept_lengths) / len(out.accept_lengths), 3))
                if args.check_greedy and temp == 0:
                    row["greedy_identical"] = out.tokens == greedy_reference(model, tok, ids, args.max_new_tokens)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows, time.time() - t0


def greedy_reference(model, tok, ids: list[int], max_new_tokens: int) -> list[int]:
    """The model's own greedy continuation of ``ids`` (``generate``), cut after its eos."""
    x = torch.tensor([ids])
    ref = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                         do_sample=False)[0, len(ids):].tolist()
    return ref[: ref.index(tok.eos_token_id) + 1] if tok.eos_token_id in ref else ref


def main() -> None:
    args = parse_args()
    if args.merge:
        merge_parts(args)
        return
    check_inputs(args)
    torch.set_num_threads(args.threads)
    rows, wall_s = measure(args)
    summary = summarise(rows, args, wall_s)
    print(json.dumps(summary, indent=1))
    if args.out:
        write_outputs(rows, summary, Path(args.out))


def write_outputs(rows, summary, out: Path) -> None:
    atomic_write_text(out / "rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows), record=True)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n", record=True)
    atomic_write_text(out / "summary.md", markdown(summary), record=True)


def summarise(rows, args, wall_s):
    """Pooled tau (total tokens / total cycles) per (group, method, T) and per benchmark suite."""
    out = dict(config=vars(args), wall_s=round(wall_s, 1), pooled=[], per_suite=[])
    keys = sorted({(r["group"], r["method"], r["temperature"]) for r in rows})
    for g, m, t in keys:
        sel = [r for r in rows if (r["group"], r["method"], r["temperature"]) == (g, m, t)]
        taus = [r["tau"] for r in sel]
        rec = dict(group=g, method=m, temperature=t, generations=len(sel),
                   tau_pooled=round(sum(r["tokens"] for r in sel) / sum(r["cycles"] for r in sel), 3),
                   tau_mean=round(float(np.mean(taus)), 3), tau_sd=round(float(np.std(taus, ddof=1)), 3) if len(taus) > 1 else 0.0)
        if any("greedy_identical" in r for r in sel):
            rec["greedy_identical"] = f"{sum(r.get('greedy_identical', False) for r in sel)}/{len(sel)}"
        out["pooled"].append(rec)
    by = {(r["method"], r["prompt"], r["seed"]): r["tau"] for r in rows
          if r["group"] == "heldout" and r["temperature"] == 1.0}
    diffs = [by[("rheo", p, sd)] - t for (m, p, sd), t in by.items() if m == "topk" and ("rheo", p, sd) in by]
    if len(diffs) > 1:  # Rheo m=1 - Top-K at T=1, paired by (prompt, seed); Student-t 95% CI over the pairs
        mean, half, _ = mean_ci(diffs)
        out["paired_t1"] = dict(pairs=len(diffs), mean=round(mean, 3), ci95=round(half, 3))
    for suite in sorted({r["kind"] for r in rows if r["group"] == "suites"}):
        sel = [r for r in rows if r["group"] == "suites" and r["kind"] == suite]
        out["per_suite"].append(dict(suite=suite, items=len(sel),
                                     tau=round(sum(r["tokens"] for r in sel) / sum(r["cycles"] for r in sel), 3)))
    return out


def markdown(s) -> str:
    lines = [markdown_table(["prompts", "method", "T", "generations", "tau (pooled)", "tau mean +- sd",
                             "greedy == generate"],
                            [[r["group"], r["method"], f"{r['temperature']:g}", r["generations"], r["tau_pooled"],
                              f"{r['tau_mean']} +- {r['tau_sd']}", r.get("greedy_identical", "-")] for r in s["pooled"]])]
    if s.get("paired_t1"):
        d = s["paired_t1"]
        lines += ["", f"Rheo m=1 - Top-K at T=1, paired by (prompt, seed): {d['mean']:+.3f} +- {d['ci95']} "
                      f"(95% CI, {d['pairs']} pairs)"]
    if s["per_suite"]:
        lines += ["", markdown_table(["suite", "items", "Top-K tau, T=0"],
                                     [[r["suite"], r["items"], r["tau"]] for r in s["per_suite"]])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_main(main)
