"""Which lossless verifier: the tables and figure of the verifier study (configs/experiment/verifiers.yaml).

    python -m eval.states.verifiers RESULTS [--out FILE] [--figure FILE] [--archive FILE] [--cost FILE]

RESULTS: the study's same-state output_dir or its archive (X.parquet). Each compared config is a
**combination** of a tree rule (Top-K, Rheo m=1, RSD, SpecInfer, Chain) and a verifier (Top-K's
one-hot walk, Rheo's stochastic-first check, recursive rejection sampling = RRS, Traversal, HSD, or any
verifier a static config names), at a **budget** (drafted nodes: a dynamic tree's kept nodes, a
static shape's nodes, a chain's length). A **cell** is (drafter, T, budget); the drafter is the
embedded pair's head or a point of the draft-quality dial (``draft_mix``).

Every number is the mean over *keys* (a key is one prompt: suite, item, turn, seed; its driver
states averaged first) of the exact expected emitted tokens per target call (E[tau], rheo.expected);
every interval a 95% Student-t half-width over keys of the paired per-key difference
(eval.states.stats). Per cell: each combination against Rheo m=1 at the same budget and against
the cell's best combination (by mean), the winner, and Traversal against RRS on the very same trees
(SpecInfer and Chain draw one tree for both). ``--cost``: a cycle-cost parquet of the combinations
(``scripts/cycle_cost.py --verifiers``): each verifier's ops and ms per target call beside tau.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import pandas as pd

from eval.report.analysis import mean_ci
from eval.report.markdown import markdown_table
from eval.states.stats import PROMPT, labelled
from eval.states.style import panels, png
from rheo.cli import ArgumentParser, path_arg, run_main
from rheo.methods.static import num_nodes

PROG = "python -m eval.states.verifiers"
#: the study's combinations (configs/experiment/verifiers.yaml reads them): a new verifier joins here
COMPARE_SET = Path(__file__).resolve().parents[2] / "configs" / "compare_sets" / "verifiers.yaml"
RHEO = "Rheo m=1"
#: verifier names as tables print them (a verifier not listed prints as its name in capitals)
VERIFIER_NAMES = {"rrs": "RRS", "traversal": "Traversal", "onehot": "one-hot walk", "stochastic": "stochastic-first"}
#: every cell's reference: Rheo m=1 with its own stochastic-first check (not Rheo's tree under another verifier)
RHEO_COMBO = f"{RHEO} + {VERIFIER_NAMES['stochastic']}"
CI_TEXT = ("± = 95% Student-t half-width over prompts (a key = one prompt: suite, item, turn, seed; its states "
           "averaged first) of the paired per-prompt difference")


def _verifier(row) -> str:
    v = row.get("verifier")
    return "rrs" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _static_rule(row) -> str:
    return "SpecInfer" if bool(row["replacement"]) else "RSD"


#: method -> (tree rule, verifier name or None = the row's ``verifier`` field, budget); the study's labels
_COMBINATIONS = {
    "topk": (lambda r: "Top-K", lambda r: VERIFIER_NAMES["onehot"], lambda r: int(r["tree_size"])),
    "rheo": (lambda r: f"Rheo m={int(r['m'])}", lambda r: VERIFIER_NAMES["stochastic"], lambda r: int(r["tree_size"])),
    # Rheo's tree, its sampled branches accepted by HSD (rheo.methods.hsd)
    "rheo_hsd": (lambda r: f"Rheo m={int(r['m'])}", lambda r: "HSD", lambda r: int(r["tree_size"])),
    "chain": (lambda r: "Chain", None, lambda r: int(r["depth"])),
    "hsd_chain": (lambda r: "Chain", lambda r: "HSD", lambda r: int(r["depth"])),
    # Rheo's leads + a sample on a static shape, verified by Traversal (rheo.methods.rheo_seq)
    "rheo_seq": (lambda r: "Rheo-Seq " + ",".join(str(int(b)) for b in r["branching"]), lambda r: "Traversal",
                 lambda r: num_nodes(tuple(int(b) for b in r["branching"]))),
    "hsd": (_static_rule, lambda r: "HSD", lambda r: num_nodes(tuple(int(b) for b in r["branching"]))),
}
_STATIC = (_static_rule, None, lambda r: num_nodes(tuple(int(b) for b in r["branching"])))


def combination(row) -> tuple[str, str, int]:
    """(tree rule, verifier, budget) of one same-state row (a dict or a pandas row)."""
    rule, verifier, budget = _COMBINATIONS.get(row["method"], _STATIC)
    name = VERIFIER_NAMES.get(_verifier(row), _verifier(row).upper()) if verifier is None else verifier(row)
    return rule(row), name, budget(row)


def compare_set_methods(path: Path = COMPARE_SET) -> list[tuple[str, dict]]:
    """[(label 'rule + verifier (budget)', SpecConfig fields)] of the compare set at ``path`` (cycle costs)."""
    from omegaconf import OmegaConf

    from rheo.config import PAPER_TREE, SpecConfig

    out = []
    for entry in OmegaConf.to_container(OmegaConf.load(path))["compare"]:
        fields = {("method" if k == "name" else k): (tuple(v) if isinstance(v, list) else v) for k, v in entry.items()}
        cfg = SpecConfig(**{**dict(PAPER_TREE), **fields, "temperature": 1.0})  # the paper tree's, as cycle costs use
        rule, verifier, budget = combination(dict(method=cfg.method, tree_size=cfg.tree_size, m=cfg.m, depth=cfg.depth,
                                                  branching=cfg.branching, replacement=cfg.replacement,
                                                  verifier=cfg.verifier))
        out.append((f"{rule} + {verifier} ({budget})", fields))
    return out


def drafter_name(dial: str) -> str:
    return "head" if dial == "none" else f"dial a={dial}"


def key_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (drafter, T, budget, combination, key): its mean E[tau] over the key's states."""
    rows = labelled(rows)
    combos = [combination(r) for r in rows.to_dict("records")]
    rows = rows.assign(rule=[c[0] for c in combos], verifier_name=[c[1] for c in combos],
                       budget=[c[2] for c in combos], drafter=[drafter_name(d) for d in rows["dial"]])
    rows["combo"] = rows["rule"] + " + " + rows["verifier_name"]
    by = ["drafter", "temperature", "budget", "combo", "rule", "verifier_name"] + PROMPT
    return rows.groupby(by, as_index=False)["expected_emitted"].mean()


def _pm(mean: float, half) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:+.3f} ± {half:.3f}" if isinstance(half, float) and not math.isnan(half) else f"{mean:+.3f}"


def cell_table(keys: pd.DataFrame) -> pd.DataFrame:
    """Per cell and combination: prompts, mean E[tau], paired difference (± half-width) with Rheo m=1
    and with the cell's best combination, and whether it is the cell's winner."""
    out = []
    for (drafter, temp, budget), cell in keys.groupby(["drafter", "temperature", "budget"]):
        wide = cell.pivot_table(index=PROMPT, columns="combo", values="expected_emitted")
        means = wide.mean().sort_values(ascending=False)
        best = means.index[0]
        rheo = RHEO_COMBO if RHEO_COMBO in wide.columns else None
        for combo in means.index:
            row = dict(drafter=drafter, temperature=float(temp), budget=int(budget), combo=combo,
                       keys=int(wide[combo].notna().sum()), tau=float(means[combo]), winner=combo == best)
            for name, other in (("vs_rheo", rheo), ("vs_best", best)):
                diff, half, _ = (mean_ci((wide[combo] - wide[other]).dropna())
                                 if other is not None and other != combo else (math.nan, math.nan, 0))
                row[name], row[name + "_hw"] = diff, (float(half) if not isinstance(half, float) else half)
            out.append(row)
    return pd.DataFrame(out)


def traversal_vs_rrs(keys: pd.DataFrame) -> pd.DataFrame:
    """Per cell and tree rule verified both ways: Traversal minus RRS on the same trees, paired over prompts."""
    out = []
    both = keys[keys["verifier_name"].isin(["Traversal", "RRS"])]
    for (drafter, temp, budget, rule), part in both.groupby(["drafter", "temperature", "budget", "rule"]):
        wide = part.pivot_table(index=PROMPT, columns="verifier_name", values="expected_emitted")
        if {"Traversal", "RRS"} <= set(wide.columns):
            diff, half, n = mean_ci((wide["Traversal"] - wide["RRS"]).dropna())
            out.append(dict(drafter=drafter, temperature=float(temp), budget=int(budget), rule=rule, keys=n,
                            rrs=float(wide["RRS"].mean()), diff=diff, hw=half,
                            pct=100 * diff / float(wide["RRS"].mean())))
    return pd.DataFrame(out)


#: the combinations no paper has published: Rheo's tree under a sequence-level verifier
NEW_RULES = ("Rheo-Seq", RHEO + " + HSD")


def beyond_table(keys: pd.DataFrame, new: tuple[str, ...] = NEW_RULES) -> pd.DataFrame:
    """Per cell, each combination starting with one of ``new`` against the cell's best *published*
    combination (the best by mean among the others), paired over prompts: diff, half-width, percent."""
    out = []
    for (drafter, temp, budget), cell in keys.groupby(["drafter", "temperature", "budget"]):
        wide = cell.pivot_table(index=PROMPT, columns="combo", values="expected_emitted")
        ours = [c for c in wide.columns if c.startswith(new)]
        published = wide[[c for c in wide.columns if not c.startswith(new)]].mean().sort_values(ascending=False)
        if not ours or published.empty:
            continue
        best = published.index[0]
        for combo in ours:
            diff, half, n = mean_ci((wide[combo] - wide[best]).dropna())
            out.append(dict(drafter=drafter, temperature=float(temp), budget=int(budget), combo=combo, best=best,
                            best_tau=float(published.iloc[0]), diff=diff, hw=half, keys=n,
                            pct=100 * diff / float(published.iloc[0])))
    return pd.DataFrame(out)


def cost_lines(cost: Optional[pd.DataFrame]) -> list[str]:
    """The cost of each combination per target call (cycle-cost rows), or a line saying where it comes from."""
    if cost is None or cost.empty:
        return ["No cycle-cost rows were given (`scripts/cycle_cost.py --verifiers` writes them).", ""]
    shape, device = cost["shape"].iloc[0], cost["device"].iloc[0]
    body = [[r["method"], f"{r['temperature']:g}", f"{r['ops_verify']:,.1f}", f"{r['syncs_verify']:.1f}",
             f"{r['ops']:,.1f}", f"{r.get('ms_verify', math.nan):.2f}", f"{r.get('ms', math.nan):.2f}"]
            for r in cost.to_dict("records") if r["method"] != "AR"]
    return [f"### Cost per target call ({shape} on {device}, `scripts/cycle_cost.py --verifiers`)", "",
            markdown_table(["combination", "T", "verify ops", "verify syncs", "all ops", "verify ms", "all ms"],
                           body), ""]


def markdown(keys: pd.DataFrame, cost: Optional[pd.DataFrame] = None) -> str:
    cells, tvr = cell_table(keys), traversal_vs_rrs(keys)
    lines = ["# Which lossless verifier: exact E[tau] on shared states", "",
             "Every lossless (tree rule + verifier) combination builds its own tree at the same driver states and "
             "is scored by its exact expected emitted tokens per target call (E[tau]). " + CI_TEXT + ".", ""]
    winners = cells[cells["winner"]]
    body = []
    for r in winners.to_dict("records"):
        cell = cells[(cells["drafter"] == r["drafter"]) & (cells["temperature"] == r["temperature"])
                     & (cells["budget"] == r["budget"])]
        second = cell[~cell["winner"]].sort_values("tau", ascending=False).head(1)
        runner = second.iloc[0] if len(second) else None
        rheo = cell[cell["combo"] == RHEO_COMBO]
        body.append([r["drafter"], f"{r['temperature']:g}", r["budget"], r["combo"], f"{r['tau']:.3f}",
                     "-" if runner is None else f"{runner['combo']}: {_pm(-runner['vs_best'], runner['vs_best_hw'])}",
                     "-" if rheo.empty or rheo.iloc[0]["winner"] else _pm(-rheo.iloc[0]["vs_best"],
                                                                          rheo.iloc[0]["vs_best_hw"]),
                     r["keys"]])
    lines += ["## Winner of each cell", "",
              markdown_table(["drafter", "T", "budget", "winner", "E[tau]", "winner − runner-up",
                              "winner − Rheo m=1", "prompts"], body), ""]
    if not tvr.empty:
        lines += ["## Traversal against RRS on the same trees", "",
                  markdown_table(["drafter", "T", "budget", "tree", "RRS E[tau]", "Traversal − RRS", "%", "prompts"],
                                 [[r["drafter"], f"{r['temperature']:g}", r["budget"], r["rule"], f"{r['rrs']:.3f}",
                                   _pm(r["diff"], r["hw"]), f"{r['pct']:+.1f}%", r["keys"]]
                                  for r in tvr.to_dict("records")]), ""]
    beyond = beyond_table(keys)
    if not beyond.empty:
        lines += ["## Rheo-Seq and Rheo + HSD against the best published combination of each cell", "",
                  markdown_table(["drafter", "T", "budget", "new combination", "best published", "its E[tau]",
                                  "new − best", "%", "prompts"],
                                 [[r["drafter"], f"{r['temperature']:g}", r["budget"], r["combo"], r["best"],
                                   f"{r['best_tau']:.3f}", _pm(r["diff"], r["hw"]), f"{r['pct']:+.1f}%", r["keys"]]
                                  for r in beyond.to_dict("records")]), ""]
    lines += cost_lines(cost)
    lines += ["## Every combination", ""]
    for (drafter, temp), part in cells.groupby(["drafter", "temperature"], sort=False):
        lines += [f"### {drafter}, T = {temp:g}", "",
                  markdown_table(["budget", "combination", "E[tau]", "− Rheo m=1", "− best", "prompts"],
                                 [[r["budget"], ("**" + r["combo"] + "**") if r["winner"] else r["combo"],
                                   f"{r['tau']:.3f}", _pm(r["vs_rheo"], r["vs_rheo_hw"]),
                                   _pm(r["vs_best"], r["vs_best_hw"]), r["keys"]]
                                  for r in part.sort_values(["budget", "tau"], ascending=[True, False])
                                  .to_dict("records")]), ""]
    return "\n".join(lines)


def figure(keys: pd.DataFrame) -> Optional[bytes]:
    """E[tau] against the budget, a panel per (drafter, T), a line per combination."""
    import matplotlib.pyplot as plt

    means = keys.groupby(["drafter", "temperature", "budget", "combo"], as_index=False)["expected_emitted"].mean()
    drafters, temps = sorted(means["drafter"].unique()), sorted(means["temperature"].unique())
    if not drafters:
        return None
    fig, axes = panels(len(temps), rows=len(drafters), width=3.6, height=3.0)
    combos = sorted(means["combo"].unique())
    colours = plt.get_cmap("tab20")
    for i, drafter in enumerate(drafters):
        for j, temp in enumerate(temps):
            ax = axes[i, j]
            part = means[(means["drafter"] == drafter) & (means["temperature"] == temp)]
            for k, combo in enumerate(combos):
                line = part[part["combo"] == combo].sort_values("budget")
                if not line.empty:  # a colour per combination (tab20), the verifier by line style
                    ax.plot(line["budget"], line["expected_emitted"], label=combo, color=colours(k % 20),
                            marker="os^vD<>p*h"[k % 10],
                            linestyle="--" if "Traversal" in combo else ":" if "HSD" in combo else "-")
            ax.set_title(f"{drafter}, T = {temp:g}", fontsize=9)
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(sorted(means["budget"].unique()), [str(b) for b in sorted(means["budget"].unique())])
            ax.set_xlabel("drafted nodes", fontsize=8)
            ax.set_ylabel("E[tau] per target call", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return png(fig, note="mean over prompts of the exact expected emitted tokens per target call")


def main(argv=None) -> Optional[int]:
    """The command line (module docstring): exit status 2 with one line for a refused input."""
    from eval.store.committed import write_outputs
    from eval.store.state_archive import archive_files, load_rows
    from eval.store.storage import report_source

    ap = ArgumentParser(prog=PROG, description="Tables and figure of the verifier study.")
    ap.add_argument("results", type=path_arg, help="a same-state output_dir or its archive X.parquet")
    ap.add_argument("--out", type=path_arg, help="the Markdown table file")
    ap.add_argument("--figure", type=path_arg, help="the PNG figure file")
    ap.add_argument("--archive", type=path_arg, help="also write the rows of RESULTS (a folder) to this archive")
    ap.add_argument("--cost", type=path_arg, help="cycle-cost rows of the combinations (a parquet file)")
    args = ap.parse_args(argv)
    args.results, args.archive = report_source(args.results, args.archive)
    rows = load_rows(args.results)
    if rows.empty:
        print(f"{PROG}: error: {args.results} holds no same-state rows", file=sys.stderr)
        return 2
    cost = pd.read_parquet(args.cost) if args.cost and Path(args.cost).is_file() else None
    keys = key_frame(rows)
    text = markdown(keys, cost)
    archive = (archive_files(args.results, args.archive, without=("calibration", "depth"))[0]
               if args.archive else [])
    write_outputs([(args.out, text.encode()), (args.figure, figure(keys) if args.figure else None), *archive],
                  args.results)
    if not args.out:
        print(text)
    return 0


if __name__ == "__main__":
    run_main(main, PROG, (FileNotFoundError, ValueError))
