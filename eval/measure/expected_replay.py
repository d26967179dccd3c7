"""Replay committed main-table rows cycle by cycle: realized, exact expected, and a Monte-Carlo.

    python -m eval.measure.expected_replay RUNS [--variant "rheo m=1"] [--rows N] [--order worst|first]
                                   [--mc R] [--seed-offset S] [--dtype D] [--out FILE.md] [--jsonl FILE]

RUNS: a results folder or archive of ``make reproduce`` (rows with ``expected_accept_lengths``).
For each chosen row the generation is run again (same prompt, same method, ``gen_seed`` +
``seed-offset``). At every cycle start the decoder's generator state is copied, and with the copy
the same tree the decoder is about to build is built, scored, given its exact expectation
(``rheo.expected``), verified ``R`` times with independent numbers (the Monte-Carlo), and verified
once more with the copy itself, which is the decoder's own verification (the *replayed*
realized count). Then the decoder runs its cycle untouched.

What each row's sums say (cycle c: realized r_c, expected e_c, Monte-Carlo mean mc_c):

- sum(r - e): what ``results/tables/expected.md`` averages (its "every cycle, last uncut");
  mean 0 over rows by optional stopping;
- sum(mc - e): is the expectation right on these very trees? (mean 0 if it is; its standard
  error is known from the R draws);
- sum(r - mc): the decoder's verification against independent verifications of the same trees.

With ``--mc 0`` nothing is drafted twice: a plain generation with its expectations. With
``--seed-offset 0`` the replay must reproduce the committed tokens (checked per row:
``identical``). A nonzero offset gives new trajectories of the same keys: a replication; so does
``--dtype`` other than the rows' own (the martingale argument holds in any precision, and a CPU
without bf16 instructions neither reproduces bf16 rows bit for bit nor runs them fast).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import torch

from eval.report.analysis import mean_ci, normal_half_width
from rheo.cli import ArgumentParser, non_negative_int, one_line, path_arg, positive_int, run_main
from rheo.config import SpecConfig
from rheo.decode import generate_with_source
from rheo.methods import get_method
from rheo.paths import folder
from rheo.random import TorchRandom
from rheo.resume_key import append_jsonl, digest, read_jsonl

PROG = "python -m eval.measure.expected_replay"
SPEC_COLUMNS = ("k", "m", "depth", "tree_size", "sparse_top", "proxy", "verify_order", "rank", "probe_min", "adapt")


def row_spec(row) -> SpecConfig:
    """The SpecConfig a committed row ran with (its method, temperature and tree columns)."""
    fields = {c: row[c] for c in SPEC_COLUMNS if c in row and not _missing(row[c])}
    if not _missing(row.get("branching")):
        fields["branching"] = tuple(int(b) for b in row["branching"])
        fields["replacement"] = bool(row["replacement"])
    return SpecConfig(method=row["method"], temperature=float(row["temperature"]), **fields)


def _missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or an array: present
        return False


def replay_row(pair, row, prompt: list[int], mc: int, seed_offset: int, dtype: str) -> dict:
    """One generation of ``row``'s config on ``prompt`` with the per-cycle replay (module docstring)."""
    cfg = row_spec(row)
    method = get_method(cfg.method)
    generator = torch.Generator().manual_seed(int(row["gen_seed"]) + seed_offset)
    cycles: list[dict] = []

    def on_state(state) -> None:
        if not mc:  # a plain generation: nothing drafted twice
            return
        twin = torch.Generator()
        twin.set_state(generator.get_state())  # the decoder's stream, copied
        rng = TorchRandom(twin)
        built = method.build_tree(state.draft_fn, state.root, cfg, rng, state.draft_to_target, state.device)
        try:
            logits = state.target_session.score_tree(built.tree).logits
            expected = method.expected_emitted(built, logits, cfg)
            replayed = len(method.verify_tree(built, logits, cfg, rng).tokens)
            other = TorchRandom(torch.Generator().manual_seed(10_007 * (state.index + 1) + seed_offset))
            runs = [len(method.verify_tree(built, logits, cfg, other).tokens) for _ in range(mc)]
        finally:
            state.target_session.discard()
        mean = sum(runs) / len(runs) if runs else float("nan")
        var = sum((x - mean) ** 2 for x in runs) / (len(runs) - 1) if len(runs) > 1 else float("nan")
        cycles.append(dict(expected=expected, replayed=replayed, mc=mean, mc_var=var))

    with torch.inference_mode():
        out = generate_with_source(pair.target, pair.drafter, prompt, int(row["max_new_tokens"]), cfg,
                                   TorchRandom(generator), list(pair.eos_token_ids) or None,
                                   record_expected=True, on_state=on_state)
    realized = list(out.accept_lengths)
    realized[-1] = out.last_cycle_verified
    e = [c["expected"] for c in cycles] if mc else list(out.expected_accept_lengths)
    mcs = [c["mc"] for c in cycles]
    return dict(
        dataset=row["dataset"], item_id=int(row["item_id"]), turn=int(row["turn"]), seed_offset=seed_offset, mc=mc,
        dtype=dtype,
        cycles=len(e), identical=list(out.tokens) == list(row["output_tokens"]),
        replay_matches=[c["replayed"] for c in cycles] == realized if mc else None,
        expected_matches=max(abs(a - b) for a, b in zip(e, out.expected_accept_lengths)) < 1e-9 if mc else None,
        r_minus_e=sum(realized) - sum(e), mc_minus_e=sum(mcs) - sum(e) if mc else float("nan"),
        mc_minus_e_var=sum(c["mc_var"] for c in cycles) / mc if mc > 1 else float("nan"),
        r_minus_mc=sum(realized) - sum(mcs) if mc else float("nan"))


def prompt_of(pair, row, data_dir: Path, answers: dict) -> list[int]:
    """The row's prompt: its suite item's turns, earlier turns answered by the committed rows."""
    from eval.prompts.suites import chat_messages, load_suite

    item = load_suite(data_dir, row["dataset"], [int(row["item_id"])])[0]
    previous = [answers[(row["dataset"], int(row["item_id"]), t)] for t in range(int(row["turn"]))]
    return pair.format_chat(chat_messages(item, int(row["turn"]), previous))


def choose(rows: pd.DataFrame, variant: str, n: int, order: str) -> pd.DataFrame:
    from eval.report.tables import uncut_difference

    mine = rows[(rows["variant"] == variant) & rows["expected_accept_lengths"].notna()].copy()
    if mine["model"].nunique() > 1 or mine["dtype"].nunique() > 1:
        raise ValueError(f"rows of {variant!r} from several models or dtypes: give one run's results")
    if mine.empty:
        raise ValueError(f"no row of variant {variant!r} with expected_accept_lengths")
    mine["r_minus_e"] = [uncut_difference(r)[0] for _, r in mine.iterrows()]
    mine = mine.sort_values("r_minus_e") if order == "worst" else mine.sort_values(["dataset", "item_id", "turn"])
    return mine.head(n) if n else mine


def summary(results: list[dict], variant: str, mc: int, committed: pd.DataFrame | None = None) -> str:
    """Markdown lines; ``committed``: the chosen committed rows (their own sums, for comparison)."""
    df = pd.DataFrame(results)
    n, offset = len(df), int(df["seed_offset"].iloc[0])
    dtype = str(df["dtype"].iloc[0]) if "dtype" in df else None
    own = committed is None or dtype is None or not len(committed) or dtype == str(committed["dtype"].iloc[0])
    replay = offset == 0 and own  # the committed generations themselves

    def ci(values, cycles: float | None = None) -> str:
        mean, half, _ = mean_ci(values)
        per = f" per row; per cycle {mean / cycles:+.4f} ± {half / cycles:.4f}" if cycles else ""
        return f"{mean:+.3f} ± {half:.3f}{per}"

    lines = [f"### {variant}: {n} rows, seed offset {offset}{'' if own else f', {dtype}'}, "
             f"{mc} Monte-Carlo verifications per tree", ""]
    if replay:
        lines.append(f"- committed tokens reproduced: {int(df['identical'].sum())} / {n}"
                     + (f"; replayed verification = the decoder's on every cycle: {int(df['replay_matches'].sum())}"
                        f" / {n}; expectation as recorded: {int(df['expected_matches'].sum())} / {n}" if mc else ""))
    lines += [f"- mean cycles per row: {df['cycles'].mean():.1f}",
              f"- realized − expected, summed over a row's cycles (± = 95% over rows): "
              f"{ci(df['r_minus_e'], df['cycles'].mean())}"]
    if committed is not None and len(committed) and not replay:
        from eval.report.tables import uncut_difference

        sums = [uncut_difference(r) for _, r in committed.iterrows()]
        lines.append(f"- the same keys' committed rows (seed offset 0, {committed['dtype'].iloc[0]}): "
                     f"{ci([d for d, _ in sums], sum(c for _, c in sums) / len(sums))}")
    if mc:
        se = math.sqrt(df["mc_minus_e_var"].sum()) / n
        lines += [f"- Monte-Carlo − expected {df['mc_minus_e'].mean():+.3f} ± {normal_half_width(se):.3f} per row (± from the "
                  f"verifications' own variance)", f"- realized − Monte-Carlo {ci(df['r_minus_mc'])} per row"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=path_arg, help="a results folder or archive of make reproduce")
    ap.add_argument("--variant", default="rheo m=1")
    ap.add_argument("--rows", type=non_negative_int, default=16, help="how many rows (0 = all)")
    ap.add_argument("--order", choices=["worst", "first"], default="worst",
                    help="worst: the rows with the most negative sum(realized - expected) first")
    ap.add_argument("--mc", type=non_negative_int, default=100, help="Monte-Carlo verifications per tree")
    ap.add_argument("--seed-offset", type=int, default=0, help="added to each row's gen_seed (0 = replay)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"],
                    help="the models' precision (default: the rows' own; another one gives new trajectories)")
    ap.add_argument("--data-dir", type=path_arg, default=folder("data"))
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--jsonl", type=path_arg, help="append one JSON line per replayed row here, with its key (a "
                    "rerun reuses a line only when the row, its prompt, --mc, --seed-offset, the dtype and the "
                    "weights are the same)")
    ap.add_argument("--out", type=path_arg, help="write the summary (and the command) here instead of printing it")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    from eval.measure.pairs import load_pair
    from eval.report.analysis import load

    from eval.store.committed import CommittedOutputsError, refuse_committed, write_outputs
    from eval.store.storage import rows_or_archive

    torch.set_num_threads(args.threads)
    try:
        refuse_committed(args.out, args.jsonl, source=args.runs)  # before minutes of replaying
        rows = load(rows_or_archive(args.runs))
        chosen = choose(rows, args.variant, args.rows, args.order)
    except (OSError, ValueError, CommittedOutputsError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2
    first = chosen.iloc[0]  # the model and dtype the rows ran with
    dtype = args.dtype or str(first["dtype"])
    protocol = first.get("protocol")  # the rows' prompt protocol (None: rows older than the column, template)
    pair = load_pair(str(first["model"]), "cpu", dtype).with_protocol(protocol if isinstance(protocol, str) else "template")
    mine = rows[(rows["variant"] == args.variant) & (rows["model"] == first["model"])]
    answers = {(r["dataset"], int(r["item_id"]), int(r["turn"])): pair.answer_text(list(r["output_tokens"]))
               for _, r in mine.iterrows()}
    done = finished(args.jsonl)
    weights = pair_weights(str(first["model"]))
    results = []
    for _, row in tqdm(list(chosen.iterrows()), desc="replay", unit="row"):
        prompt = prompt_of(pair, row, args.data_dir, answers)
        key = replay_key(row, prompt, args.mc, args.seed_offset, dtype, weights)
        if digest(key) in done:  # a killed run continues: rows already in --jsonl are not generated again
            results.append(done[digest(key)])
            continue
        got = {**replay_row(pair, row, prompt, args.mc, args.seed_offset, dtype), "key": key}
        results.append(got)
        if args.jsonl:
            with append_jsonl(args.jsonl) as f:
                f.write(json.dumps(got) + "\n")
    text = summary(results, args.variant, args.mc, chosen)
    if args.out:
        command = " ".join([PROG] + [a for a in (argv if argv is not None else sys.argv[1:])])
        write_outputs([(Path(args.out), f"Command: `{command}`\n\n{text}".encode())], args.runs)
    else:
        print(text, end="")
    return 0


def replay_key(row, prompt: list[int], mc: int, seed_offset: int, dtype: str, weights) -> dict:
    """Everything that decides a replayed row (rheo.resume_key): the stored row it replays (its config
    hash, which holds the method and its parameters, variant, place, generation seed and the tokens it
    emitted: a row of another runs file differs in one of them), the prompt's token ids (the suite's
    text, the chat format, the earlier turns' answers), the Monte-Carlo count, the seed offset, the
    precision and the pair's weight files."""
    return {"config_hash": str(row["config_hash"]), "variant": str(row["variant"]), "model": str(row["model"]),
            "dataset": str(row["dataset"]), "item_id": int(row["item_id"]), "turn": int(row["turn"]),
            "gen_seed": int(row["gen_seed"]), "max_new_tokens": int(row["max_new_tokens"]),
            "output_sha": digest([int(t) for t in row["output_tokens"]]), "prompt_sha": digest([int(t) for t in prompt]),
            "mc": int(mc), "seed_offset": int(seed_offset), "dtype": str(dtype), "weights": weights}


def pair_weights(model: str) -> dict | None:
    """Fingerprints of the weight files the pair of a catalog ``model`` is loaded from (None otherwise)."""
    from rheo.models.catalog import MODELS

    if model not in MODELS:
        return None
    from rheo.models.locate import head_fingerprint, target_fingerprint

    return {"head_sha": head_fingerprint(model), "target_sha": target_fingerprint(model)}


def finished(path) -> dict:
    """digest(key) -> the row already in ``path`` under that key (replay_key). Lines without a key
    (written before keys existed) are replayed again; a line cut by a kill is skipped with a warning
    naming the file and line (rheo.resume_key.read_jsonl)."""
    if not path:
        return {}
    return {digest(got["key"]): got for got in read_jsonl(path, PROG) if isinstance(got.get("key"), dict)}


if __name__ == "__main__":
    run_main(main, prog=PROG)
