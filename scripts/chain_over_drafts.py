"""Traversal against RRS on a chain, in expectation over the drafted chains, at the verifier study's states.

    python scripts/chain_over_drafts.py [--temperature 1.0] [--draft-mix A] [--draws 8] [--limit 1]
                                        [--new-tokens 8] [--out DIR]

Block verification (Traversal on a chain) maximises the expected accepted length *over the drafts*;
on one drawn chain it can fall below token-by-token verification (RRS). The verifier study
(configs/experiment/verifiers.yaml) scores both on one chain per state, so its cells mix that
per-draw noise in. Here, at every state of the study's Top-K driver (same prompts, seeds, driver and
drafter: the head, or the dial's mixture ``--draft-mix``), both verifiers score ``--draws``
independently drawn 8-token chains (draw 0 is the study's own chain: its random numbers are the
study's key), each by its exact expected emitted tokens (rheo.expected). Per state the mean over the
draws of Traversal − RRS estimates the difference in expectation over the drafts, with its standard
error over the draws. Writes ``chain_over_drafts_T<T>_<drafter>.md`` and ``.parquet`` (one row per
prompt, state, draw and verifier) into ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch

from rheo.cli import ArgumentParser, path_arg, positive_float, positive_int, run_main
from rheo.paths import folder

PROG = "chain_over_drafts.py"
SUITES = ("mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq")


def measure(pair, temperature: float, mix, draws: int, limit: int, new_tokens: int, data_dir: Path) -> pd.DataFrame:
    """Rows (suite, item_id, turn, state, draw, verifier, expected_emitted) at every driver state."""
    from eval.measure.same_states import state_key, study_drafter
    from eval.prompts.suites import chat_messages, load_suite
    from eval.store.keys import generation_seed
    from rheo.config import SpecConfig
    from rheo.same_state import same_state_generate

    driver = SpecConfig(method="topk", temperature=temperature)
    chains = [SpecConfig(method="chain", depth=8, temperature=temperature, verifier=v) for v in ("rrs", "traversal")]
    drafter, rows = study_drafter(pair, mix), []
    for suite in SUITES:
        for item in load_suite(data_dir, suite, limit=limit):
            answers: list[str] = []
            for turn in range(len(item.turns)):
                prompt = pair.format_chat(chat_messages(item, turn, answers[:turn]))
                key = state_key(item.suite, item.item_id, turn, 0)  # the study's own streams
                for draw in range(draws):
                    generator = torch.Generator().manual_seed(generation_seed(item.suite, item.item_id, turn, 0))
                    with torch.inference_mode():
                        got = same_state_generate(pair.target, drafter, prompt, new_tokens, driver, chains, generator,
                                                  key=key if draw == 0 else f"{key}#draw{draw}",
                                                  eos_token_id=list(pair.eos_token_ids) or None,
                                                  calibration=False, ot_bound=False)
                    rows += [dict(suite=suite, item_id=item.item_id, turn=turn, state=t.state, draw=draw,
                                  verifier=chains[t.method].verifier, expected_emitted=t.columns["expected_emitted"])
                             for t in got.trees]
                answers.append(pair.answer_text(got.output.tokens))  # the driver's answer: the same in every draw
                print(f"{suite} item {item.item_id} turn {turn}: {len(got.output.accept_lengths)} states",
                      file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def per_state(rows: pd.DataFrame) -> pd.DataFrame:
    """Per state: the mean over draws of Traversal − RRS, its standard error over the draws, the draws."""
    wide = rows.pivot_table(index=["suite", "item_id", "turn", "state", "draw"], columns="verifier",
                            values="expected_emitted").reset_index()
    wide["diff"] = wide["traversal"] - wide["rrs"]
    g = wide.groupby(["suite", "item_id", "turn", "state"])["diff"]
    out = pd.DataFrame({"mean": g.mean(), "se": g.std(ddof=1) / g.count().pow(0.5), "draws": g.count(),
                        "first": g.first()}).reset_index()
    return out


def markdown(states: pd.DataFrame, temperature: float, drafter: str, draws: int) -> str:
    from eval.report.markdown import markdown_table

    below = states[states["mean"] < 0]
    clear = states[states["mean"] + 2 * states["se"] < 0]
    body = [[drafter, f"{temperature:g}", len(states), f"{states['first'].mean():+.3f}",
             f"{states['mean'].mean():+.3f}", f"{len(states[states['first'] < 0])}", f"{len(below)}", f"{len(clear)}",
             f"{states['mean'].min():+.3f}"]]
    return (f"## Traversal − RRS on an 8-token chain, over {draws} drafted chains per state\n\n"
            "Every state of the verifier study's Top-K driver (1 item per suite, both MT-bench turns, 8 new tokens, "
            "seed 0, float32); each verifier's exact expected emitted tokens on each drawn chain. one draw = the "
            "study's own chain; over the draws = the mean over the drawn chains, per state (below 2 SE: its mean "
            "plus two standard errors over the draws is still below 0).\n\n"
            + markdown_table(["drafter", "T", "states", "one draw: mean diff", "over the draws: mean diff",
                              "states below 0 (one draw)", "states below 0 (over the draws)",
                              "states below 2 SE (over the draws)", "lowest state (over the draws)"], body) + "\n")


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=positive_float, default=1.0)
    ap.add_argument("--draft-mix", type=positive_float, default=None, help="the dial's a (default: the head alone)")
    ap.add_argument("--draws", type=positive_int, default=8)
    ap.add_argument("--limit", type=positive_int, default=1, help="items per suite (the study's: 1)")
    ap.add_argument("--new-tokens", type=positive_int, default=8)
    ap.add_argument("--out", type=path_arg, default=folder("tables"))
    args = ap.parse_args(argv)
    from eval.measure.pairs import load_pair
    from eval.store.committed import write_outputs

    torch.set_num_threads(1)
    pair = load_pair("smollm2_135m", "cpu", "float32")
    drafter = "head" if args.draft_mix is None else f"dial a={args.draft_mix:g}"
    rows = measure(pair, args.temperature, args.draft_mix, args.draws, args.limit, args.new_tokens,
                   folder("data"))
    states = per_state(rows)
    stem = f"chain_over_drafts_T{args.temperature:g}_{drafter.replace(' ', '').replace('=', '')}"
    text = markdown(states, args.temperature, drafter, args.draws)
    write_outputs([(Path(args.out) / f"{stem}.md", text.encode()),
                   (Path(args.out) / f"{stem}.parquet", rows.to_parquet(index=False))], Path(args.out))
    print(text)
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
