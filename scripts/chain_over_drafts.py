"""Traversal against RRS on a chain, in expectation over the drafted chains, at the verifier study's states.

    python scripts/chain_over_drafts.py [--temperature 1.0] [--draft-mix A] [--draws 8] [--limit 1]
                                        [--new-tokens 8] [--out DIR]

Block verification (Traversal on a chain) maximises the expected accepted length *over the drafts*;
on one drawn chain it can fall below token-by-token verification (RRS). The verifier study
(configs/experiment/verifiers.yaml) scores both on one chain per state, so its cells mix that
per-draw noise in. Here, at every state of the study's Top-K driver (same prompts, seeds, driver and
drafter: the head, or the dial's mixture ``--draft-mix``), both verifiers score ``--draws``
independently drawn 8-token chains (draw 0 is the study's own chain: its random numbers are the
study's key; draw d uses the streams of rheo.same_state.draw_key), each by its exact expected emitted
tokens (rheo.expected), every draw of a state in the one target call. Per state the mean over the
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
#: a difference this small is the float32 rounding of the draft rows, not an ordering (--enumerate)
FLOAT32_ROUNDING = 1e-6


def each_turn(pair, limit: int, data_dir: Path, decode) -> None:
    """The verifier study's prompts in its order (``limit`` items per suite, every turn after the driver's own
    answers), each decoded by ``decode(item, turn, prompt, generator)``, which returns the driver's output; the
    generator is seeded as the study's seed 0."""
    from eval.prompts.suites import chat_messages, load_suite
    from eval.report.analysis import SUITE_ORDER
    from eval.store.keys import generation_seed

    for suite in SUITE_ORDER:
        for item in load_suite(data_dir, suite, limit=limit):
            answers: list[str] = []
            for turn in range(len(item.turns)):
                prompt = pair.format_chat(chat_messages(item, turn, answers[:turn]))
                generator = torch.Generator().manual_seed(generation_seed(item.suite, item.item_id, turn, 0))
                with torch.inference_mode():
                    out = decode(item, turn, prompt, generator)
                answers.append(pair.answer_text(out.tokens))  # the driver's answer: the same for every draw
                print(f"{suite} item {item.item_id} turn {turn}: {len(out.accept_lengths)} states", file=sys.stderr,
                      flush=True)


def measure(pair, temperature: float, mix, draws: int, limit: int, new_tokens: int, data_dir: Path) -> pd.DataFrame:
    """Rows (suite, item_id, turn, state, draw, verifier, expected_emitted) at every driver state."""
    from eval.measure.same_states import state_key, study_drafter
    from rheo.config import SpecConfig
    from rheo.same_state import same_state_generate

    driver = SpecConfig(method="topk", temperature=temperature)
    chains = [SpecConfig(method="chain", depth=8, temperature=temperature, verifier=v) for v in ("rrs", "traversal")]
    drafter, rows = study_drafter(pair, mix), []

    def decode(item, turn, prompt, generator):
        key = state_key(item.suite, item.item_id, turn, 0)  # the study's own streams: draw 0
        got = same_state_generate(pair.target, drafter, prompt, new_tokens, driver, chains, generator, key=key,
                                  eos_token_id=list(pair.eos_token_ids) or None, calibration=False, ot_bound=False,
                                  draws=draws)
        rows.extend(dict(suite=item.suite, item_id=item.item_id, turn=turn, state=t.state, draw=t.draw,
                         verifier=chains[t.method].verifier, expected_emitted=t.columns["expected_emitted"])
                    for t in got.trees)
        return got.output

    each_turn(pair, limit, data_dir, decode)
    return pd.DataFrame(rows)


def enumerate_chains(pair, temperature: float, mix, top: int, depth: int, limit: int, new_tokens: int,
                     data_dir: Path) -> pd.DataFrame:
    """Exact over the drafts: at every driver state, every chain of ``depth`` tokens drawn from the
    draft's ``top`` tokens (``sparse_top=top``: ``top ** depth`` chains, each with its probability
    under the draft), both verifiers' exact expected emitted tokens on each, summed with those
    weights. Rows (suite, item_id, turn, state, verifier, expected_emitted, chains, mass)."""
    from eval.measure.same_states import study_drafter
    from rheo.config import SpecConfig
    from rheo.decode import generate_with_source
    from rheo.exact import enumerate_runs
    from rheo.mechanism import DraftRecorder
    from rheo.methods import get_method
    from rheo.random import TorchRandom
    from rheo.tree_union import tree_rows, union_tree

    driver = SpecConfig(method="topk", temperature=temperature)
    configs = {v: SpecConfig(method="chain", depth=depth, temperature=temperature, sparse_top=top, verifier=v)
               for v in ("rrs", "traversal")}
    method, drafter, rows = get_method("chain"), study_drafter(pair, mix), []

    def decode(item, turn, prompt, generator):
        def on_state(state):
            def draw(rng):
                return method.build_tree(DraftRecorder(state.draft_fn), state.root, configs["rrs"], rng,
                                         state.draft_to_target, state.device)
            chains = list(enumerate_runs(draw))  # [(built, its probability under the draft)]
            union, maps = union_tree([built.tree for built, _ in chains])
            logits = state.target_session.score_tree(union).logits
            try:
                mass = sum(w for _, w in chains)
                for verifier, cfg in configs.items():
                    total = sum(w * float(method.node_path_probs(built, tree_rows(logits, maps[i]), cfg).sum())
                                for i, (built, w) in enumerate(chains))
                    rows.append(dict(suite=item.suite, item_id=item.item_id, turn=turn, state=state.index,
                                     verifier=verifier, expected_emitted=total, chains=len(chains), mass=mass))
            finally:
                state.target_session.discard()

        return generate_with_source(pair.target, drafter, prompt, new_tokens, driver, TorchRandom(generator),
                                    list(pair.eos_token_ids) or None, on_state=on_state)

    each_turn(pair, limit, data_dir, decode)
    return pd.DataFrame(rows)


def exact_markdown(rows: pd.DataFrame, temperature: float, drafter: str, top: int, depth: int) -> str:
    from eval.report.markdown import markdown_table

    wide = rows.pivot_table(index=["suite", "item_id", "turn", "state"], columns="verifier",
                            values="expected_emitted").reset_index()
    diff = wide["traversal"] - wide["rrs"]
    body = [[drafter, f"{temperature:g}", len(wide), f"{top ** depth}", f"{rows['mass'].min():.12f}",
             f"{diff.mean():+.5f}", f"{diff.min():+.2e}", f"{int((diff < -FLOAT32_ROUNDING).sum())}"]]
    return (f"## Traversal − RRS over every chain of {depth} tokens from the draft's top {top}, exactly\n\n"
            f"Every state of the verifier study's Top-K driver (1 item per suite, both MT-bench turns, 8 new tokens, "
            f"seed 0, float32). At each state every chain the drafter can draw with sparse_top={top} is enumerated "
            "with its probability (their total, the mass, is 1), each verifier's exact expected emitted tokens on "
            "each chain (rheo.expected) are summed with those weights: the expectation over the drafts, with no "
            f"sampling. below 0: states where Traversal's expectation is below RRS's by more than {FLOAT32_ROUNDING:g} "
            "(the drafter's probabilities are float32; the chains' weights renormalise them in float64).\n\n"
            + markdown_table(["drafter", "T", "states", "chains per state", "lowest mass", "mean diff",
                              "lowest diff", "states below 0"], body) + "\n")


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
    ap.add_argument("--enumerate", type=positive_int, default=None, metavar="TOP",
                    help="exact over the drafts: every chain of --depth tokens from the draft's top TOP")
    ap.add_argument("--depth", type=positive_int, default=4, help="with --enumerate: the chain's length")
    args = ap.parse_args(argv)
    from eval.measure.pairs import load_pair
    from eval.store.committed import write_outputs

    torch.set_num_threads(1)
    pair = load_pair("smollm2_135m", "cpu", "float32")
    drafter = "head" if args.draft_mix is None else f"dial a={args.draft_mix:g}"
    stem = f"chain_over_drafts_T{args.temperature:g}_{drafter.replace(' ', '').replace('=', '')}"
    if args.enumerate is not None:
        rows = enumerate_chains(pair, args.temperature, args.draft_mix, args.enumerate, args.depth, args.limit,
                                args.new_tokens, folder("data"))
        stem = stem.replace("chain_over_drafts", f"chains_enumerated_top{args.enumerate}d{args.depth}")
        text = exact_markdown(rows, args.temperature, drafter, args.enumerate, args.depth)
    else:
        rows = measure(pair, args.temperature, args.draft_mix, args.draws, args.limit, args.new_tokens,
                       folder("data"))
        text = markdown(per_state(rows), args.temperature, drafter, args.draws)
    write_outputs([(Path(args.out) / f"{stem}.md", text.encode()),
                   (Path(args.out) / f"{stem}.parquet", rows.to_parquet(index=False))], Path(args.out))
    print(text)
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
