"""Tables of same-state rows (eval.same_state): ``python -m eval.same_state_tables RESULTS [--out FILE]``.

* **paired** - per (model, driver, temperature): for every compared method, the mean
  expected emitted tokens per suite and pooled, and the paired difference vs Top-K with
  a 95% confidence interval computed over *keys* (key = (suite, item, turn, seed)): each
  key's value is the mean over its states, because the states of one generation are not
  independent. CI: mean +- 1.96 x sd / sqrt(keys) (normal approximation).
* **mechanism** - pooled per method: P(the accepted path reaches depth d), the share of
  emitted tokens that are sampled children, the probe (share of sampling expansions
  whose sample survives pruning, by depth) and the draft calibration (per bucket of
  draft probability: mean draft vs mean target probability of the kept children).

The metric is the mean over the *driver's* cycle starts of each method's expected
emitted tokens there, not each method's own tau (which averages over its own states).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

KEY = ["dataset", "item_id", "turn", "seed"]
GROUP = ["model", "driver", "temperature"]
BASELINE = "topk"


def key_means(rows: pd.DataFrame) -> pd.DataFrame:
    """One value per (group, method variant, key): the mean expected emitted over the key's states."""
    return rows.groupby(GROUP + ["variant"] + KEY, as_index=False)["expected_emitted"].mean()


def paired_differences(rows: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per group, suite (and "pooled") and variant: mean, paired difference vs ``baseline`` and its CI."""
    per_key = key_means(rows)
    out = []
    for group, frame in per_key.groupby(GROUP):
        wide = frame.pivot_table(index=KEY, columns="variant", values="expected_emitted")
        for suite in sorted(wide.index.get_level_values("dataset").unique()) + ["pooled"]:
            part = wide if suite == "pooled" else wide.xs(suite, level="dataset", drop_level=False)
            for variant in wide.columns:
                row = dict(zip(GROUP, group), suite=suite, variant=variant, keys=int(part[variant].notna().sum()),
                           mean=float(part[variant].mean()))
                if baseline in wide.columns and variant != baseline:
                    diff = (part[variant] - part[baseline]).dropna()
                    half = 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
                    row.update(diff=float(diff.mean()), half_width=half)
                out.append(row)
    return pd.DataFrame(out)


def paired_markdown(rows: pd.DataFrame, baseline: str = BASELINE) -> str:
    if rows.empty:
        return "(no same-state rows)\n"
    table = paired_differences(rows, baseline)
    lines = []
    for group, frame in table.groupby(GROUP):
        lines += [f"### {', '.join(f'{k}={v}' for k, v in zip(GROUP, group))}", "",
                  f"Mean expected emitted tokens per driver state; paired difference vs {baseline} "
                  "with a 95% CI over keys.", "", f"| suite | method | keys | mean | diff vs {baseline} |",
                  "|---|---|---|---|---|"]
        for r in frame.itertuples():
            diff = "" if pd.isna(getattr(r, "diff", np.nan)) else f"{r.diff:+.3f} +- {r.half_width:.3f}"
            lines.append(f"| {r.suite} | {r.variant} | {r.keys} | {r.mean:.3f} | {diff} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def mechanism_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Pooled mechanism columns per (group, variant): list columns are averaged (depth_accept) or
    summed then divided (probe, calibration)."""
    def stacked(frame: pd.DataFrame, column: str) -> np.ndarray:
        return np.stack([np.asarray(x, dtype=float) for x in frame[column]])  # [states, d]

    out = []
    for keys, frame in rows.groupby(GROUP + ["variant"]):
        n = stacked(frame, "calib_n").sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            survival = stacked(frame, "probe_kept").sum(0) / stacked(frame, "probe_drawn").sum(0)
            draft, target = stacked(frame, "calib_q").sum(0) / n, stacked(frame, "calib_p").sum(0) / n
        out.append({**dict(zip(GROUP + ["variant"], keys)), "states": len(frame),
                    "expected_emitted": float(frame["expected_emitted"].mean()),
                    "depth_accept": stacked(frame, "depth_accept").mean(0).tolist(),
                    "sampled_share": float(frame["sampled_share"].mean()), "probe_survival": survival.tolist(),
                    "calib_draft": draft.tolist(), "calib_target": target.tolist(),
                    "calib_children": n.astype(int).tolist()})
    return pd.DataFrame(out)


def mechanism_markdown(rows: pd.DataFrame) -> str:
    if rows.empty:
        return ""
    def fmt(xs) -> str:
        return " ".join("-" if x is None or math.isnan(x) else f"{x:.2f}" for x in xs)

    lines = ["| model | driver | T | method | states | P(depth >= d), d = 1.. | sampled share | probe survival by "
             "depth | calibration: target prob. per draft bucket |", "|---|---|---|---|---|---|---|---|---|"]
    for r in mechanism_table(rows).itertuples():
        lines.append(f"| {r.model} | {r.driver} | {r.temperature:g} | {r.variant} | {r.states} | {fmt(r.depth_accept)} "
                     f"| {r.sampled_share:.3f} | {fmt(r.probe_survival)} | {fmt(r.calib_target)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from eval.same_state import export_rows, load_rows

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a same-state output_dir (python -m eval.same_state output_dir=...)")
    ap.add_argument("--out", help="write the markdown here instead of printing it")
    ap.add_argument("--figure", help="also draw the paired-gain and per-depth figure (PNG) here")
    ap.add_argument("--archive", help="also write every row into this parquet file (and X.driver.parquet), for git")
    args = ap.parse_args(argv)
    try:
        rows = load_rows(args.results)
        if args.archive:
            if Path(args.archive).resolve() == Path(args.results).resolve():
                raise ValueError(f"--archive {args.archive} is the input itself: give another file")
            print(f"{export_rows(args.results, args.archive)} rows -> {args.archive}", file=sys.stderr)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = paired_markdown(rows) + "\n" + mechanism_markdown(rows)
    if args.figure and not rows.empty:
        from eval.same_state_plots import draw

        print(f"figure -> {draw(rows, args.figure)}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
