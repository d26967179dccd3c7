"""Every measured number of the README's prose is recomputed here from the committed files.

The tables between ``<!-- table: ... -->`` markers are generated (scripts/make_docs.py,
checked by test_docs.py). The numbers in the sentences and in the claims table are not:
each check below reads its source (results/tables/*.md, the parquet archives, the Makefile's
timing comment, the tuned configs), formats the number as the README writes it and asserts
the README says exactly that, so a rerun that changes a result fails here until the prose
follows. (The paper's own numbers, "+4.2%" and "~5", are quoted, not measured here.)
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from result_tables import diff_ci, headed_table, in_words, numbers, row, setting, short_p, signed, table

ROOT = Path(__file__).resolve().parents[1]
PAPER_TREE = "K=10 d=8 R=60 top-128"  # as the speed tables name it


def prose(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text())


def wall_time(root: Path) -> list[str]:
    """The cold `make reproduce` time the Makefile's comment records, and the machine of the speed tables."""
    minutes = re.search(r"from cold: (\d+ min \d+ s)", (root / "Makefile").read_text()).group(1)
    machine = re.search(r"hardware: (.+?) \((\d+) cores\)", (root / "results/tables/speed/speed.md").read_text())
    return [f"`make reproduce` ran in **{minutes}** cold on a {machine.group(2)}-core {machine.group(1)} VM"]


def main_table(root: Path) -> list[str]:
    heading, rows = headed_table(root / "results/tables/main.md", "max_new_tokens=128")
    tree = setting(heading)
    pooled, mt = row(rows, suite="**pooled**"), row(rows, suite="mt_bench")
    items = {r["n"] for r in rows if r["suite"] not in ("**pooled**", "mt_bench")}
    assert len(items) == 1 and int(mt["n"]) == 2 * int(next(iter(items)))
    taus = {round(numbers(pooled[c])[0]) for c in ("τ Top-K", "τ Rheo m=1")}
    assert len(taus) == 1
    assert "cpu/bfloat16" in heading
    return [f"paper tree (K={tree['K']}, depth {tree['depth']}, R={tree['R']}, top-{tree['top']} draft), "
            f"{next(iter(items))} items per suite with both MT-bench turns = {pooled['n']} paired prompts, "
            f"{tree['max_new_tokens']} new tokens, SmolLM2-135M-Instruct + the default head, bf16 on the CPU",
            f"| +{pooled['Δτ (paired)']} tokens per call, {pooled['Δτ %']} ({pooled['n']} prompts, sign test p "
            f"{short_p(float(pooled['p sign']))};",
            f"The embedded pair has tau ~{taus.pop()} against"]


def m_ablation(root: Path) -> list[str]:
    heading, rows = headed_table(root / "results/tables/m_ablation.md", "T=1")
    pooled = row(rows, suite="**pooled**")
    cells = [numbers(pooled[f"Rheo m={m}"]) for m in range(4)]
    halves = [f"{c[1]:.2f}" for c in cells]
    return [f"sampled, {pooled['n']} prompts x {setting(heading)['max_new_tokens']} tokens: m = 0..3 at " + " / ".join(f"{c[0]:.2f}" for c in cells)
            + f" ± {min(halves)}-{max(halves)} vs Top-K {numbers(pooled['Top-K'])[0]:.2f}."]


def sampled_temperature_zero(root: Path) -> list[str]:
    """Separate trajectories at T = 0 (results/runs.parquet): m=0 emits Top-K's tokens; m=1 - Top-K per key."""
    from eval import analysis

    df = analysis.load(root / "results/runs.parquet")
    rows = analysis.restrict_to_common(df[(df["temperature"] == 0) & (df["max_new_tokens"] == 32)],
                                       ["topk", "rheo m=0", "rheo m=1"])
    tokens = {v: rows[rows["variant"] == v].set_index(analysis.PAIR_KEY)["output_tokens"] for v in ("topk", "rheo m=0")}
    assert len(tokens["topk"]) and all(list(a) == list(tokens["rheo m=0"][key]) for key, a in tokens["topk"].items())
    diff = analysis.paired(rows, "topk", "rheo m=1")["diff"]
    mean, half, n = analysis.mean_ci(diff)
    return ["T = 0: m=0 identical to Top-K on every prompt",
            f"m=1 {signed(mean, 2)} ± {half:.2f} ({(diff > 0).sum()} wins, {(diff < 0).sum()} losses of {n})"]


def same_state_rows(root: Path) -> pd.DataFrame:
    from eval.same_state import load_rows

    return load_rows(root / "results/same_state.parquet")


def same_state_tables(root: Path) -> list[str]:
    path = root / "results/tables/same_state.md"
    at = {t: {r["method"]: r for r in table(path, f"temperature={t}", column="suite") if r["suite"] == "pooled"}
          for t in ("0.0", "0.5", "1.0")}
    mechanism = {r["method"]: r for r in table(path, "", column="probe survival by depth") if r["T"] == "1"}
    states = {r["states"] for r in mechanism.values()}
    max_new = same_state_rows(root)["max_new_tokens"].unique()
    assert len(states) == 1 and len(max_new) == 1
    keys, tokens = at["1.0"]["topk"]["keys"], int(max_new[0])
    rise = [numbers(mechanism[f"rheo m={m}"]["P(depth >= d), d = 1.."])[0] for m in range(5)]
    survival = [numbers(mechanism[f"rheo m={m}"]["probe survival by depth"])[1] for m in (0, 4)]
    return [f"Same-state, {keys} prompts x {tokens} tokens ({states.pop()} states): m = 0..4 − Top-K = "
            + " / ".join(diff_ci(at["1.0"][f"rheo m={m}"]["diff vs topk"], 2) for m in range(5)),
            f"on the same states ({at['0.0']['topk']['keys']} prompts, {tokens} tokens) m=1 − Top-K = "
            f"{diff_ci(at['0.0']['rheo m=1']['diff vs topk'], 3)} and m=2 {diff_ci(at['0.0']['rheo m=2']['diff vs topk'], 3)}",
            "At T = 0.5: " + ", ".join(f"m={m} {diff_ci(at['0.5'][f'rheo m={m}']['diff vs topk'], 3)}" for m in range(3)),
            f"the acceptance rises from {numbers(mechanism['topk']['P(depth >= d), d = 1..'])[0]:.2f} (Top-K) to "
            f"{min(rise):.2f}-{max(rise):.2f} (Rheo m = 0..4;",
            f"(depth 1: {survival[0]:.2f} for m = 0, {survival[1]:.2f} for m = 4)"]


def same_state_rows_at_one(root: Path) -> list[str]:
    """What the same-state rows at T = 1 give beyond the tables: m - m=1, the prompts a ± 0.03 CI needs,
    the closed-form root acceptance and its gap to the optimal-transport bound."""
    from eval.same_state_tables import paired_differences

    rows = same_state_rows(root)
    rows = rows[rows["temperature"] == 1.0]
    vs_m1 = paired_differences(rows, "rheo m=1").query("suite == 'pooled' and variant.str.startswith('rheo')")
    vs_m1 = vs_m1.dropna(subset=["diff"])
    assert (vs_m1["diff"].abs() <= vs_m1["half_width"]).all()
    vs_topk = paired_differences(rows).query("suite == 'pooled' and variant != 'topk'")
    needed = [round(k * (h / 0.03) ** 2, -1) for k, h in zip(vs_topk["keys"], vs_topk["half_width"])]
    acceptance = rows.groupby("variant")["root_acceptance"].mean()
    gap = rows["root_ot_bound"] - rows["root_acceptance"]
    rheo = rows["method"] == "rheo"
    assert abs(gap[~rheo].mean()) < 5e-4  # Top-K reaches its bound
    rheo_acc = acceptance.drop("topk")
    return [f"every m − m=1 within ± {vs_m1['half_width'].max():.2f}",
            f"(the ± 0.03 target needs ~{min(needed):.0f}-{max(needed):.0f} prompts)",
            f"the closed form at the root: {acceptance['topk']:.3f} vs {rheo_acc.min():.3f}-{rheo_acc.max():.3f})",
            f"Rheo's verifier is within {gap[rheo].mean():.3f} of the optimal-transport bound of its own candidate "
            f"sets on average (it misses it on {in_words((gap[rheo] > 1e-6).mean())} of the root nodes",
            "Top-K is at its bound"]


def tuned_tree(root: Path) -> str:
    text = (root / "configs/experiment/tuned_topk.yaml").read_text()
    k, depth, size = (int(re.search(rf"^  {f}: (\d+)$", text, re.M).group(1)) for f in ("k", "depth", "tree_size"))
    return f"K={k} d={depth} R={size} top-128"


def speed(root: Path) -> list[str]:
    tree = tuned_tree(root)
    rows = table(root / "results/tables/speed/speed.md", "T=1")
    topk, rheo = row(rows, method="Top-K", tree=tree), row(rows, method="Rheo m=1", tree=tree)
    (a, a_half), (b, b_half) = numbers(topk["speedup per item"]), numbers(rheo["speedup per item"])
    assert abs(a - b) <= a_half + b_half and topk["n"] == rheo["n"]  # the per-item CIs overlap
    phases = table(root / "results/tables/speed/phases.md", "T=1")
    build = [float(row(phases, method=m, tree=tree)["build ms"]) for m in ("Top-K", "Rheo m=1")]
    extra = 100 * (build[1] - build[0]) / float(row(phases, method="Top-K", tree=tree)["cycle ms"])
    steps = set()
    for t in ("T=0", "T=1"):
        phases = table(root / "results/tables/speed/phases.md", t)
        paper = row(phases, method="Top-K", tree=PAPER_TREE)
        steps.add(in_words(float(paper["score ms"]) / float(row(phases, method="AR (ours)")["cycle ms"])))
    assert len(steps) == 1
    return [f"tuned tree at T = 1: Rheo {rheo['speedup']}x vs Top-K {topk['speedup']}x over AR, {topk['n']} prompts, "
            f"CIs overlapping; the cycle pays ~{extra:.0f}% more for the sample (in tree building)",
            f"On this CPU a {setting(PAPER_TREE)['R'] + 1}-node tree costs about {steps.pop()} one-token steps"]


def methods(root: Path) -> list[str]:
    heading, rows = headed_table(root / "results/tables/methods.md", "max_new_tokens")
    for t in ("0", "1"):
        trees = [numbers(r["τ"]) for r in rows if r["T"] == t and r["nodes scored / cycle"] == "60.0"]
        chain = [numbers(r["τ"]) for r in rows if r["T"] == t and r["method"].startswith("Chain")]
        assert len(trees) == 4 and all(abs(a[0] - b[0]) <= a[1] for a in trees for b in trees)
        assert len(chain) == 1 and all(chain[0][0] < tau for tau, _ in trees)  # behind every tree
    assert len({r["n"] for r in rows}) == 1
    return [f"| {rows[0]['n']} prompts x {setting(heading)['max_new_tokens']} tokens: every 60-node tree within its CI of the others at T = 0 and "
            "T = 1; the chain far behind"]


CHECKS = [wall_time, main_table, m_ablation, sampled_temperature_zero, same_state_tables, same_state_rows_at_one,
          speed, methods]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_readme_numbers_match_their_sources(check):
    readme = prose(ROOT / "README.md")
    stale = [text for text in check(ROOT) if text not in readme]
    assert not stale, f"README.md no longer says what {check.__name__}'s sources give: {stale}"


def test_results_page_quotes_the_same_numbers():
    page = prose(ROOT / "docs/results.md")
    minutes = re.search(r"from cold: (\d+ min \d+ s)", (ROOT / "Makefile").read_text()).group(1)
    needed = re.search(r"needs ~(\d+-\d+) prompts", same_state_rows_at_one(ROOT)[1]).group(1)
    assert f"Wall time: {minutes}" in page and f"0.03 needs about {needed} prompts" in page


def test_a_changed_result_makes_its_readme_number_stale(tmp_path):
    (tmp_path / "results" / "tables").mkdir(parents=True)
    main = (ROOT / "results/tables/main.md").read_text()
    pooled = re.search(r"\| \*\*pooled\*\* \|.*", main).group(0)  # the first table's
    changed = pooled.replace(re.search(r"\d\.\d{3} ± \d\.\d{3}", pooled).group(0), "0.250 ± 0.060")
    (tmp_path / "results/tables/main.md").write_text(main.replace(pooled, changed, 1))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    readme = prose(tmp_path / "README.md")
    assert main_table(ROOT)[1] in readme and main_table(tmp_path)[1] not in readme
    assert math.isclose(numbers(changed.split("|")[5])[0], 0.25)
