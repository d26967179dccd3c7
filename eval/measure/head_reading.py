"""Where a drafter sits, as a short run reads it: rheo_adaptive's two readings along the dial.

    python -m eval.measure.head_reading [--mix 0 0.25 0.5 0.75 1] [--temperatures 0.7 1] [--per-suite 2]
        [--new-tokens 32] [--rows FILE.jsonl] [--archive FILE.parquet] [--out FILE.md] [--update-committed]

For each draft-quality dial value ``a`` (:mod:`rheo.models.mixture`: ``q_a = (1 - a) q_head + a p_target``)
and temperature, ``rheo_adaptive`` (:mod:`rheo.adaptive`) generates ``--new-tokens`` tokens after the
first turn of the first ``--per-suite`` items of each benchmark suite (float32, one thread, seed fixed
per item). Each generation gives two readings a user can take on their own pair:

* ``root_accept`` - the mean over its cycles' roots of ``sum_x min(p_T(x), q_T(x))``: the chance that a
  child sampled from the draft is accepted (one minus total variation);
* ``m0_share`` - the share of its cycles the rule drafted with Rheo m=0.

The table puts their means over prompts (95% Student-t half-widths) next to the fixed setting the
dial's same-state rows favour in that cell (``--dial``, :mod:`eval.states.rule_cells`), so that a
reading of ``root_accept`` places a drafter on the dial. Rows are appended to ``--rows`` as they
finish (a rerun skips them); the archive and the table are written at the end.
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

PROG = "python -m eval.measure.head_reading"
MIXES = (0.0, 0.25, 0.5, 0.75, 1.0)
TEMPERATURES = (0.7, 1.0)
KEY = ("draft_mix", "temperature", "suite", "item_id")


def read_rows(path: Path) -> list[dict]:
    """The rows already in the JSON-lines file ``path`` (none if it is missing)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_row(pair, drafter, prompt: list[int], temperature: float, new_tokens: int, seed: int) -> dict:
    """rheo_adaptive's readings of one generation (module docstring)."""
    from rheo.config import SpecConfig
    from rheo.decode import speculative_generate

    cfg = SpecConfig(method="rheo", m=1, proxy="tempered", adapt="root", temperature=temperature)
    out = speculative_generate(pair.target, drafter, prompt, new_tokens, cfg, generator=torch.Generator().manual_seed(seed),
                               eos_token_id=list(pair.eos_token_ids) or None)
    return {"cycles": len(out.cycle_m), "m0_share": out.cycle_m.count(0) / len(out.cycle_m),
            "root_accept": sum(out.root_accept) / len(out.root_accept), "tau": out.tau}


def measure(mixes: Sequence[float], temperatures: Sequence[float], per_suite: int, new_tokens: int,
            rows_path: Path) -> list[dict]:
    """Every (a, T, prompt) row, computing those not yet in ``rows_path`` (appended one by one)."""
    from eval.measure.pairs import load_pair
    from eval.prompts.suites import SUITE_FILES, chat_messages, load_suite
    from rheo.models.mixture import MixedDrafter

    done = read_rows(rows_path)
    have = {tuple(r[k] for k in KEY) for r in done}
    items = [item for suite in SUITE_FILES for item in load_suite(folder("data"), suite, limit=per_suite)]
    todo = [(a, t, item) for a in mixes for t in temperatures for item in items
            if (float(a), float(t), item.suite, item.item_id) not in have]
    if not todo:
        return done
    pair = load_pair("smollm2_135m", "cpu", "float32")
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    with rows_path.open("a") as sink, torch.inference_mode():
        for a, t, item in tqdm(todo, desc="head reading", unit="generation"):
            drafter = pair.drafter if a == 0 else MixedDrafter(pair.drafter, pair.target, float(a))
            prompt = pair.format_chat(chat_messages(item, 0, []))
            row = {"draft_mix": float(a), "temperature": float(t), "suite": item.suite, "item_id": item.item_id,
                   "new_tokens": new_tokens, **one_row(pair, drafter, prompt, float(t), new_tokens, 1000 + item.item_id)}
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done.append(row)
    return done


def best_fixed(dial: Optional[pd.DataFrame]) -> dict:
    """{(T, a): the fixed setting with the best mean in that dial cell} from same-state rows (or {})."""
    if dial is None:
        return {}
    from eval.states.options import wide_keys
    from eval.states.rule_cells import FIXED, FIXED_NAMES

    dial = dial[dial["draft_mix"].notna()]
    out = {}
    for (t, a), wide in wide_keys(dial, ["temperature", "draft_mix"]).items():
        present = [f for f in FIXED if f in wide.columns]
        if present:
            out[(t, a)] = FIXED_NAMES[max(present, key=lambda f: wide[f].mean())]
    return out


def reading_table(rows: pd.DataFrame, best: dict) -> pd.DataFrame:
    """One line per (T, a): prompts, root_accept and m0_share (mean ± half-width), tau, the dial's best."""
    out = []
    for (t, a), cell in rows.groupby(["temperature", "draft_mix"]):
        line = {"T": f"{t:g}", "a": f"{a:g}", "prompts": len(cell)}
        for col in ("root_accept", "m0_share", "tau"):
            mean, half, _ = mean_ci(cell[col])
            line[col] = f"{mean:.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")
        line["dial's best fixed setting"] = best.get((float(t), float(a)), "-")
        out.append(line)
    return pd.DataFrame(out)


def markdown(rows: pd.DataFrame, best: dict, command: str) -> str:
    return "\n".join([
        "### Where a drafter sits: rheo_adaptive's readings along the draft-quality dial", "",
        "Per cell, mean over prompts ± 95% Student-t half-width. `root_accept`: the chance a child sampled "
        "from the draft is accepted at a cycle's root (1 - TV), averaged over the generation's cycles; "
        "`m0_share`: the share of its cycles drafted with Rheo m=0; tau: tokens per target call. The last column "
        "is the fixed setting with the best mean in that dial cell on shared states (every_drafter.md). "
        f"The first turn of the first items of each benchmark suite ({int(rows.groupby(['temperature', 'draft_mix']).size().min())} "
        f"prompts per cell), {int(rows['new_tokens'].iloc[0])} new tokens, float32, one thread: `{command}`.", "",
        frame_markdown(reading_table(rows, best)), ""])


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--mix", type=float, nargs="+", default=list(MIXES), help="dial values a in [0, 1]")
    ap.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES))
    ap.add_argument("--per-suite", type=positive_int, default=2, help="items per suite (first turn)")
    ap.add_argument("--new-tokens", type=positive_int, default=32)
    ap.add_argument("--rows", type=Path, default=folder("cache", "head_reading", "rows.jsonl"))
    ap.add_argument("--dial", type=Path, default=folder("results", "same_state_dial.parquet"),
                    help="the dial's same-state rows (an output_dir or its archive), for the best fixed setting")
    ap.add_argument("--archive", type=Path, default=folder("results", "head_reading.parquet"))
    ap.add_argument("--out", type=Path, default=folder("tables", "head_reading.md"))
    ap.add_argument("--update-committed", action="store_true", help="allow changing committed files")
    args = ap.parse_args(argv)
    bad = [a for a in args.mix if not 0 <= a <= 1] + [t for t in args.temperatures if not (math.isfinite(t) and t > 0)]
    if bad:
        raise SystemExit(f"--mix takes values in [0, 1] and --temperatures values > 0, got {bad[0]!r}")
    torch.set_num_threads(1)
    rows = pd.DataFrame(measure(args.mix, args.temperatures, args.per_suite, args.new_tokens, args.rows))
    wanted = rows["draft_mix"].isin(args.mix) & rows["temperature"].isin(args.temperatures) & (rows["new_tokens"] == args.new_tokens)
    rows = rows[wanted].sort_values(list(KEY)).reset_index(drop=True)
    from eval.store.committed import write_outputs
    from eval.store.state_archive import load_rows
    from eval.store.storage import report_source

    dial = load_rows(report_source(args.dial, None)[0]) if args.dial.exists() else None
    command = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
    text = markdown(rows, best_fixed(dial), command)
    print(text)
    buffer = io.BytesIO()
    rows.to_parquet(buffer, index=False)
    write_outputs([(args.out, text.encode()), (args.archive, buffer.getvalue())], args.rows, args.update_committed)
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
