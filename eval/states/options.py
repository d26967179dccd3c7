"""Tables and figures of the ranking-option studies: serving temperatures and the draft-quality dial.

    python -m eval.states.options serving|dial RESULTS [--out FILE] [--figure FILE] [--archive FILE]
        [--archive-depths N]

RESULTS: a same-state output_dir (measure=same_state) or its archive (X.parquet). Every number is a
mean over *keys* (a key is one prompt: suite, item, turn, seed; its driver states averaged first)
of the exact expected emitted tokens per state, and every interval a 95% half-width
over keys, clustered by item (eval.report.analysis.item_ci), of paired per-key differences.

* **serving** - per temperature, each option minus Top-K, minus the paper's m=0 and m=1, and minus
  the *envelope* (the better of m=0 and m=1 at that T, by mean). An option *meets the envelope*
  when the lower bounds of its differences with m=0 and m=1 are both >= -0.01; it *beats* it when
  the lower bound of its difference with the better one is > 0.
* **dial** - per value of ``draft_mix`` (rheo.models.mixture): Top-K's expected tokens per call and
  each method's gain over it (absolute and %), the paper's three (Top-K, Rheo) points on the figure.
"""

from __future__ import annotations

import math
import sys
from typing import Optional

import pandas as pd

from eval.report.analysis import display_name, item_ci
from eval.report.markdown import frame_markdown
from eval.states.labels import ordered_labels
from eval.states.option_figures import dial_figure, serving_figure
from eval.states.stats import PROMPT, keys_for, labelled
from rheo.cli import ArgumentParser, path_arg, positive_int, run_main
from rheo.methods.rheo import preset_rule

PROG = "python -m eval.states.options"
TOPK, M0, M1 = "Top-K", "Rheo m=0", "Rheo m=1"
AUTO = "rheo_auto"  # method=rheo_auto (configs/method/rheo_auto.yaml): rows of its settings carry its name
AUTO_RULE = display_name(preset_rule(AUTO))  # what it is: 'Rheo m=1 proxy=tempered'
TOLERANCE = 0.01  # "at least as good": lower bound of the paired difference >= -TOLERANCE
POWER = 0.02  # the half-width the studies aim at for a difference with Top-K
#: the paper's reported tau with official EAGLE-3 heads at T = 1: (pair, Top-K, Rheo m=1)
PAPER_POINTS = (("Llama-3.1-8B-Instruct", 5.04, 5.25), ("Vicuna-13B", 5.75, 5.89),
                ("DeepSeek-R1-Distill-Llama-8B", 4.99, 5.21))
CI_TEXT = ("± = 95% half-width over keys of the paired per-key difference, clustered by item (a key is one "
           "prompt: suite, item, turn, seed; its states averaged first; an item's turns and seeds are one unit)")


def wide_keys(rows: pd.DataFrame, by) -> dict:
    """{value of ``by`` (a column, or a tuple of values for a list of columns): [keys, labels] mean
    expected emitted per key}, keys holding every label only where it was computed (NaN otherwise)."""
    rows = labelled(rows)
    out = {}
    for value, frame in rows.groupby(by):
        per_key = frame.groupby(["label"] + PROMPT)["expected_emitted"].mean().reset_index()
        value = tuple(float(v) for v in value) if isinstance(by, list) else float(value)
        out[value] = per_key.pivot_table(index=PROMPT, columns="label", values="expected_emitted")
    return out


def paired(wide: pd.DataFrame, a: str, b: str) -> tuple[float, float, int]:
    """(mean, 95% half-width, keys) of a - b over the keys holding both."""
    if a not in wide.columns or b not in wide.columns:
        return math.nan, math.nan, 0
    return item_ci((wide[a] - wide[b]).dropna())


def _pm(mean: float, half: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:+.{digits}f} ± {half:.{digits}f}" if not math.isnan(half) else f"{mean:+.{digits}f}"


def envelope(wide: pd.DataFrame) -> Optional[str]:
    """The better of the paper's m=0 and m=1 on these keys (by mean), or None without both."""
    if M0 not in wide.columns or M1 not in wide.columns:
        return None
    return M0 if wide[M0].mean() >= wide[M1].mean() else M1


def serving_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (temperature, option): keys, mean, and the paired differences (module docstring)."""
    out = []
    order = ordered_labels(labelled(rows))
    for t, wide in sorted(wide_keys(rows, "temperature").items()):
        best = envelope(wide)
        for label in sorted(wide.columns, key=order.index):
            mean, mean_hw, n = item_ci(wide[label].dropna())
            row = {"temperature": t, "label": label, "keys": n, "mean": mean, "mean_hw": mean_hw, "envelope": best}
            for name, other in (("topk", TOPK), ("m0", M0), ("m1", M1), ("env", best)):
                d, h, _ = paired(wide, label, other) if other and other != label else (math.nan, math.nan, 0)
                row[f"d_{name}"], row[f"h_{name}"] = d, h
            lows = [row["d_m0"] - row["h_m0"] if label != M0 else 0.0, row["d_m1"] - row["h_m1"] if label != M1 else 0.0]
            row["meets"] = best is not None and all(x >= -TOLERANCE for x in lows)
            row["beats"] = best is not None and label not in (M0, M1) and row["d_env"] - row["h_env"] > 0
            out.append(row)
    return pd.DataFrame(out)


def serving_markdown(rows: pd.DataFrame) -> str:
    frame = serving_frame(rows)  # the command refuses an empty archive
    temps = sorted(frame["temperature"].unique())
    lines = ["## Ranking options at serving temperatures (same states, exact expected emitted tokens)", "",
             CI_TEXT + f". Envelope: the better of {M0} and {M1} at that T (by mean); meets: both lower bounds "
             f"of the differences with {M0} and {M1} >= -{TOLERANCE:g}; beats: the lower bound of the difference "
             "with the envelope > 0.", ""]
    lines += ["### Summary: the paper's rules and the recommended rule, each − Top-K", "",
              f"rheo_auto = {AUTO_RULE} (the same settings at every T). Verdict: whether rheo_auto meets the envelope "
              "(both lower bounds >= −0.01) and whether its difference with the envelope is resolved above 0.", "",
              frame_markdown(summary_table(frame)), ""]
    labels = list(dict.fromkeys(frame["label"]))
    summary = frame.pivot(index="label", columns="temperature", values="d_topk").reindex(labels)
    halves = frame.pivot(index="label", columns="temperature", values="h_topk").reindex(labels)
    meets = frame.pivot(index="label", columns="temperature", values="meets").reindex(labels)
    table = pd.DataFrame({"option − Top-K": summary.index})
    for t in temps:
        table[f"T = {t:g}"] = [_pm(summary.loc[lab, t], halves.loc[lab, t]) + (" ✓" if meets.loc[lab, t] else "")
                               if lab != TOPK else "-" for lab in summary.index]
    lines += ["### Gain over Top-K per temperature (✓: meets the envelope)", "", frame_markdown(table), ""]
    every = [lab for lab in meets.index if lab not in (M0, M1, TOPK) and bool(meets.loc[lab].all())]
    lines += [f"Temperatures present: {', '.join(f'{t:g}' for t in temps)}. Options meeting the envelope at "
              f"every one of them: {', '.join(every) if every else 'none'}.", ""]
    pooled = pooled_serving(rows)
    if len(pooled):
        lines += [f"### Pooled over T = {', '.join(f'{t:g}' for t in SERVING)}: each option − that T's envelope", "",
                  "Per prompt, the mean of its three paired differences with the envelope of each temperature; "
                  "± over prompts. One test instead of three (this pooling was chosen after the rows were in).", "",
                  frame_markdown(pooled), ""]
    for t in temps:
        part = frame[frame["temperature"] == t]
        best = part["envelope"].iloc[0]
        lines += [f"### T = {t:g} (envelope: {best})", ""]
        table = pd.DataFrame({
            "method": part["label"], "keys": part["keys"],
            "mean": [f"{m:.3f} ± {h:.3f}" for m, h in zip(part["mean"], part["mean_hw"])],
            "− Top-K": [_pm(d, h) for d, h in zip(part["d_topk"], part["h_topk"])],
            f"keys for ±{POWER:g}": ["-" if math.isnan(h) else str(keys_for(h, k, POWER))
                                    for h, k in zip(part["h_topk"], part["keys"])],
            f"− {M0}": [_pm(d, h) for d, h in zip(part["d_m0"], part["h_m0"])],
            f"− {M1}": [_pm(d, h) for d, h in zip(part["d_m1"], part["h_m1"])],
            "− envelope": [_pm(d, h) for d, h in zip(part["d_env"], part["h_env"])],
            "meets": ["yes" if x else "no" for x in part["meets"]],
            "beats": ["yes" if x else "no" for x in part["beats"]]})
        lines += [frame_markdown(table), ""]
    lines += mechanism_lines(rows)
    return "\n".join(lines)


SERVING = (0.6, 0.7, 0.8)  # the temperatures most chat serving samples at


def pooled_serving(rows: pd.DataFrame, temps: tuple = SERVING) -> pd.DataFrame:
    """Per option: the mean over the prompts that hold every T of ``temps`` of each prompt's average
    paired difference with that T's envelope, its 95% half-width over prompts, and its lower bound;
    empty unless every T of ``temps`` is present."""
    wides = wide_keys(rows, "temperature")
    if not all(t in wides for t in temps):
        return pd.DataFrame()
    diffs = {}
    for t in temps:
        wide, best = wides[t], envelope(wides[t])
        if best is None:
            return pd.DataFrame()
        for label in wide.columns:
            if label not in (TOPK, M0, M1):
                diffs.setdefault(label, []).append(wide[label] - wide[best])
    out = []
    for label, parts in diffs.items():
        if len(parts) < len(temps):
            continue
        mean, half, n = item_ci(pd.concat(parts, axis=1).dropna().mean(axis=1))
        out.append({"option": label, "prompts": n, "− envelope, mean over T": _pm(mean, half),
                    "lower bound": f"{mean - half:+.3f}", "beats": "yes" if mean - half > 0 else "no"})
    return pd.DataFrame(out)


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per temperature: prompts, the paper's m=1 and m=0 and rheo_auto minus Top-K, rheo_auto
    minus the envelope, and the verdict."""
    out = []
    for t, part in frame.groupby("temperature"):
        by = {r["label"]: r for _, r in part.iterrows()}
        auto, cell = by.get(AUTO), (lambda lab: _pm(by[lab]["d_topk"], by[lab]["h_topk"]) if lab in by else "-")
        verdict = "-" if auto is None else ("meets" if auto["meets"] else "does not meet") + (
            ", beats" if auto["beats"] else "")
        out.append({"T": f"{t:g}", "prompts": int(by[TOPK]["keys"]) if TOPK in by else 0, M1: cell(M1), M0: cell(M0),
                    "rheo_auto": cell(AUTO), "rheo_auto − envelope": "-" if auto is None else
                    f"{_pm(auto['d_env'], auto['h_env'])} ({part['envelope'].iloc[0]})", "verdict": verdict})
    return pd.DataFrame(out)


def mechanism_lines(rows: pd.DataFrame, dial: bool = False) -> list[str]:
    """Sampled share, probe survival (sampled children kept / drawn) and P(the accepted path reaches
    depth 1, 2, 3), per option and temperature (and dial value), over every state."""
    rows = labelled(rows)
    out = []
    for (t, a, label), frame in rows.groupby(["temperature", "draft_mix" if dial else "temperature", "label"]):
        drawn = sum(sum(x) for x in frame["probe_drawn"] if x is not None)
        kept = sum(sum(x) for x in frame["probe_kept"] if x is not None)
        depth = [x for x in frame["depth_accept"] if x is not None and len(x) >= 3]
        reach = [sum(x[d] for x in depth) / len(depth) if depth else math.nan for d in range(3)]
        out.append({"T": f"{t:g}", **({"a": f"{a:g}"} if dial else {}), "method": label,
                    "sampled share": float(frame["sampled_share"].mean()),
                    "probes drawn per state": drawn / len(frame), "probe survival": kept / drawn if drawn else math.nan,
                    "P(depth 1)": reach[0], "P(depth 2)": reach[1], "P(depth 3)": reach[2]})
    if not out:
        return []
    return ["### Mechanism: sampled share of emitted tokens, probes drawn per state, probe survival, "
            "P(the accepted path reaches depth d)", "",
            frame_markdown(pd.DataFrame(out)), ""]


def dial_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (temperature, draft_mix, method): Top-K's mean on the keys, the gain and its % of it."""
    rows = rows[rows["draft_mix"].notna()]
    out = []
    for (t, a), wide in sorted(wide_keys(rows, ["temperature", "draft_mix"]).items()):
        base, base_hw, n = item_ci(wide[TOPK].dropna()) if TOPK in wide.columns else (math.nan, math.nan, 0)
        for label in wide.columns:
            if label == TOPK:
                continue
            d, h, pairs = paired(wide, label, TOPK)
            out.append({"temperature": t, "draft_mix": a, "label": label, "keys": pairs, "topk": base, "topk_hw": base_hw,
                        "gain": d, "gain_hw": h, "gain_pct": 100 * d / base, "gain_pct_hw": 100 * h / base})
    return pd.DataFrame(out)


def dial_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per dial value: prompts, Top-K's E[tau] and each method's gain (absolute, %)."""
    out = []
    for (t, a), part in frame.groupby(["temperature", "draft_mix"]):
        row = {"T": f"{t:g}", "a": f"{a:g}", "prompts": int(part["keys"].max()),
               "E[τ] Top-K": f"{part['topk'].iloc[0]:.3f} ± {part['topk_hw'].iloc[0]:.3f}"}
        for _, r in part.iterrows():
            row[f"{r['label']} − Top-K"] = f"{_pm(r['gain'], r['gain_hw'])} ({_pm(r['gain_pct'], r['gain_pct_hw'], 1)}%)"
        out.append(row)
    return pd.DataFrame(out).fillna("-")


def dial_markdown(rows: pd.DataFrame) -> str:
    frame = dial_frame(rows)
    lines = ["## Gain over Top-K along the draft-quality dial (same states)", "",
             CI_TEXT + ". draft_mix a: the drafter proposes from (1 − a) q_head + a p_target at every node "
             "(a = 1: the target itself). A mixed drafter is not a better-trained head: its errors are the "
             "head's, diluted.", ""]
    if frame.empty:
        return "\n".join(lines + ["No rows.", ""])
    lines += ["### Summary: Top-K and the gain of each method over it, per dial value", "",
              frame_markdown(dial_summary(frame)), "", "### Per method", ""]
    table = pd.DataFrame({"T": [f"{t:g}" for t in frame["temperature"]], "a": [f"{a:g}" for a in frame["draft_mix"]],
                          "method": frame["label"], "keys": frame["keys"],
                          "E[τ] Top-K": [f"{m:.3f} ± {h:.3f}" for m, h in zip(frame["topk"], frame["topk_hw"])],
                          "gain": [_pm(d, h) for d, h in zip(frame["gain"], frame["gain_hw"])],
                          "gain %": [_pm(d, h, 1) for d, h in zip(frame["gain_pct"], frame["gain_pct_hw"])]})
    paper = "; ".join(f"{name} {a:.2f} -> {b:.2f} ({b - a:+.2f}, {100 * (b - a) / a:+.1f}%)"
                      for name, a, b in PAPER_POINTS)
    return "\n".join(lines + [frame_markdown(table), "", f"The paper (official heads, T = 1): {paper}.", ""]
                     + mechanism_lines(rows[rows["draft_mix"].notna()], dial=True))


def main(argv=None) -> Optional[int]:
    """The command line (module docstring): exit status 2 with one line for a refused input."""
    from eval.store.committed import write_outputs
    from eval.store.state_archive import archive_files, load_rows
    from eval.store.storage import report_source

    ap = ArgumentParser(prog=PROG, description="Tables and figures of the ranking-option studies.")
    ap.add_argument("study", choices=["serving", "dial"])
    ap.add_argument("results", type=path_arg, help="a same-state output_dir or its archive X.parquet")
    ap.add_argument("--out", type=path_arg, help="the Markdown table file")
    ap.add_argument("--figure", type=path_arg, help="the PNG figure file")
    ap.add_argument("--archive", type=path_arg, help="also write the rows of RESULTS (a folder) to this archive")
    ap.add_argument("--archive-depths", type=positive_int, metavar="N", help="keep only the first N per-depth "
                    "acceptances of each row in the archive (the mechanism table reads 3)")
    args = ap.parse_args(argv)
    args.results, args.archive = report_source(args.results, args.archive)  # no folder: its archive, read only
    rows = load_rows(args.results)
    if rows.empty:
        print(f"{PROG}: error: {args.results} holds no same-state rows", file=sys.stderr)
        return 2
    text = (serving_markdown if args.study == "serving" else dial_markdown)(rows)
    figure = (serving_figure(serving_frame(rows), TOPK, {M0: M0, M1: M1, AUTO: f"rheo_auto ({AUTO_RULE})"})
              if args.study == "serving" else dial_figure(dial_frame(rows), PAPER_POINTS))
    archive = archive_files(args.results, args.archive, depths=args.archive_depths)[0] if args.archive else []
    write_outputs([(args.out, text.encode()), (args.figure, figure), *archive], args.results)
    if not args.out:
        print(text)
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (FileNotFoundError, ValueError))
