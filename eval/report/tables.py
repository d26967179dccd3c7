"""Markdown tables of the paper's artifacts, built from result rows only.

Each builder returns the Markdown text, or None when the rows it needs are
absent (the caller says so and skips it). Values are means over the rows
(items x turns x seeds) ± a 95% CI clustered by item (an item's turns and seeds are one
unit) unless a column says otherwise; speedups are ratios of sums with a cluster-bootstrap
interval over items (eval/report/analysis.py).
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Optional, Sequence

import pandas as pd

from eval.report.analysis import (CI_UNIT, SEPARATE, cluster_ci, display_name, fmt, fmt_speedup, item_ci, item_clusters,
                                  item_means, one_job, paired, restrict_to_common, setting_title, settings, suites_in,
                                  variant_of, variant_summary)
from eval.report.markdown import markdown_table, section
from eval.report.speed import noise_floor
from eval.report.stats import permutation_test, sign_test
from rheo.methods import find_method

MAIN_T = 1.0
ABLATION_MS = (0, 1, 2, 3)
TEMPERATURE_MS = (0, 1, 2, 3)
#: the variants the paper's tables compare, labelled by the registry (rheo.methods)
TOPK = variant_of("topk")


def rheo_variant(m: int) -> str:
    """The label of Rheo with m leads ('rheo m=1' is the paper's configuration)."""
    return variant_of("rheo", m=m)


PAPER_RHEO = rheo_variant(1)


def temperature_variants(rows: pd.DataFrame) -> list[str]:
    """The variants of the temperature table and figure: Top-K, Rheo m=0..3, then every other
    dynamic-tree variant in the rows (a method added to the registry; static trees and chain have
    the methods table)."""
    paper = [TOPK] + [rheo_variant(m) for m in TEMPERATURE_MS]
    others = sorted({v for v, m in zip(rows["variant"], rows["method"])
                     if v not in paper and _dynamic_or_unknown(m)})
    return paper + others


def _dynamic_or_unknown(name: str) -> bool:
    """A dynamic-tree method, or one this process does not know (a plug-in's rows, shown by its name)."""
    method = find_method(name)
    return method is None or method.kind == "dynamic"


def _pct(new: float, old: float) -> str:
    if any(map(lambda v: v is None or math.isnan(v), (new, old))) or old == 0:
        return "-"
    return f"{100 * (new - old) / old:+.1f}%"


def _p(p: float) -> str:
    return "-" if math.isnan(p) else (f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}")


def _by_suite(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(s, rows[rows["dataset"] == s]) for s in suites_in(rows)] + [("**pooled**", rows)]


def main_table(df: pd.DataFrame) -> Optional[str]:
    """Top-K vs Rheo m=1 at T=1 per model x suite: tau, paired difference, speedup."""
    blocks, speed = [], False
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        rows = restrict_to_common(rows, [TOPK, PAPER_RHEO])
        if rows.empty:
            continue
        with_expected = "expected_tau" in rows and bool(rows["expected_tau"].notna().all())
        body = []
        for suite, part in _by_suite(rows):
            a = variant_summary(part[part["variant"] == TOPK])
            b = variant_summary(part[part["variant"] == PAPER_RHEO])
            pairs = paired(part, TOPK, PAPER_RHEO)
            d, d_ci, n = item_ci(pairs, "diff")
            per_item = item_means(pairs["diff"], pairs)  # the tests' independent units
            body.append([suite, str(n), fmt(a["tau"], a["tau_ci"]), fmt(b["tau"], b["tau_ci"]),
                         *(_expected_cells(part) if with_expected else []),
                         fmt(d, d_ci, 3), _pct(b["tau"], a["tau"]), _p(sign_test(per_item)),
                         _p(permutation_test(per_item)), fmt_speedup(a), fmt_speedup(b),
                         _pct(b["speedup"], a["speedup"]) + ("" if one_job(part, TOPK, PAPER_RHEO) else SEPARATE)])
        header = ["suite", "n", "τ Top-K", "τ Rheo m=1", *(["E[τ] Top-K", "E[τ] Rheo m=1"] if with_expected else []),
                  "Δτ (paired)", "Δτ %", "p sign", "p perm",
                  "speedup Top-K", "speedup Rheo", "Δ speedup %"]
        if all(r[-3] == "-" for r in body):  # a tau experiment (no AR rows): no speed columns
            header, body = header[:-3], [r[:-3] for r in body]
        else:
            speed = True
        blocks.append((-n, f"### {setting_title({**setting, 'temperature': MAIN_T})}\n\n"
                           f"seeds: {rows['seed'].nunique()}\n\n" + markdown_table(header, body)))
    blocks = [text for _, text in sorted(blocks, key=lambda b: b[0])]  # most paired keys first (stable)
    return section("Main table: Top-K vs Rheo (m=1), T=1",
                   f"τ = new tokens / target calls (bonus included), mean over items × turns × seeds ± {CI_UNIT}; "
                   "n = rows. Δτ = paired Rheo − Top-K on the same (item, turn, seed), with two-sided paired p-values "
                   "over items (each item's mean difference: sign test; sign-flip permutation test of the mean, "
                   "eval/report/stats.py); speedup = tokens/s over AR of the same target, T and seed (ratio of "
                   "sums) [95% CI, cluster bootstrap over items]; E[τ] (where recorded) = the mean over the same rows "
                   "of each cycle's exact expected emitted tokens given its tree and target logits (rheo.expected; "
                   "cycles cut by max_new_tokens or EOS are counted uncut). Settings with the most paired keys "
                   "first." + (SPEED_NOTE + noise_floor() if speed else ""), blocks)


#: the main table's note on its speed columns (where it has them)
SPEED_NOTE = (" A speedup gets its interval, and Δ speedup % compares the two methods' speedups, as rows timed in one "
              "job (one `run_id`, item by item: experiment=speed); rows of separate jobs (or older than the `run_id` "
              "column) are labelled \"separate jobs\", with no interval. ")


def _expected_cells(part: pd.DataFrame) -> list[str]:
    out = []
    for variant in (TOPK, PAPER_RHEO):
        mean, ci, _ = item_ci(part[part["variant"] == variant], "expected_tau")
        out.append(fmt(mean, ci))
    return out


def realized_minus_expected(row, budget_only: bool = False) -> Optional[float]:
    """One row's mean realized minus mean expected emitted tokens per cycle; None without cycles.

    Default: every cycle but the last (the last is cut by max_new_tokens or EOS; the expectation is
    not). Dropping the last cycle selects on its outcome (a cycle that crosses the budget or holds
    EOS tends to be a long one), a small negative bias. ``budget_only``: only rows that reach
    max_new_tokens, and in them only the cycles that start at least depth + 1 tokens before it,
    a set fixed before each cycle runs, so no truncated cycle is used."""
    exp = row["expected_accept_lengths"]
    if exp is None or len(exp) < 2:
        return None
    real, exp = list(row["accept_lengths"]), list(exp)
    if budget_only:
        budget = int(row["max_new_tokens"])
        if int(row["new_tokens"]) < budget:
            return None
        starts = [0, *accumulate(real)][:-1]  # tokens emitted before each cycle
        keep = [i for i, s in enumerate(starts) if s < budget - int(row["depth"]) - 1]
        real, exp = [real[i] for i in keep], [exp[i] for i in keep]
    else:
        real, exp = real[:-1], exp[:-1]
    if not real:
        return None
    return sum(real) / len(real) - sum(exp) / len(exp)


def uncut_difference(row) -> Optional[tuple[float, int]]:
    """(sum over every cycle of realized minus expected emitted tokens, cycles) of one row, the last
    cycle counted uncut (``last_cycle_verified``); None for rows that lack it. Its mean over rows is
    exactly 0: each cycle's expectation is taken given everything before it, and the number of
    cycles is a bounded stopping time (optional stopping)."""
    exp, last = row.get("expected_accept_lengths"), row.get("last_cycle_verified")
    if exp is None or last is None or pd.isna(last) or len(exp) == 0:
        return None
    real = list(row["accept_lengths"])
    real[-1] = int(last)
    return sum(real) - float(sum(exp)), len(real)


def _uncut_cells(cell: pd.DataFrame) -> list[str]:
    got = [(u, item) for u, item in zip((uncut_difference(r) for _, r in cell.iterrows()), item_clusters(cell))
           if u is not None]
    if not got:
        return ["0", "-", "-"]
    d, d_ci, n = cluster_ci([g[0][0] for g in got], [g[1] for g in got])
    got = [g[0] for g in got]
    cycles = sum(g[1] for g in got) / len(got)  # per cycle: the row sums over the mean cycles per row
    return [str(n), fmt(d / cycles, d_ci / cycles, 3), _covers(d, d_ci)]


def _covers(d: float, half: float) -> str:
    return "-" if math.isnan(half) else ("yes" if abs(d) <= half else "no")


def expected_check_table(df: pd.DataFrame) -> Optional[str]:
    """Realized vs expected emitted tokens per cycle, per variant and suite, paired over rows."""
    if "expected_accept_lengths" not in df:
        return None
    rows = df[df["expected_accept_lengths"].notna()]
    blocks = []
    for setting, part in settings(rows, extra=["temperature"]):
        body = []
        for variant in sorted(set(part["variant"])):
            mine = part[part["variant"] == variant]
            for suite, cell in _by_suite(mine):
                cells = [str(len(cell))]
                for budget_only in (False, True):
                    diffs = [realized_minus_expected(r, budget_only) for _, r in cell.iterrows()]
                    d, d_ci, n = cluster_ci([math.nan if x is None else x for x in diffs], item_clusters(cell))
                    cells += [str(n), fmt(d, d_ci, 3), _covers(d, d_ci)]
                cells += _uncut_cells(cell)
                body.append([display_name(variant), suite] + cells)
        header = ["method", "suite", "rows", "n", "all but the last cycle", "covers 0",
                  "n", "cycles before the budget", "covers 0", "n", "every cycle, last uncut", "covers 0"]
        blocks.append(f"### {setting_title(setting)}\n\n" + markdown_table(header, body))
    return section("Expected vs realized emitted tokens per cycle",
                   "Per row (one generation): the mean realized "
            "emitted tokens per cycle minus the mean of the exact expectations of the same cycles "
            f"(rheo.expected); mean over rows ± {CI_UNIT}. The expectation is exact for an uncut cycle, so the "
            "difference has mean 0 over any set of cycles chosen before they run. *All but the last cycle* "
            "drops the one cycle cut by max_new_tokens or EOS: a choice made after the cycle, which favours "
            "dropping long cycles (a small negative bias, largest for rows that stop at EOS after few "
            "cycles). *Cycles before the budget*: rows that reach max_new_tokens, cycles that start at least "
            "depth + 1 tokens before it (fixed in advance; no cycle is cut), which leaves only the choice of "
            "rows without an EOS. *Every cycle, last uncut*: each row's sum over all its cycles of realized minus "
            "expected, the last cycle counted with the tokens its verification produced before the cut "
            "(last_cycle_verified); the mean over rows of that sum is exactly 0 (optional stopping), shown per "
            "cycle (divided by the mean cycles per row): the exact check.", blocks)


def m_ablation_table(df: pd.DataFrame) -> Optional[str]:
    """tau of Top-K and Rheo m=0..3 at T=1 per suite (needs Top-K and >= 2 values of m)."""
    blocks = []
    for setting, rows in settings(df[df["temperature"] == MAIN_T]):
        variants = [TOPK] + [rheo_variant(m) for m in ABLATION_MS if (rows["variant"] == rheo_variant(m)).any()]
        if TOPK not in set(rows["variant"]) or len(variants) < 3:
            continue
        rows = restrict_to_common(rows, variants)
        if rows.empty:
            continue
        body = []
        for suite, part in _by_suite(rows):
            cells = [variant_summary(part[part["variant"] == v]) for v in variants]
            body.append([suite, str(cells[0]["n"])] + [fmt(c["tau"], c["tau_ci"]) for c in cells])
        speed = [fmt_speedup(variant_summary(rows[rows["variant"] == v])) for v in variants]
        if any(s != "-" for s in speed):  # a tau experiment has no AR rows
            body.append(["**speedup (pooled)**", ""] + speed)
        header = ["suite", "n"] + [display_name(v) for v in variants]
        blocks.append(f"### {setting_title({**setting, 'temperature': MAIN_T})}\n\n" + markdown_table(header, body))
    return section("Ablation over m (T=1)", f"τ mean ± {CI_UNIT}, per suite; last row (when AR rows exist): "
                   "speedup over AR (ratio of sums) [95% CI, cluster bootstrap over items].", blocks)


def temperature_studies(df: pd.DataFrame):
    """(setting, variants, temperatures, cells of temperature_cells) of every setting of ``df`` that
    ran a variant at two temperatures or more."""
    for setting, rows in settings(df):
        study = temperature_cells(rows, temperature_variants(rows))
        if study is not None:
            yield (setting, *study)


def temperature_table(df: pd.DataFrame) -> Optional[str]:
    """Pooled tau vs temperature for Top-K, Rheo m=0..3 and other dynamic trees (needs >= 2
    temperatures); "-" where a variant was not run at that temperature."""
    blocks = []
    for setting, variants, temps, cells in temperature_studies(df):
        body = [[f"{t:g}", str(max(c["n"] for c in row))] + [fmt(c["tau"], c["tau_ci"]) for c in row]
                for t, row in zip(temps, cells)]
        header = ["T", "n"] + [display_name(v) for v in variants]
        blocks.append(f"### {setting_title(setting)}\n\n" + markdown_table(header, body))
    return section("Temperature study", f"τ pooled over suites, mean ± {CI_UNIT}, per temperature on the "
                   "(item, turn, seed) keys every variant run at that temperature has.", blocks)


def runs_table(all_rows: pd.DataFrame) -> Optional[str]:
    """Inventory of the stored rows (ok and failed) per configuration."""
    if all_rows.empty:
        return None
    keys = ["model", "variant", "temperature", "k", "depth", "tree_size", "max_new_tokens", "device"]
    inv = (all_rows.assign(ok=all_rows["status"] == "ok", failed=all_rows["status"] == "failed")
           .groupby(keys, dropna=False)
           .agg(ok=("ok", "sum"), failed=("failed", "sum"), seeds=("seed", "nunique"),
                suites=("dataset", "nunique"), configs=("config_hash", "nunique"))
           .reset_index())
    body = [[str(v) for v in r] for r in inv.itertuples(index=False)]
    return "## Stored rows per configuration\n\n" + markdown_table(list(inv.columns), body) + "\n"


def temperature_cells(rows: pd.DataFrame, wanted: Sequence[str]) -> Optional[tuple[list[str], list[float], list[list[dict]]]]:
    """The temperature study of one setting: (variants present, temperatures, cells[t][v]).

    At each temperature the summaries use only the (item, turn, seed) keys that every
    variant run at that temperature has. None when fewer than 2 temperatures or variants.
    """
    variants = [v for v in wanted if (rows["variant"] == v).any()]
    if rows["temperature"].nunique() < 2 or len(variants) < 2:
        return None
    temps = sorted(rows["temperature"].unique())
    cells = []
    for t in temps:
        at_t = rows[rows["temperature"] == t]
        part = restrict_to_common(at_t, [v for v in variants if (at_t["variant"] == v).any()])
        cells.append([variant_summary(part[part["variant"] == v]) for v in variants])
    return variants, temps, cells
