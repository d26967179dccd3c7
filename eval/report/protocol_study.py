"""The prompt protocol's effect on tau (configs/experiment/protocol.yaml): its archive and its table.

    python -m eval.report.protocol_study outputs/protocol_study --archive outputs/protocol_study.parquet \
        --out outputs/tables/protocol.md

Rows: Rheo m=1 under ``protocol=template`` and ``protocol=eagle3`` (rheo.models.protocol), the same
(suite, item, turn, T, seed) under both, so they pair. The archive keeps the columns the table and a
per-position reading need (no output tokens). The table gives, per temperature and suite and over all
suites, the mean tau under each protocol, the prompt length, and the paired difference eagle3 - template
with a 95% Student-t interval, a sign test and a sign-flip permutation test over items: an item is one
unit (its turns are averaged first: MT-bench's two turns are one cluster), so the n of a row is items,
not prompts. Without the rows folder the table is drawn from ``--archive``, else from the committed
archive of that name under results/.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from eval.report.analysis import fmt, mean_ci
from eval.report.markdown import markdown_table
from eval.report.stats import permutation_test, sign_test
from eval.store.storage import load_results
from rheo.cli import ArgumentParser, run_main
from rheo.paths import REPO_ROOT
from rheo.models.protocol import EAGLE3, TEMPLATE

#: the archive's columns: the row key and settings, the prompt, the counts, what made the row
COLUMNS = ("model", "method", "m", "k", "depth", "tree_size", "config_hash", "protocol", "temperature", "seed",
           "max_new_tokens", "dtype", "dataset", "item_id", "turn", "turns_sha", "gen_seed", "prompt_tokens",
           "new_tokens", "target_calls", "tau", "accept_lengths", "status", "code_version", "device_name",
           "num_threads", "finished_at")
PAIR_KEY = ["temperature", "seed", "dataset", "item_id", "turn"]
ALL = "all suites"


def archive(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows, the archive's columns, in a stable order."""
    ok = rows[rows["status"] == "ok"]
    return ok[[c for c in COLUMNS if c in ok.columns]].sort_values(["protocol", *PAIR_KEY]).reset_index(drop=True)


def paired_prompts(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per prompt present under both protocols: tau and prompt length under each."""
    wide = rows.pivot_table(index=PAIR_KEY, columns="protocol", values=["tau", "prompt_tokens"], aggfunc="first")
    wide.columns = [f"{value}_{protocol}" for value, protocol in wide.columns]
    need = [f"tau_{TEMPLATE}", f"tau_{EAGLE3}"]
    if not set(need) <= set(wide.columns):
        raise ValueError(f"the rows hold no pairs: protocols {sorted(rows['protocol'].dropna().unique())}, "
                         f"both {TEMPLATE} and {EAGLE3} are needed")
    return wide.dropna(subset=need).reset_index()


def item_clusters(prompts: pd.DataFrame) -> pd.DataFrame:
    """One line per (T, seed, suite, item): its turns averaged (the unit of the intervals)."""
    cols = [c for c in prompts.columns if c.startswith(("tau_", "prompt_tokens_"))]
    items = prompts.groupby(["temperature", "seed", "dataset", "item_id"], as_index=False)[cols].mean()
    items["diff"] = items[f"tau_{EAGLE3}"] - items[f"tau_{TEMPLATE}"]
    items["turns"] = prompts.groupby(["temperature", "seed", "dataset", "item_id"]).size().to_numpy()
    return items


def summary(items: pd.DataFrame) -> pd.DataFrame:
    """Per temperature, per suite and over all suites: means, the paired difference and its tests."""
    out = []
    for temp, at_t in items.groupby("temperature", sort=True):
        parts = [(suite, part) for suite, part in at_t.groupby("dataset", sort=True)] + [(ALL, at_t)]
        for suite, part in parts:
            diff, half, n = mean_ci(part["diff"])
            base = float(part[f"tau_{TEMPLATE}"].mean())
            out.append({
                "T": temp, "suite": suite, "items": n, "prompts": int(part["turns"].sum()),
                "tau_template": mean_ci(part[f"tau_{TEMPLATE}"]), "tau_eagle3": mean_ci(part[f"tau_{EAGLE3}"]),
                "prompt_template": float(part[f"prompt_tokens_{TEMPLATE}"].mean()),
                "prompt_eagle3": float(part[f"prompt_tokens_{EAGLE3}"].mean()),
                "diff": diff, "half": half, "pct": 100 * diff / base if base else math.nan,
                "p_sign": sign_test(part["diff"]), "p_perm": permutation_test(part["diff"]),
            })
    return pd.DataFrame(out)


def _p(value: float) -> str:
    return "-" if value is None or math.isnan(value) else (f"{value:.2g}" if value >= 0.001 else f"{value:.1e}")


def table(rows: pd.DataFrame) -> str:
    """The Markdown page: what was run, then one table (T, suite)."""
    stats = summary(item_clusters(paired_prompts(rows)))
    first = rows.iloc[0]
    header = ["T", "suite", "items (prompts)", "prompt tokens template → eagle3", "τ template", "τ eagle3",
              "Δτ eagle3 − template (paired)", "Δτ %", "p sign", "p perm"]
    body = [[f"{r.T:g}", f"**{r.suite}**" if r.suite == ALL else r.suite, f"{r.items} ({r.prompts})",
             f"{r.prompt_template:.0f} → {r.prompt_eagle3:.0f}", fmt(*r.tau_template[:2]), fmt(*r.tau_eagle3[:2]),
             fmt(r.diff, r.half, 3), f"{r.pct:+.1f}%", _p(r.p_sign), _p(r.p_perm)]
            for r in stats.itertuples()]
    lines = [
        "# The prompt protocol's effect on τ",
        "",
        f"Rheo m={int(first['m'])} on the paper tree (K={int(first['k'])}, depth {int(first['depth'])}, "
        f"R={int(first['tree_size'])}), {first['model']}, {first['dtype']}, {int(first['max_new_tokens'])} new tokens, "
        f"seed {int(first['seed'])}, {first['device_name']}; each prompt decoded under `protocol=template` (the "
        f"chat template alone: the committed rows' prompts) and `protocol=eagle3` (EAGLE-3's Llama-3 evaluation "
        f"system message in the same template, answers stripped before the second turn: "
        f"[docs/protocols.md](../../docs/protocols.md)), with the same seeds. Mean ± 95% CI over items (an item's "
        f"turns averaged first: MT-bench's two turns are one cluster); Δτ is paired per item, with a sign test and "
        f"a sign-flip permutation test over items. Rows: `results/protocol_study.parquet` "
        f"(`python -m eval.run -m experiment=protocol`).",
        "",
        markdown_table(header, body),
        "",
    ]
    return "\n".join(lines)


def archive_bytes(rows: pd.DataFrame) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(archive(rows), preserve_index=False), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def main(argv: Optional[Sequence[str]] = None) -> int:
    from eval.store.committed import write_outputs

    p = ArgumentParser(prog="python -m eval.report.protocol_study", description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="?", default=None, help="the study's rows folder (outputs/protocol)")
    p.add_argument("--archive", type=Path, required=True, help="the archive written from the rows (or read, alone)")
    p.add_argument("--out", type=Path, required=True, help="the Markdown table")
    args = p.parse_args(argv)
    if args.rows is not None and Path(args.rows).is_dir():
        rows, source = load_results(Path(args.rows)), Path(args.rows)
        # the archive and the table through one Outputs: checked, written, and recorded for `rheo publish`
        write_outputs([(args.archive, archive_bytes(rows)), (args.out, table(rows).encode())], source)
        return 0
    source = args.archive if args.archive.is_file() else REPO_ROOT / "results" / args.archive.name
    write_outputs([(args.out, table(pd.read_parquet(source)).encode())], source)  # no rows of one's own: the archive
    return 0


if __name__ == "__main__":
    run_main(main, "python -m eval.report.protocol_study")
