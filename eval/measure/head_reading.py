"""Where a drafter sits, as a short run reads it: rheo_adaptive's two readings along the dial.

    python -m eval.measure.head_reading [--mix 0 0.25 0.5 0.75 1] [--temperatures 0.7 1] [--per-suite 2]
        [--heldout 12] [--new-tokens 32] [--rows FILE.jsonl] [--archive FILE.parquet] [--out FILE.md]
       

For each draft-quality dial value ``a`` (:mod:`rheo.models.mixture`: ``q_a = (1 - a) q_head + a p_target``)
and temperature, ``rheo_adaptive`` (:mod:`rheo.adaptive`) generates ``--new-tokens`` tokens after the
first turn of the first ``--per-suite`` items of each benchmark suite (float32, one thread, seed fixed
per item), and at ``a`` = 0 and 1 after the prompts of the first ``--heldout`` held-out sequences of the
self-instructed draft corpus (prompts no benchmark holds: what a reading on one's own prompts gives).
Each generation gives two readings a user can take on their own pair:

* ``root_accept`` - the mean over its cycles' roots of ``sum_x min(p_T(x), q_T(x))``: the chance that a
  child sampled from the draft is accepted (one minus total variation);
* ``m0_share`` - the share of its cycles the rule drafted with Rheo m=0.

The table puts their means over prompts (95% Student-t half-widths) next to the fixed setting the
dial's same-state rows favour in that cell (``--dial``, :mod:`eval.states.rule_cells`), so that a
reading of ``root_accept`` places a drafter on the dial. Rows are appended to ``--rows`` as they
finish, each with its key (:func:`cell_key`: the cell, the prompt, the length, seed, configuration and
weights); a rerun skips the rows whose key is unchanged. The archive and the table are written at the end.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
import torch
from tqdm import tqdm

from eval.report.analysis import mean_ci
from eval.report.markdown import frame_markdown
from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.paths import folder
from rheo.resume_key import append_jsonl, digest, read_jsonl

PROG = "python -m eval.measure.head_reading"
MIXES = (0.0, 0.25, 0.5, 0.75, 1.0)
TEMPERATURES = (0.7, 1.0)
MODEL, DTYPE = "smollm2_135m", "float32"
BENCHMARKS, HELDOUT = "benchmarks", "held-out"
HELDOUT_MIXES = (0.0, 1.0)


def read_rows(path: Path) -> list[dict]:
    """The rows already in the JSON-lines file ``path`` (none if it is missing); a line cut by a kill is
    skipped with a warning naming the file and line (rheo.resume_key.read_jsonl), its cell measured again."""
    return read_jsonl(path, PROG)


def reading_spec(temperature: float):
    """The configuration every reading generates with: rheo_adaptive at ``temperature``."""
    from rheo.config import SpecConfig

    return SpecConfig.preset("rheo_adaptive", temperature=temperature)


def one_row(pair, drafter, prompt: list[int], temperature: float, new_tokens: int, seed: int) -> dict:
    """rheo_adaptive's readings of one generation (module docstring)."""
    from rheo.decode import speculative_generate

    cfg = reading_spec(temperature)
    out = speculative_generate(pair.target, drafter, prompt, new_tokens, cfg, generator=torch.Generator().manual_seed(seed),
                               eos_token_id=list(pair.eos_token_ids) or None)
    return {"cycles": len(out.cycle_m), "m0_share": out.cycle_m.count(0) / len(out.cycle_m),
            "root_accept": sum(out.root_accept) / len(out.root_accept), "tau": out.tau}


def cell_key(a: float, t: float, prompt_set: str, suite: str, item_id: int, source, new_tokens: int,
             weights: dict) -> dict:
    """Everything that decides a cell's row (rheo.resume_key): the cell, the prompt (a benchmark item's
    first-turn messages with the pair's chat format, or a held-out prompt's token ids), the generation
    length, seed, model, precision and configuration, and the pair's weight files."""
    import dataclasses

    from rheo.models.catalog import get_entry

    entry = get_entry(MODEL)
    prompt = source.turns[0] if prompt_set == BENCHMARKS else [int(x) for x in source]
    return {"prompt_set": prompt_set, "draft_mix": float(a), "temperature": float(t), "suite": suite,
            "item_id": int(item_id), "new_tokens": int(new_tokens), "seed": 1000 + int(item_id), "model": MODEL,
            "dtype": DTYPE, "prompt_sha": digest([prompt, entry.chat_format, list(entry.eos_tokens or [])]),
            "spec": digest(dataclasses.asdict(reading_spec(float(t)))), "weights": weights}


def pair_weights() -> dict:
    """Fingerprints of the weight files the reading's pair is loaded from."""
    from rheo.models.locate import head_fingerprint, target_fingerprint

    return {"head_sha": head_fingerprint(MODEL), "target_sha": target_fingerprint(MODEL)}


def prompt_sets(per_suite: int, heldout: int) -> list[tuple]:
    """(prompt set, suite, item id, source): the benchmark items (source: the Item, its first turn is the
    prompt), then the first ``heldout`` held-out sequences of the self-instructed corpus (suite
    "selfinstruct", id = sequence; source: the prompt's token ids)."""
    from eval.prompts.suites import SUITE_FILES, load_suite

    out = [(BENCHMARKS, item.suite, item.item_id, item)
           for suite in SUITE_FILES for item in load_suite(folder("data"), suite, limit=per_suite)]
    if heldout:
        from rheo.training.corpus import DEFAULT_DIR, load_corpus

        corpus = load_corpus(DEFAULT_DIR / "selfinstruct")
        held = [int(i) for i in corpus.held_out.nonzero()[0][:heldout]]
        out += [(HELDOUT, "selfinstruct", s, corpus.sequence(s)[: int(corpus.resp_start[s])].tolist()) for s in held]
    return out


def measure(mixes: Sequence[float], temperatures: Sequence[float], per_suite: int, heldout: int, new_tokens: int,
            rows_path: Path) -> list[dict]:
    """The rows of the asked (prompt set, a, T, prompt) cells, computing those not yet in ``rows_path`` under
    their key (:func:`cell_key`; appended one by one; the held-out prompts at a = 0 and 1 only); rows of other
    cells or keys there are left out."""
    from eval.prompts.suites import chat_messages

    wanted = [(a, t, *p) for p in prompt_sets(per_suite, heldout) for a in mixes for t in temperatures
              if p[0] == BENCHMARKS or a in HELDOUT_MIXES]
    weights = pair_weights()
    keys = [cell_key(*w, new_tokens, weights) for w in wanted]
    stored = {digest(r["key"]): r for r in read_rows(rows_path) if isinstance(r.get("key"), dict)}
    done = [stored[digest(k)] for k in keys if digest(k) in stored]
    todo = [(w, k) for w, k in zip(wanted, keys) if digest(k) not in stored]
    if not todo:
        return done
    from eval.measure.pairs import load_pair
    from rheo.models.mixture import MixedDrafter

    pair = load_pair(MODEL, "cpu", DTYPE)
    with append_jsonl(rows_path) as sink, torch.inference_mode():
        for (a, t, prompt_set, suite, item_id, source), key in tqdm(todo, desc="head reading", unit="generation"):
            drafter = pair.drafter if a == 0 else MixedDrafter(pair.drafter, pair.target, float(a))
            prompt = pair.format_chat(chat_messages(source, 0, [])) if prompt_set == BENCHMARKS else source
            row = {"prompt_set": prompt_set, "draft_mix": float(a), "temperature": float(t), "suite": suite,
                   "item_id": item_id, "new_tokens": new_tokens,
                   **one_row(pair, drafter, prompt, float(t), new_tokens, key["seed"]), "key": key}
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done.append(row)
    return done


def dial_best(dial: Optional[pd.DataFrame]) -> dict:
    """{(T, a): the fixed setting with the best mean in that dial cell} from same-state rows (or {})."""
    if dial is None:
        return {}
    from eval.states.options import wide_keys
    from eval.states.rule_cells import FIXED_NAMES, best_fixed

    best = {cell: best_fixed(wide) for cell, wide in wide_keys(dial[dial["draft_mix"].notna()],
                                                                ["temperature", "draft_mix"]).items()}
    return {cell: FIXED_NAMES[label] for cell, label in best.items() if label is not None}


def reading_table(rows: pd.DataFrame, best: dict) -> pd.DataFrame:
    """One line per (prompt set, T, a): prompts, root_accept and m0_share (mean ± half-width), tau, and the
    dial's best fixed setting (benchmark prompts, where the dial was measured)."""
    out = []
    for (prompt_set, t, a), cell in rows.groupby(["prompt_set", "temperature", "draft_mix"], sort=False):
        line = {"prompt set": prompt_set, "T": f"{t:g}", "a": f"{a:g}", "prompts": len(cell)}
        for col in ("root_accept", "m0_share", "tau"):
            mean, half, _ = mean_ci(cell[col])
            line[col] = f"{mean:.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")
        line["dial's best fixed setting"] = best.get((float(t), float(a)), "-") if prompt_set == BENCHMARKS else "-"
        out.append(line)
    return pd.DataFrame(out)


def markdown(rows: pd.DataFrame, best: dict, command: str) -> str:
    sizes = rows.groupby(["prompt_set", "temperature", "draft_mix"]).size()
    held = f"; the held-out set: {int(sizes[HELDOUT].min())} prompts of the self-instructed draft corpus's held-out " \
        "split, at a = 0 and 1" if HELDOUT in sizes.index.get_level_values(0) else ""
    return "\n".join([
        "### Where a drafter sits: rheo_adaptive's readings along the draft-quality dial", "",
        "Per cell, mean over prompts ± 95% Student-t half-width. `root_accept`: the chance a child sampled "
        "from the draft is accepted at a cycle's root (1 - TV), averaged over the generation's cycles; "
        "`m0_share`: the share of its cycles drafted with Rheo m=0; tau: tokens per target call. The last column "
        "is the fixed setting with the best mean in that dial cell on shared states (every_drafter.md). "
        f"Benchmarks: the first turn of the first items of each suite ({int(sizes[BENCHMARKS].min())} prompts per "
        f"cell){held}. {int(rows['new_tokens'].iloc[0])} new tokens, float32, one thread: `{command}`.", "",
        frame_markdown(reading_table(rows, best)), ""])


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--mix", type=float, nargs="+", default=list(MIXES), help="dial values a in [0, 1]")
    ap.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES))
    ap.add_argument("--per-suite", type=positive_int, default=2, help="items per suite (first turn)")
    ap.add_argument("--heldout", type=int, default=12, help="held-out corpus prompts, at a = 0 and 1 (0: none)")
    ap.add_argument("--new-tokens", type=positive_int, default=32)
    ap.add_argument("--rows", type=Path, default=folder("out", "head_reading", "rows.jsonl"))
    ap.add_argument("--dial", type=Path, default=folder("out", "same_state_dial.parquet"),
                    help="the dial's same-state rows (an output_dir or its archive; yours, else the committed one), "
                    "for the best fixed setting")
    ap.add_argument("--archive", type=Path, default=folder("out", "head_reading.parquet"))
    ap.add_argument("--out", type=Path, default=folder("tables", "head_reading.md"))
    args = ap.parse_args(argv)
    bad = [a for a in args.mix if not 0 <= a <= 1] + [t for t in args.temperatures if not (math.isfinite(t) and t > 0)]
    if bad or args.heldout < 0:
        raise SystemExit(f"--mix takes values in [0, 1], --temperatures values > 0 and --heldout a count >= 0, got "
                         f"{bad[0] if bad else args.heldout!r}")
    torch.set_num_threads(1)
    rows = pd.DataFrame(measure(args.mix, args.temperatures, args.per_suite, args.heldout, args.new_tokens, args.rows))
    rows = rows.drop(columns=["key"])  # the resume key stays in --rows; the archive holds the readings
    order = ["prompt_set", "temperature", "draft_mix", "suite", "item_id"]  # the table: a set, then T, then a
    rows = rows.sort_values(order, key=lambda c: c.map({BENCHMARKS: 0, HELDOUT: 1}) if c.name == "prompt_set" else c)
    rows = rows.reset_index(drop=True)
    from eval.store.committed import write_outputs
    from eval.store.state_archive import load_rows
    from eval.store.storage import report_source

    source = report_source(args.dial, None)[0]
    dial = load_rows(source) if source.exists() else None
    command = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
    text = markdown(rows, dial_best(dial), command)
    print(text)
    buffer = io.BytesIO()
    rows.to_parquet(buffer, index=False)
    write_outputs([(args.out, text.encode()), (args.archive, buffer.getvalue())], args.rows)
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
