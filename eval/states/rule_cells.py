"""One rule for every drafter: each adaptive rule against every fixed setting, cell by cell.

    python -m eval.states.rule_cells DIAL SERVING [--out FILE]

DIAL and SERVING: the draft-quality dial's and the serving study's same-state rows (an output_dir or
its archive X.parquet). A *cell* is one (temperature, draft_mix a): the dial's T = 0.7 and 1 at
a = 0, 0.25, 0.5, 0.75, 1, and the serving study's seven temperatures at a = 0 (the trained head).
In each cell, for every rule (a Rheo configuration with ``adapt`` set) and every fixed setting
(Top-K, the paper's Rheo m=0 and m=1, rheo_auto): the mean over keys (one key = one prompt; its
states averaged first) of the paired per-key difference rule - setting of the exact expected
emitted tokens per target call, its 95% half-width over keys (clustered by item) and its lower bound.

* **meets** - every lower bound >= -0.01 (at least as good as each fixed setting, to 0.01 token);
* **beats** - the lower bound of the difference with the best fixed setting in that cell (by mean)
  is > +0.02.

What the bar asks of any rule, per cell (:func:`reach_frame`): the worst lower bound of the cell's
best fixed setting (chosen knowing the cell's means) against the other three, and of the per-prompt
best of the four (chosen knowing each prompt's values: an upper bound no rule reaches, its maximum
of noisy values biased upward). Where the first is below -0.01 the four settings are not resolved
apart, and a rule that only picks among them meets the bar there only by picking per prompt.
"""

from __future__ import annotations

import math
import sys
from typing import Optional

import pandas as pd

from eval.report.analysis import item_ci
from eval.report.markdown import frame_markdown
from eval.states.options import AUTO, AUTO_RULE, CI_TEXT, M0, M1, TOLERANCE, TOPK, _pm, wide_keys
from rheo.cli import ArgumentParser, path_arg, run_main

PROG = "python -m eval.states.rule_cells"
FIXED = (TOPK, M0, M1, AUTO)
FIXED_NAMES = {TOPK: "Top-K", M0: "m=0", M1: "m=1", AUTO: "rheo_auto"}
MOONSHOT = 0.02  # "beats every fixed setting": lower bound of the difference with the best > this
LEVEL_RULE = "rheo_level"  # method=rheo_level (configs/method/rheo_level.yaml): its rows carry its name
OPENING = "rheo_level opening with m=0's worst lower bound"


def rules_of(rows: pd.DataFrame) -> list[str]:
    """The labels of the adaptive rules among labelled rows (rows whose ``adapt`` is set)."""
    from eval.states.stats import labelled

    rows = labelled(rows)
    adapt = rows["adapt"] if "adapt" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
    return sorted(rows.loc[adapt.notna() & (adapt != "none"), "label"].unique())


def best_fixed(wide: pd.DataFrame) -> Optional[str]:
    """The label of the fixed setting with the best mean over keys in one cell's [keys, labels] frame
    (None when it holds none)."""
    present = [f for f in FIXED if f in wide.columns]
    return max(present, key=lambda f: wide[f].mean()) if present else None


def cell_frame(dial: pd.DataFrame, serving: pd.DataFrame) -> pd.DataFrame:
    """One row per (study, temperature, a, rule, fixed setting): keys, mean difference, half-width,
    lower bound; plus the cell's verdict columns (module docstring)."""
    parts = [("dial", dial[dial["draft_mix"].notna()]), ("serving", serving)]
    out = []
    for study, rows in parts:
        if rows.empty:
            continue
        rows = rows.assign(draft_mix=rows["draft_mix"].fillna(0.0))
        rules = rules_of(rows)
        for (t, a), wide in sorted(wide_keys(rows, ["temperature", "draft_mix"]).items()):
            present = [f for f in FIXED if f in wide.columns]
            best = best_fixed(wide)
            for rule in rules:
                if rule not in wide.columns:
                    continue
                cell = []
                for fixed in present:
                    mean, half, n = item_ci((wide[rule] - wide[fixed]).dropna())
                    cell.append({"study": study, "temperature": t, "draft_mix": a, "rule": rule, "fixed": fixed,
                                 "keys": n, "diff": mean, "half": half, "low": mean - half, "best": best})
                meets = len(cell) == len(FIXED) and all(c["low"] >= -TOLERANCE for c in cell)
                beats = any(c["fixed"] == best and c["low"] > MOONSHOT for c in cell)
                out += [{**c, "meets": meets, "beats": beats} for c in cell]
    return pd.DataFrame(out)


def reach_frame(dial: pd.DataFrame, serving: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: the best fixed setting by mean, its worst lower bound against the other fixed
    settings, and the per-prompt best's worst lower bound against each (module docstring)."""
    out = []
    for study, rows in (("dial", dial[dial["draft_mix"].notna()]), ("serving", serving)):
        if rows.empty:
            continue
        rows = rows.assign(draft_mix=rows["draft_mix"].fillna(0.0))
        from eval.states.stats import PROMPT, labelled

        states = dict(iter(labelled(rows).groupby(["temperature", "draft_mix"])))
        for (t, a), wide in sorted(wide_keys(rows, ["temperature", "draft_mix"]).items()):
            present = [f for f in FIXED if f in wide.columns]
            if len(present) < len(FIXED):
                continue
            best = best_fixed(wide)
            oracle = wide[present].max(axis=1)
            leader = leader_replay(states[(t, a)]).reindex(wide.index)
            opening = opening_replay(states[(t, a)]).reindex(wide.index)
            lows = {}
            for name, values in (("best", wide[best]), ("oracle", oracle), ("leader", leader), ("opening", opening)):
                bounds = [item_ci((values - wide[f]).dropna()) for f in present if not (name == "best" and f == best)]
                lows[name] = min((m - h for m, h, n in bounds if n), default=math.nan)
            per_prompt = states[(t, a)].groupby(PROMPT)["state"].nunique().mean()
            out.append({"cell": f"{study}: T = {t:g}, a = {a:g}", "states a prompt": f"{per_prompt:.1f}",
                        "best fixed": FIXED_NAMES[best],
                        "best's worst lower bound": f"{lows['best']:+.3f}",
                        "best meets": "yes" if lows["best"] >= -TOLERANCE else "no",
                        "per-prompt best's worst lower bound": f"{lows['oracle']:+.3f}",
                        "follow the leader's worst lower bound": f"{lows['leader']:+.3f}",
                        OPENING: "-" if math.isnan(lows["opening"]) else f"{lows['opening']:+.3f}"})
    return pd.DataFrame(out)


def per_state(rows: pd.DataFrame) -> pd.DataFrame:
    """Labelled same-state rows of one cell -> [key x state, label] exact expected emitted tokens: what the
    replays below read."""
    from eval.states.stats import PROMPT

    return rows.pivot_table(index=PROMPT + ["state"], columns="label", values="expected_emitted")


def leader_replay(rows: pd.DataFrame, settings: tuple = (AUTO, M0)) -> pd.Series:
    """Per key (one prompt), the mean over its states of *follow the leader*: at each state the setting
    of ``settings`` with the largest sum of exact expected emitted tokens over the key's earlier states
    (the first listed at the first state and on ties). Labelled same-state rows of one cell, where every
    setting's tree was scored at every state: the evidence a deployed rule would have only by scoring
    both trees in every cycle, replayed; each state's value is that setting's row there."""
    from eval.states.stats import PROMPT

    wide = per_state(rows)
    wide = wide[[s for s in settings if s in wide.columns]].dropna()
    if wide.shape[1] < len(settings):
        return pd.Series(dtype=float)
    values = []
    for key, states in wide.groupby(level=PROMPT, sort=False):
        states = states.sort_index(level="state").to_numpy()  # [states, settings]
        earlier = states.cumsum(axis=0) - states  # [states, settings]: sums over the earlier states
        choice = earlier.argmax(axis=1)  # first maximum: the first listed on ties (all zero at the first state)
        values.append((key, states[range(len(states)), choice].mean()))
    return pd.Series(dict(values), dtype=float).rename_axis(PROMPT)


def opening_replay(rows: pd.DataFrame, rule: str = LEVEL_RULE, opening: str = M0) -> pd.Series:
    """Per key (one prompt), the mean over its states of ``rule`` had it drafted its first state (state 0)
    with ``opening``: ``opening``'s row at state 0, the rule's at every later state. Labelled same-state rows
    of one cell. Exact for a rule whose later choices read only the roots of the earlier states (rheo_level:
    their acceptance ``a`` depends on the state, not on the tree drafted there), since a rule's tree at a
    state is, bit for bit, the tree of the setting it chose (tests/test_adaptive.py)."""
    from eval.states.stats import PROMPT

    wide = per_state(rows)
    if rule not in wide.columns or opening not in wide.columns:
        return pd.Series(dtype=float)
    first = wide.index.get_level_values("state") == 0
    values = wide[rule].where(~first, wide[opening]).dropna()  # [key x state]
    return values.groupby(level=PROMPT, sort=False).mean()


def verdict_table(frame: pd.DataFrame, rule: str) -> pd.DataFrame:
    """One row per cell of ``rule``: prompts, the difference with each fixed setting, the worst lower
    bound and the verdict."""
    out = []
    part = frame[frame["rule"] == rule]
    for (study, t, a), cell in part.groupby(["study", "temperature", "draft_mix"], sort=False):
        by = {r["fixed"]: r for _, r in cell.iterrows()}
        row = {"cell": f"{study}: T = {t:g}, a = {a:g}", "prompts": int(cell["keys"].min())}
        for fixed in FIXED:
            row[f"− {FIXED_NAMES[fixed]}"] = _pm(by[fixed]["diff"], by[fixed]["half"]) if fixed in by else "-"
        low = cell["low"].min()
        row["worst lower bound"] = "-" if math.isnan(low) else f"{low:+.3f}"
        row["best fixed"] = FIXED_NAMES.get(cell["best"].iloc[0], "-")
        row["verdict"] = ("meets" if cell["meets"].iloc[0] else "does not meet") + (
            ", beats" if cell["beats"].iloc[0] else "")
        out.append(row)
    return pd.DataFrame(out)


def reach_markdown(reach: pd.DataFrame) -> str:
    if reach.empty:
        return ""
    failed = list(reach.loc[reach["best meets"] == "no", "cell"])
    leads = reach["follow the leader's worst lower bound"].astype(float)
    per_prompt = reach["states a prompt"].astype(float)
    spread = f"{per_prompt.min():.0f} to {per_prompt.max():.0f}"
    return "\n".join(["### What the bar asks: the best fixed setting, chosen in hindsight", "",
                      "Per cell, the fixed setting with the best mean against the other three, and the per-prompt "
                      "best of the four against each (an upper bound: chosen knowing each prompt's values). Follow the "
                      "leader: each state drafted with whichever of rheo_auto and m=0 has emitted more in expectation "
                      "at the prompt's earlier states (rheo_auto first and on ties), replayed from these rows, where "
                      "both trees were scored at every state: a rule with exact evidence, which a deployed one would "
                      "get only by scoring both trees every cycle.", "",
                      frame_markdown(reach), "",
                      f"The best fixed setting, chosen knowing the cell's means, meets the bar in "
                      f"{len(reach) - len(failed)} of {len(reach)} cells; where it does not ({'; '.join(failed) or 'none'}) "
                      "the fixed settings are not resolved apart at these prompt counts. Following the leader meets it "
                      f"in {int((leads >= -TOLERANCE).sum())} of {len(reach)}: at {spread} states a prompt, "
                      "learning which setting leads costs more than choosing per prompt gains." + opening_text(reach), ""])


def opening_text(reach: pd.DataFrame) -> str:
    """The sentence on the last column of the reach table ('' where no cell holds rheo_level's rows)."""
    measured = reach.loc[reach[OPENING] != "-", OPENING].astype(float)
    if measured.empty:
        return ""
    return (f" rheo_level opening with m=0 (last column: m=0's row at each prompt's first state, rheo_level's at "
            f"the later ones, replayed, which is exact because the rule's later choices read only the roots of "
            f"the earlier states) meets it in {int((measured >= -TOLERANCE).sum())} of {len(measured)}.")


def cells_markdown(frame: pd.DataFrame, reach: Optional[pd.DataFrame] = None) -> str:
    lines = ["## One rule for every drafter: each adaptive rule against every fixed setting, per cell", "",
             CI_TEXT + f". A cell is one (T, a): the dial's T = 0.7 and 1 at a = 0 ... 1 (42 prompts) and the "
             f"serving study's temperatures at a = 0 (84 prompts). Meets: every lower bound of rule − setting "
             f">= −{TOLERANCE:g} against Top-K, the paper's Rheo m=0 and m=1 and rheo_auto ({AUTO_RULE}); beats: "
             f"the lower bound of the difference with the cell's best fixed setting > +{MOONSHOT:g}.", ""]
    if frame.empty:
        return "\n".join(lines + ["No rule rows.", ""])
    for rule in frame["rule"].unique():
        table = verdict_table(frame, rule)
        met = int((table["verdict"].str.startswith("meets")).sum())
        beaten = list(table.loc[table["verdict"].str.endswith("beats"), "cell"])
        lines += [f"### {rule}", "", frame_markdown(table), "",
                  f"{rule} meets every fixed setting in {met} of {len(table)} cells; beats the best fixed setting "
                  f"by more than {MOONSHOT:g} in: {', '.join(beaten) if beaten else 'none'}.", ""]
    if reach is not None:
        lines.append(reach_markdown(reach))
    return "\n".join(lines)


def main(argv=None) -> Optional[int]:
    from eval.store.committed import write_outputs
    from eval.store.state_archive import load_rows
    from eval.store.storage import rows_or_archive

    ap = ArgumentParser(prog=PROG, description="Each adaptive rule against every fixed setting, cell by cell.")
    ap.add_argument("dial", type=path_arg, help="the dial's same-state output_dir or archive X.parquet")
    ap.add_argument("serving", type=path_arg, help="the serving study's same-state output_dir or archive")
    ap.add_argument("--out", type=path_arg, help="the Markdown table file")
    args = ap.parse_args(argv)
    dial = load_rows(rows_or_archive(args.dial))  # no folder (a fresh clone): its committed archive
    serving = load_rows(rows_or_archive(args.serving))
    if dial.empty and serving.empty:
        print(f"{PROG}: error: {args.dial} and {args.serving} hold no same-state rows", file=sys.stderr)
        return 2
    text = cells_markdown(cell_frame(dial, serving), reach_frame(dial, serving))
    if not args.out:
        print(text)
        return 0
    write_outputs([(args.out, text.encode())], args.dial)
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (FileNotFoundError, ValueError))
