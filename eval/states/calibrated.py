"""Does calibrating the head move Rheo's gain? The dial's a = 0 cells with the head as trained and
with one fitted draft temperature, paired over prompts.

    python -m eval.states.calibrated TRAINED CALIBRATED [--out FILE] [--archive X.parquet]

TRAINED: the dial's same-state rows (its output_dir or archive); the rows at ``draft_mix = 0`` without
``draft_temp`` are read. CALIBRATED: the same study's rows with ``draft_temp`` set (``make
calibrated-cells``). The two runs draw other trees, so their driver states differ: the paired unit is
the prompt (its states averaged first), as in every same-state table. For each temperature and each
Rheo setting X, per prompt: gain = E[τ](X) − E[τ](Top-K) within a run, and the change of that gain
from the trained head to the calibrated one, with its 95% half-width over prompts, clustered by item.
"""

from __future__ import annotations

import sys
from typing import Optional

import pandas as pd

from eval.report.analysis import item_ci
from eval.report.markdown import frame_markdown
from eval.states.options import AUTO, CI_TEXT, M0, M1, TOPK, _pm, wide_keys
from eval.states.rule_cells import rules_of
from rheo.cli import ArgumentParser, path_arg, run_main

PROG = "python -m eval.states.calibrated"


def _head_rows(rows: pd.DataFrame, tempered: bool) -> pd.DataFrame:
    """Rows at ``draft_mix`` 0 (or unset), drafted with a draft temperature or without one."""
    def column(name: str) -> pd.Series:
        return rows[name] if name in rows else pd.Series(float("nan"), index=rows.index)

    return rows[(column("draft_mix").fillna(0.0) == 0.0) & (column("draft_temp").notna() == tempered)]


def trained_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The dial's rows of the head as trained: ``draft_mix`` 0 (or unset) and no ``draft_temp``."""
    return _head_rows(rows, tempered=False)


def calibrated_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows drafted with a draft temperature, at ``draft_mix`` 0 (or unset)."""
    return _head_rows(rows, tempered=True)


def gain_frame(trained: pd.DataFrame, calibrated: pd.DataFrame) -> pd.DataFrame:
    """One row per (temperature, Rheo setting) present in both: prompts paired, the gain over Top-K
    with each head, and the paired change (module docstring)."""
    before, after = wide_keys(trained, "temperature"), wide_keys(calibrated, "temperature")
    settings = [M0, M1, AUTO] + rules_of(pd.concat([trained, calibrated]))
    out = []
    for t in sorted(set(before) & set(after)):
        wb, wa = before[t], after[t]
        for x in settings:
            if not all(c in w.columns for w in (wb, wa) for c in (x, TOPK)):
                continue
            gain_b, gain_a = (wb[x] - wb[TOPK]).dropna(), (wa[x] - wa[TOPK]).dropna()
            both = gain_b.index.intersection(gain_a.index)
            row = {"temperature": t, "setting": x, "prompts": len(both)}
            for name, values in (("topk_trained", wb[TOPK].loc[both]), ("topk_calibrated", wa[TOPK].loc[both]),
                                 ("gain_trained", gain_b.loc[both]), ("gain_calibrated", gain_a.loc[both]),
                                 ("change", gain_a.loc[both] - gain_b.loc[both]),
                                 ("tau_change", wa[x].loc[both] - wb[x].loc[both])):
                mean, half, _ = item_ci(values)
                row[name], row[name + "_hw"] = mean, half
            out.append(row)
    return pd.DataFrame(out)


def gain_markdown(frame: pd.DataFrame, draft_temps: list[float]) -> str:
    temps = ", ".join(f"{t:g}" for t in draft_temps) or "-"
    lines = ["## The head as trained and as calibrated: Rheo's gain over Top-K at a = 0 (same-state)", "",
             CI_TEXT + f". Calibrated: the head's logits divided by the fitted draft temperature ({temps}) at "
             "every drafted node, the driver (Top-K) included, so its states are its own; the paired unit is "
             "the prompt. Gain = E[τ](setting) − E[τ](Top-K) in the same run; change = calibrated − trained, "
             "paired over prompts; τ change = the setting's own E[τ], calibrated − trained.", ""]
    if frame.empty:
        return "\n".join(lines + ["No temperature holds rows of both heads.", ""])
    table = pd.DataFrame({
        "T": [f"{t:g}" for t in frame["temperature"]], "setting": frame["setting"], "prompts": frame["prompts"],
        "E[τ] Top-K trained → calibrated": [f"{a:.3f} → {b:.3f}" for a, b in
                                           zip(frame["topk_trained"], frame["topk_calibrated"])],
        "gain, trained": [_pm(m, h) for m, h in zip(frame["gain_trained"], frame["gain_trained_hw"])],
        "gain, calibrated": [_pm(m, h) for m, h in zip(frame["gain_calibrated"], frame["gain_calibrated_hw"])],
        "change of gain": [_pm(m, h) for m, h in zip(frame["change"], frame["change_hw"])],
        "τ change": [_pm(m, h) for m, h in zip(frame["tau_change"], frame["tau_change_hw"])]})
    return "\n".join(lines + [frame_markdown(table), ""])


def main(argv=None) -> Optional[int]:
    """The command line (module docstring): exit status 2 with one line for a refused input."""
    from eval.store.committed import write_outputs
    from eval.store.state_archive import archive_files, load_rows
    from eval.store.storage import report_source

    ap = ArgumentParser(prog=PROG, description="Rheo's gain at a = 0 with the head as trained and calibrated.")
    ap.add_argument("trained", type=path_arg, help="the dial's same-state output_dir or archive X.parquet")
    ap.add_argument("calibrated", type=path_arg, help="the calibrated head's same-state output_dir or archive")
    ap.add_argument("--out", type=path_arg, help="the Markdown table file")
    ap.add_argument("--archive", type=path_arg, help="also write the rows of CALIBRATED (a folder) to this archive")
    args = ap.parse_args(argv)
    args.calibrated, args.archive = report_source(args.calibrated, args.archive)
    trained = trained_rows(load_rows(report_source(args.trained, None)[0]))
    calibrated = calibrated_rows(load_rows(args.calibrated))
    if trained.empty or calibrated.empty:
        which = args.trained if trained.empty else args.calibrated
        print(f"{PROG}: error: {which} holds no same-state rows of that head at draft_mix 0", file=sys.stderr)
        return 2
    text = gain_markdown(gain_frame(trained, calibrated), sorted(calibrated["draft_temp"].unique()))
    if not args.out and not args.archive:
        print(text)
        return 0
    # the table reads expected tokens only: the archive keeps no per-depth lists, no calibration lists
    archive = (archive_files(args.calibrated, args.archive, without=("calibration", "depth"))[0]
               if args.archive else [])
    write_outputs([(args.out, text.encode()), *archive], args.calibrated)
    if not args.out:
        print(text)
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (FileNotFoundError, ValueError))
