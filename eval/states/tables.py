"""Tables and figures of same-state rows (eval.measure.same_states).

    python -m eval.states.tables RESULTS [--out FILE] [--figures PREFIX] [--figure FILE]
                                     [--archive FILE [--archive-without GROUP ...]] [--also RESULTS2 ...]

RESULTS: a same-state output_dir, or an archive (X.parquet) written by ``--archive``; ``--also``
joins the rows of other folders or archives into the tables and figures (a study split over two
folders), never into the archive.

* **paired** - per (model, head, driver, temperature): every compared method (named by the
  registry, eval.states.labels) per suite and pooled: keys, mean expected emitted tokens,
  the paired difference vs Top-K, its 95% half-width and the keys a half-width of 0.03 would
  take (eval.states.stats: every interval is over keys, clustered by item, a key's states
  averaged first).
* **m ablation** - Rheo m vs Rheo m=1, the same columns (when the rows hold two or more m).
* **root** - per method and temperature: mean root acceptance, OT bound and their gap (95% CI
  over keys), mean sampled share, probe survival by depth and pooled.
* **mechanism** - P(the accepted path reaches depth d) and the draft calibration, pooled.

``--figures PREFIX`` writes PREFIX<name>.png for every figure the rows allow (eval.states.plots;
``--figures outputs/figures/same_state_`` gives outputs/figures/same_state_m_ablation.png, ...); a
figure of that prefix that an earlier report wrote there and that is not drawn now is removed (a file
no report wrote is left alone). ``--figure FILE``: the one-file summary. The committed results are
never written (exit status 2, nothing written): ``make publish`` updates them.

The metric is the mean over the *driver's* cycle starts of each method's expected emitted tokens
there, not each method's own tau (which averages over its own states).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from eval.report.analysis import display_name
from eval.report.markdown import markdown_table
from eval.states.labels import NO_DIAL
from eval.states.stats import (GROUP, POOLED, RESOLUTION, labelled, m_ablation, mechanism_table, paired_differences,
                               probe_share)
from rheo.cli import ArgumentParser, one_line, path_arg, run_main

PROG = "python -m eval.states.tables"
KEYS_TEXT = ("± = 95% half-width over keys, clustered by item (a key is one prompt: suite, item, turn, seed; "
             "its states averaged first; an item's turns and seeds are one unit: cluster-robust Student-t over items)")
CI_TEXT = f"{KEYS_TEXT}; keys for ±{RESOLUTION:g} = keys × (half-width / {RESOLUTION:g})², rounded up (at least 2)."


def _num(x: float, digits: int = 3, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _pm(mean: float, half: float, sign: bool = False) -> str:
    return "-" if math.isnan(mean) else f"{_num(mean, sign=sign)} ± {_num(half)}"


def _title(group: tuple) -> str:
    cells = dict(zip(GROUP, group))
    dial = "" if cells["dial"] == NO_DIAL else f", draft_mix a = {cells['dial']}"
    return (f"{cells['model']}, {cells['dtype']}, head {cells['head_sha']}, driver {display_name(cells['driver'])}"
            f"{dial}, T = {cells['temperature']:g}")


def _diff_table(table: pd.DataFrame, base: str, suites: bool) -> list[str]:
    header = ["suite"] * suites + ["method", "keys", "mean", f"diff vs {base}", "half-width",
                                   f"keys for ±{RESOLUTION:g}"]
    body = [[r.suite] * suites + [r.label, str(r.keys), _pm(r.mean, r.mean_hw), _pm(r.diff, r.half_width, sign=True),
                                  _num(r.half_width), "-" if math.isnan(r.keys_for_003) else f"{int(r.keys_for_003)}"]
            for r in table.itertuples()]
    return markdown_table(header, body).split("\n")


def paired_markdown(rows: pd.DataFrame) -> str:
    """Per group: the pooled table, then every suite (the module docstring's "paired")."""
    if rows.empty:
        return "(no same-state rows)\n"
    rows = labelled(rows)
    from eval.states.labels import baseline_label

    base = baseline_label(rows)
    head = f"paired vs {base}" if base else "(no Top-K rows: no paired difference)"
    base = base or "Top-K"
    lines = [f"## Expected emitted tokens per driver state, {head}", "", CI_TEXT, ""]
    for group, frame in paired_differences(rows).groupby(GROUP):
        lines += [f"### {_title(group)}", "", "Pooled over suites:", ""]
        lines += _diff_table(frame[frame["suite"] == POOLED], base, suites=False) + [""]
        if frame["suite"].nunique() > 2:  # more than one suite
            lines += ["Per suite:", ""] + _diff_table(frame[frame["suite"] != POOLED], base, suites=True) + [""]
    return "\n".join(lines) + "\n"


def m_ablation_markdown(rows: pd.DataFrame) -> str:
    table = m_ablation(rows)
    if table.empty:
        return ""
    base = next(r.label for r in table.itertuples() if math.isnan(r.diff))
    lines = [f"## Rheo m vs {base} (m ablation, pooled over suites)", "", CI_TEXT, ""]
    for group, frame in table[table["suite"] == POOLED].groupby(GROUP):
        lines += [f"### {_title(group)}", ""] + _diff_table(frame, base, suites=False) + [""]
    return "\n".join(lines) + "\n"


def _t(r) -> str:
    """The temperature cell of a mechanism row, with the dial value when the rows are on the dial."""
    return f"{r.temperature:g}" + ("" if r.dial == NO_DIAL else f", a = {r.dial}")


def _fmt_list(xs) -> str:
    return " ".join("-" if x is None or math.isnan(x) else f"{x:.2f}" for x in xs)


def root_markdown(rows: pd.DataFrame) -> str:
    """The root columns and the probe per method and temperature (module docstring's "root")."""
    if rows.empty:
        return ""
    mech = mechanism_table(rows)
    lines = ["## Root acceptance vs the optimal-transport bound; sampled share and probe", "",
             "Root: the method's own single-node acceptance at the driver's state (every child surviving) and "
             "the largest acceptance any lossless verifier reaches for the method's candidate sets; gap = bound "
             "− acceptance; " + KEYS_TEXT + ". '-': not recorded (static roots with more than "
             "20,000 ordered draws). Sampled share: expected sampled children on the accepted path / expected "
             "emitted. Probe: sampled children kept after pruning / drawn, by depth of the drawing node "
             "(0 = root), and pooled over depths. bound < acc.: states whose bound is below the acceptance by "
             "more than 1e-6 (an upper bound cannot be; a count above 0 means the two were computed on different "
             "candidate sets).", "",
             markdown_table(["model", "head", "T", "method", "keys", "root acceptance", "OT bound", "gap",
                             "bound < acc.", "sampled share", "probe by depth", "probe pooled"],
                            [[r.model, r.head_sha, _t(r), r.label, str(r.keys),
                              _pm(r.root_acceptance, r.root_acceptance_hw), _pm(r.root_ot_bound, r.root_ot_bound_hw),
                              _pm(r.root_gap, r.root_gap_hw, sign=True),
                              f"{r.root_below}/{r.root_states}" if r.root_states else "-", f"{r.sampled_share:.3f}",
                              _fmt_list(r.probe_survival) if sum(r.probe_drawn) > 0 else "-",
                              _num(probe_share(r.probe_drawn, r.probe_survival), 2)] for r in mech.itertuples()])]
    return "\n".join(lines) + "\n"


def mechanism_markdown(rows: pd.DataFrame) -> str:
    if rows.empty:
        return ""
    title = "## Per-depth acceptance and draft calibration (pooled over states)"
    mech = mechanism_table(rows)
    if not any(len(d) or len(c) for d, c in zip(mech["depth_accept"], mech["calib_target"])):
        return title + "\n\nNot recorded: these rows' archive leaves the columns out.\n"
    header = ["model", "head", "T", "method", "states", "P(depth >= d), d = 1..", "calibration: mean target prob. "
              "(T = 0: argmax match) per draft bucket 0-0.1, .., 0.9-1"]
    body = [[r.model, r.head_sha, _t(r), r.label, str(r.states), _fmt_list(r.depth_accept),
             _fmt_list(r.calib_target)] for r in mech.itertuples()]
    return "\n".join([title, "", markdown_table(header, body)]) + "\n"


def report_markdown(rows: pd.DataFrame) -> str:
    """Every table of the module docstring, in order."""
    parts = [paired_markdown(rows), m_ablation_markdown(rows), root_markdown(rows), mechanism_markdown(rows)]
    return "\n".join(p for p in parts if p)


def main(argv=None) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=path_arg, help="a same-state output_dir (its archive X.parquet when the "
                    "folder holds no rows) or an archive X.parquet")
    ap.add_argument("--out", type=path_arg, help="write the markdown here instead of printing it")
    ap.add_argument("--figures", help="write every figure as PREFIX<name>.png (a folder ending in / or a prefix)")
    ap.add_argument("--figure", type=path_arg, help="also draw the one-file summary (PNG) here")
    ap.add_argument("--archive", type=path_arg, help="also write every row into this parquet file (and "
                    "X.driver.parquet), for git")
    ap.add_argument("--archive-without", action="append", choices=["calibration", "depth"], metavar="GROUP",
                    help="leave these mechanism columns out of the archive, and so out of the tables and figures "
                    "made now (calibration: calib_n/q/p; depth: depth_accept); repeatable")
    ap.add_argument("--also", type=path_arg, action="append", default=[], metavar="RESULTS",
                    help="rows of another same-state folder or archive joined into the tables and figures (not "
                    "the archive); repeatable; a state already in RESULTS is not counted twice")
    args = ap.parse_args(argv)
    from eval.states.outputs import plan_outputs
    from eval.store.committed import CommittedOutputsError
    from eval.store.storage import report_source

    args.results, archive = report_source(args.results, args.archive)
    if archive is None and args.archive is not None:  # no folder: its archive is read, not rewritten
        args.archive, args.archive_without = None, None

    try:
        rows, plan, messages = plan_outputs(args, report_markdown)
        plan.write(args.results)
    except (OSError, ValueError, CommittedOutputsError) as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2
    for line in messages:
        print(line, file=sys.stderr)
    if args.out is None:
        print(report_markdown(rows))
    return 0


if __name__ == "__main__":
    run_main(main, prog=PROG)
