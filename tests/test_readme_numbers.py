"""Every measured number of the README's prose is recomputed here from the committed files.

The tables between ``<!-- table: ... -->`` markers are generated (scripts/make_docs.py,
checked by test_docs.py). The numbers in the sentences and in the claims table are not:
each check below reads its source (results/tables/*.md, the parquet archives, the run's own
time record), formats the number as the README writes it and asserts
the README says exactly that, so a rerun that changes a result fails here until the prose
follows. (The paper's own numbers, "+4.2%" and "~5", are quoted, not measured here.)
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from result_tables import apart, cycle_cost, headed_table, numbers, option_studies
from result_tables import pm as _pm
from result_tables import pooled_diffs, pooled_keys, replications, row, setting, signed, table, tables

ROOT = Path(__file__).resolve().parents[1]
PAPER_TREE = "K=10 d=8 R=60 top-128"  # as the speed tables name it


def prose(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text())


def wall_time(root: Path) -> list[str]:
    """The cold `make reproduce` time its own record holds (results/reproduce_time.json)."""
    rec = json.loads((root / "results/reproduce_time.json").read_text())
    assert rec["cores"] == 2 and rec["wall"] == f"{rec['wall_s'] // 60} min {rec['wall_s'] % 60} s"
    return [f"`make reproduce` ran in **{rec['wall']}** cold in a fresh clone on an {rec['cpu']} VM on {rec['start_utc'][:10]}, "
            f"at commit {rec['git_sha'][:7]} (its record: `results/reproduce_time.json`; the code has changed since: time yours)"]


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
            f"main table: +{pooled['Δτ (paired)']} tokens per call, {pooled['Δτ %']} ({pooled['n']} prompts, sign test p "
            f"{pooled['p sign']};",
            f"tau ~{taus.pop()} here against the paper's ~5"]


def expected_check(root: Path) -> list[str]:
    rows = table(root / "results/tables/expected.md", "max_new_tokens=128")
    cell = {r["method"]: r for r in rows if r["suite"] == "**pooled**"}
    pm = lambda c: f"{signed(numbers(c)[0], 3)} ± {numbers(c)[1]:.3f}"  # noqa: E731
    exact = {m: pm(r["every cycle, last uncut"]) for m, r in cell.items()}
    before = {m: pm(r["cycles before the budget"]) for m, r in cell.items()}
    assert cell["Top-K"]["covers 0"] == "yes" and cell["Rheo m=1"].get("covers 0") is not None
    rheo = numbers(cell["Rheo m=1"]["every cycle, last uncut"])
    assert abs(rheo[0]) <= rheo[1]  # the README says the committed rows cover 0; a rerun that does not fails here
    mc = [abs(numbers(r["z"])[0]) for _, rows in tables(root / "results/tables/expected_mc.md")
          for r in rows if r["state"] != "**mean**"]
    return [f"{len(mc)} real trees of Top-K and Rheo m=1 (`results/tables/expected_mc.md`) match it (|z| <= {max(mc):.1f})",
            f"the exact check (every cycle, the last counted uncut) Top-K {exact['Top-K']}, Rheo m=1 "
            f"{exact['Rheo m=1']}; over the cycles that start before the budget {before['Top-K']} and "
            f"{before['Rheo m=1']}",
            f"read {signed(rheo[0], 3)} ± {rheo[1]:.3f} tokens per cycle from their expectation"] + replay_check(root)


def replay_check(root: Path) -> list[str]:
    """The replication of the exact check on new seeds (results/tables/expected_replay.md)."""
    got = replications(root)
    first = {g[2]: g for g in got}["bf16 +1"]  # results/tables/expected_replay.md
    assert abs(first[0]) <= first[1]  # the README says the replication covers 0
    # its "committed rows (seed offset 0)" line reads the rows it was made beside (the archive of commit 995eaa1),
    # which the docs name; results/runs.parquet has been regenerated since
    text = (root / "results/tables/expected_replay.md").read_text()
    assert re.search(r"committed rows \(seed offset 0(?:, \w+)?\): .*?per cycle ([+-]\d\.\d+) ± (\d\.\d+)", text)
    mean = sum(g[0] for g in got) / len(got)
    half = math.sqrt(sum(g[1] ** 2 for g in got)) / len(got)  # independent readings, equal weights
    assert abs(mean) <= half  # the README says the pooled replications cover 0
    return [f"The same {first[3]} Rheo keys on new seeds (`make expected-replay`, `results/tables/expected_replay.md`): "
            f"{signed(first[0], 4)} ± {first[1]:.4f}",
            f"all {len(got)} replications of these keys ({', '.join(g[2] for g in got)}; "
            f"`results/tables/expected_replay*.md`) pooled with equal weights: {signed(mean, 4)} ± {half:.4f} per cycle"]


def pooled_same_state(root: Path, t: str, column: str) -> list[dict]:
    """The one pooled table (no suite column) with ``column`` under the heading ending in 'T = t'."""
    found = [rows for heading, rows in tables(root / "results/tables/same_state.md")
             if heading.endswith(f"T = {t}") and column in rows[0] and "suite" not in rows[0]]
    assert len(found) == 1, f"{len(found)} pooled tables with {column!r} at T = {t}"
    return found[0]


def same_state_at(root: Path, t: str) -> dict:
    return {r["method"]: r for r in pooled_same_state(root, t, "diff vs Top-K")}


def same_state_tables(root: Path) -> list[str]:
    one = same_state_at(root, "1")
    vs_m1 = [r for r in pooled_same_state(root, "1", "diff vs Rheo m=1") if r["diff vs Rheo m=1"] != "-"]
    d = lambda cell: f"{signed(numbers(cell)[0], 3)} ± {numbers(cell)[1]:.3f}"  # noqa: E731
    by_diff = sorted(vs_m1, key=lambda r: numbers(r["diff vs Rheo m=1"])[0])
    needed = [int(r["keys for ±0.03"]) for r in list(one.values()) + vs_m1 if r["keys for ±0.03"] != "-"]
    keys = one["Top-K"]["keys"]
    return [f"same-state: {d(one['Rheo m=1']['diff vs Top-K'])} ({keys} prompts)",
            "same-state T = 1: m = 0..4 − Top-K = " + " / ".join(d(one[f"Rheo m={m}"]["diff vs Top-K"]) for m in range(5)),
            f"m − m=1 from {d(by_diff[0]['diff vs Rheo m=1'])} to {d(by_diff[-1]['diff vs Rheo m=1'])}",
            f"a ± 0.03 CI needs {min(needed)}-{max(needed)} prompts per comparison"]


def temperature_curve(root: Path) -> list[str]:
    """m=1 and m=0 - Top-K at every temperature of the studies' tables (their rows joined with reproduce's)."""
    d = pooled_diffs(root / "results/tables/same_state_studies.md")
    temps = ["1", "0.75", "0.5", "0.25", "0"]
    assert d["0"]["Rheo m=0"] == [0.0, 0.0]  # identical to Top-K at T = 0
    keys = {r["keys"] for _, rows in tables(root / "results/tables/same_state_studies.md")
            if "diff vs Top-K" in rows[0] and "suite" not in rows[0] for r in rows}
    return [f"same-state, {keys.pop()} prompts per T (`results/tables/same_state_studies.md`), m=1 − Top-K at "
            f"T = 1 / 0.75 / 0.5 / 0.25 / 0: " + " / ".join(_pm(d[t]["Rheo m=1"]) for t in temps),
            "m=0: " + " / ".join(_pm(d[t]["Rheo m=0"]) for t in temps[:-1]) + ", and identical to Top-K at T = 0"]


def float32_study(root: Path) -> list[str]:
    """The float32 same-state study (results/tables/same_state_fp32.md)."""
    path = root / "results/tables/same_state_fp32.md"
    d, keys = pooled_diffs(path), pooled_keys(path)
    assert all(", float32, head" in h for h, rows in tables(path) if "diff vs Top-K" in rows[0])
    assert d["0"]["Rheo m=0"] == [0.0, 0.0]  # identical to Top-K at T = 0
    temps = [t for t in ("1", "0.75", "0.5", "0.25", "0") if t in d]
    vs_m1 = {r["method"]: numbers(r["diff vs Rheo m=1"]) for heading, rows in tables(path)
             if heading.endswith("T = 1") and "diff vs Rheo m=1" in rows[0] for r in rows if r["diff vs Rheo m=1"] != "-"}
    return [f"m − m=1 = {_pm(vs_m1['Rheo m=0'])} (m=0), " + ", ".join(_pm(vs_m1[f"Rheo m={m}"]) for m in (2, 3, 4))
            + " (m = 2, 3, 4)",
            f"float32, {keys['1']} prompts (`results/tables/same_state_fp32.md`): m = 0..4 − Top-K = "
            + " / ".join(_pm(d["1"][f"Rheo m={m}"]) for m in range(5)),
            f"float32 ({' / '.join(keys[t] for t in temps)} prompts at T = {' / '.join(temps)}): m=1 − Top-K "
            + " / ".join(_pm(d[t]["Rheo m=1"]) for t in temps) + "; m=0 "
            + " / ".join(_pm(d[t]["Rheo m=0"]) for t in temps if t != "0")]


def dilemma_and_heads(root: Path) -> list[str]:
    d = pooled_diffs(root / "results/tables/same_state_dilemma.md")
    deep, wide, si = "RSD (4,2,1,1,1,1,1,1)", "RSD (6,3,1,1)", "SpecInfer (4,2,1,1,1,1,1,1)"
    assert d["0"][deep] == d["0"][si]  # one draw per node at T = 0: SpecInfer is RSD
    return [f"T = 0 (21 prompts): {deep} {_pm(d['0'][deep])}, {wide} {_pm(d['0'][wide])}, Rheo m=1 "
            f"{_pm(d['0']['Rheo m=1'])}, the chain {_pm(d['0']['Chain d=8'])} (SpecInfer equals RSD at T = 0);",
            f"T = 0.5 (21 prompts): {deep} {_pm(d['0.5'][deep])}, {wide} {_pm(d['0.5'][wide])}, {si} "
            f"{_pm(d['0.5'][si])}, Rheo m=1 {_pm(d['0.5']['Rheo m=1'])}, the chain {_pm(d['0.5']['Chain d=8'])}; "
            f"T = 1 (21 prompts): {deep} {_pm(d['1'][deep])}, {wide} {_pm(d['1'][wide])}, {si} {_pm(d['1'][si])}, "
            f"Rheo m=1 {_pm(d['1']['Rheo m=1'])}; the depth-8 chain {_pm(d['1']['Chain d=8'])}",
            *gain_vs_head(root)]


def gain_vs_head(root: Path) -> list[str]:
    rows = tables(root / "results/tables/gain_vs_head.md")[0][1]
    by = {(r["head"], r["T"]): r for r in rows}
    heads = sorted({r["head"] for r in rows}, key=lambda h: float(by[(h, "1")]["top-1"]))
    cell = lambda h, t: f"{signed(numbers(by[(h, t)]['m=1 − Top-K'])[0], 3)} ± {numbers(by[(h, t)]['m=1 − Top-K'])[1]:.3f}"  # noqa: E731
    return [f"held-out top-1 {' / '.join(by[(h, '1')]['top-1'] for h in heads)} (one held-out set",
            f"T = 1 {' / '.join(cell(h, '1') for h in heads)}; T = 0 {' / '.join(cell(h, '0') for h in heads)}"]


def sampled_temperature_zero(root: Path) -> list[str]:
    """Separate trajectories at T = 0 (results/sampled_studies.parquet): m=1 - Top-K per key."""
    from eval.report import analysis
    df = analysis.load(root / "results/sampled_studies.parquet")
    rows = analysis.restrict_to_common(df[df["temperature"] == 0], ["topk", "rheo m=0", "rheo m=1"])
    tokens = {v: rows[rows["variant"] == v].set_index(analysis.PAIR_KEY)["output_tokens"] for v in ("topk", "rheo m=0")}
    assert len(tokens["topk"]) and all(list(a) == list(tokens["rheo m=0"][key]) for key, a in tokens["topk"].items())
    mean, half, n = analysis.mean_ci(analysis.paired(rows, "topk", "rheo m=1")["diff"])
    return [f"Separate trajectories ({n} prompts, `results/tables/sampled/`) gave m=1 {signed(mean, 2)} ± {half:.2f} at T = 0"]


def mechanism(root: Path) -> list[str]:
    path = root / "results/tables/same_state.md"
    roots = {r["method"]: r for r in table(path, "", column="OT bound") if r["T"] == "1"}
    depth = {r["method"]: r for r in table(path, "", column="P(depth >= d), d = 1..") if r["T"] == "1"}
    rheo = [f"Rheo m={m}" for m in range(5)]
    first = [numbers(roots[m]["probe by depth"])[0] for m in rheo]
    reach = [numbers(depth[m]["P(depth >= d), d = 1.."])[0] for m in rheo]
    acc = [numbers(roots[m]["root acceptance"])[0] for m in rheo]
    second = [numbers(roots[m]["probe by depth"])[1] for m in ("Rheo m=0", "Rheo m=4")]
    gaps = [abs(numbers(r["gap"])[0]) for r in roots.values()]
    assert max(gaps) <= 0.001 and all(r["bound < acc."].startswith("0/") for r in roots.values())
    return [f"pruning ({min(first):.2f}-{max(first):.2f})",
            f"rises from {numbers(depth['Top-K']['P(depth >= d), d = 1..'])[0]:.2f} (Top-K) to "
            f"{min(reach):.2f}-{max(reach):.2f} (Rheo m = 0..4;",
            f"the root: {numbers(roots['Top-K']['root acceptance'])[0]:.3f} vs {min(acc):.3f}-{max(acc):.3f})",
            f"(depth 2: {second[0]:.2f} for m = 0, {second[1]:.2f} for m = 4)",
            "within 0.001 of the optimal-transport bound", "no root state lies above its bound"]


def tuned_tree(root: Path) -> str:
    text = (root / "configs/experiment/tuned_topk.yaml").read_text()
    k, depth, size = (int(re.search(rf"^  {f}: (\d+)$", text, re.M).group(1)) for f in ("k", "depth", "tree_size"))
    return f"K={k} d={depth} R={size} top-128"


def _signed_cell(cell: str) -> str:
    """A table's '-1.04 ± 2.30' cell as the README writes it ('−1.04 ± 2.30', '+0.50 ± 1.10')."""
    return (cell if cell.startswith("-") else "+" + cell).replace("-", "−")


def speed(root: Path) -> list[str]:
    rows = table(root / "results/tables/speed/speed.md", "T=1")
    topk, rheo = row(rows, method="Top-K", tree=PAPER_TREE), row(rows, method="Rheo m=1", tree=PAPER_TREE)
    (a, a_half), (b, b_half) = numbers(topk["speedup per item"]), numbers(rheo["speedup per item"])
    assert abs(a - b) <= a_half + b_half and topk["n"] == rheo["n"]  # the per-item CIs overlap
    over_ar = (f"paper tree, T = 1, {topk['n']} prompts: τ {numbers(topk['τ'])[0]:.2f} vs {numbers(rheo['τ'])[0]:.2f}, "
               f"speedup {topk['speedup']}x vs {rheo['speedup']}x over AR; the CIs overlap")
    alone = row(table(root / "results/tables/speed_cost/cost.md", "cpu/float32, max_new_tokens=64, T=1"),
                method="Rheo m=1", tree=PAPER_TREE)
    base = row(table(root / "results/tables/speed_cost/phases.md", "T=1"), method="Top-K", tree=PAPER_TREE)
    main = row(table(root / "results/tables/cost.md", "cpu/bfloat16, max_new_tokens=128, T=1"),
               method="Rheo m=1", tree=PAPER_TREE)
    greedy = row(table(root / "results/tables/speed_cost/cost.md", "cpu/float32, max_new_tokens=64, T=0"),
                 method="Rheo m=1", tree=PAPER_TREE)
    ratio, low, high = (float(x) for x in re.findall(r"[\d.]+", alone["cycle ratio"]))
    assert low > 1  # the verdict "holds": Rheo's cycle is resolved above Top-K's
    for cost in (alone, greedy):  # no drift between the paired timings: the draft phase (same work) covers 0
        draft, half = numbers(cost["Δ draft ms"])
        assert abs(draft) <= half
    extra = numbers(alone["Δ build ms"])[0] + numbers(alone["Δ verify ms"])[0]
    return [over_ar,
            f"{alone['prompts']} prompts, AMD EPYC VM): τ ratio {alone['τ ratio']}, tokens/s ratio {alone['tok/s ratio']}, "
            f"cycle-time ratio {alone['cycle ratio']} (build +{alone['Δ build ms']} ms and verify +{alone['Δ verify ms']} ms "
            f"of a {float(base['cycle ms']):.0f} ms cycle",
            f"draft, the same work for both, {_signed_cell(alone['Δ draft ms'])} ms)",
            f"T = 0: cycle-time ratio {greedy['cycle ratio']}, draft {_signed_cell(greedy['Δ draft ms'])} ms",
            f"bf16, {main['prompts']} prompts, Top-K and Rheo in separate jobs, expectation bookkeeping on: no interval, "
            f"not speed evidence): build +{apart(main['Δ build ms'])} ms, verify +{apart(main['Δ verify ms'])} ms, "
            f"cycle-time ratio {apart(main['cycle ratio'])}",
            f"Rheo's cycle costs {100 * (ratio - 1):.1f}% [{100 * (low - 1):.1f}%, {100 * (high - 1):.1f}%] more than "
            f"Top-K's, about its extra build and verify work (+{extra:.1f} ms, "
            f"{100 * extra / float(base['cycle ms']):.1f}% of the cycle)"]


CHECKS = [wall_time, main_table, expected_check, same_state_tables, temperature_curve, sampled_temperature_zero, mechanism, speed,
          dilemma_and_heads, float32_study, option_studies, cycle_cost]


def readme_claims(root: Path) -> list[str]:
    """The README's short findings table: each claim's number as the long form's sources give it."""
    got = replications(root)
    mean, half = sum(g[0] for g in got) / len(got), math.sqrt(sum(g[1] ** 2 for g in got)) / len(got)
    path = root / "results/tables/same_state_fp32.md"
    d, keys = pooled_diffs(path), pooled_keys(path)
    temps = ["1", "0.75", "0.5", "0.25", "0"]
    counts = sorted(int(keys[t]) for t in temps)
    dil = pooled_diffs(root / "results/tables/same_state_dilemma.md")
    wide = "RSD (6,3,1,1)"
    return [main_table(root)[1], expected_check(root)[2],
            f"{len(got)} new-trajectory replications pooled: {signed(mean, 4)} ± {half:.4f} per cycle",
            float32_study(root)[1],
            f"m=1 − Top-K, float32, {counts[0]}-{counts[-1]} prompts per T, T = {' / '.join(temps)}: "
            + " / ".join(_pm(d[t]["Rheo m=1"]) for t in temps),
            speed(root)[5], *gain_vs_head(root),
            f"T = 0: {wide} {_pm(dil['0'][wide])}, Rheo m=1 {_pm(dil['0']['Rheo m=1'])}; T = 1: {wide} "
            f"{_pm(dil['1'][wide])}, Rheo m=1 {_pm(dil['1']['Rheo m=1'])}"]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_readme_numbers_match_their_sources(check):
    """Every number's long form: in the README's prose or on docs/results.md ("Claim by claim")."""
    text = prose(ROOT / "README.md") + " " + prose(ROOT / "docs/results.md")
    stale = [t for t in check(ROOT) if t not in text]
    assert not stale, f"README.md / docs/results.md no longer say what {check.__name__}'s sources give: {stale}"


def test_readme_findings_table_matches_its_sources():
    readme = prose(ROOT / "README.md")
    stale = [t for t in readme_claims(ROOT) if t not in readme]
    assert not stale, f"the README's findings table no longer says what its sources give: {stale}"


def test_results_page_quotes_the_same_numbers():
    page = prose(ROOT / "docs/results.md")
    rec = json.loads((ROOT / "results/reproduce_time.json").read_text())
    needed = [int(r["keys for ±0.03"]) for r in same_state_at(ROOT, "1").values() if r["keys for ±0.03"] != "-"]
    assert f"Wall time: {rec['wall']}" in page and f"needs {min(needed)}-{max(needed)} prompts" in page


def test_a_changed_result_makes_its_readme_number_stale(tmp_path):
    (tmp_path / "results" / "tables").mkdir(parents=True)
    main = (ROOT / "results/tables/main.md").read_text()
    pooled = re.search(r"\| \*\*pooled\*\* \|.*", main).group(0)  # the first table's
    changed = pooled.replace(re.search(r"\d\.\d{3} ± \d\.\d{3}", pooled).group(0), "0.250 ± 0.060")
    (tmp_path / "results/tables/main.md").write_text(main.replace(pooled, changed, 1))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    readme = prose(tmp_path / "README.md")
    assert main_table(ROOT)[1] in readme and main_table(tmp_path)[1] not in readme
    assert math.isclose(numbers(changed.split("|")[7])[0], 0.25)  # the Δτ (paired) column
