"""Harness analysis: tables, figures and the notebook from result rows only."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic_results import write_synthetic_results

from baselines import AR, HF_GENERATE
from eval.report import analysis
from eval.store import storage

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from make_figures import make_figures  # noqa: E402
from make_tables import make_tables  # noqa: E402


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic_results(tmp_path_factory.mktemp("syn") / "runs")


def test_mean_ci_and_ratio_of_sums():
    mean, half, n = analysis.mean_ci([1.0, 2.0, 3.0])
    assert n == 3 and mean == pytest.approx(2.0) and half == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert math.isnan(analysis.mean_ci([5.0])[1])
    rows = pd.DataFrame({"new_tokens": [10, 30], "wall_s": [1.0, 1.0], "ar_new_tokens": [10, 30],
                         "ar_wall_s": [2.0, 4.0]})
    assert analysis.speedup_ratio_of_sums(rows) == pytest.approx((40 / 2) / (40 / 6))


@pytest.mark.slow
def test_speedup_pairs_each_row_with_its_own_ar_row(synthetic):
    df = analysis.load(synthetic)
    speed = analysis.with_speedup(df)
    assert len(speed) == (df["method"] != AR.name).sum() and speed["speedup"].notna().all()
    r = speed.iloc[0]
    ar = df[(df["method"] == AR.name) & (df["dataset"] == r["dataset"]) & (df["item_id"] == r["item_id"])
            & (df["turn"] == r["turn"]) & (df["seed"] == r["seed"]) & (df["temperature"] == r["temperature"])]
    assert len(ar) == 1
    assert r["speedup"] == pytest.approx(r["tokens_per_s"] / ar["tokens_per_s"].iloc[0])


def test_loaded_rows_are_tidy_with_speedup_as_a_column(synthetic, tmp_path):
    df = analysis.load(synthetic)
    assert len(df) == len(storage.load_results(synthetic))  # every ok row, AR rows included
    for col in analysis.INT_COLUMNS:
        assert str(df[col].dtype) == "Int64", col
    ar, spec = df[df["method"] == AR.name], df[df["method"] != AR.name]
    assert ar["m"].isna().all() and ar["speedup"].isna().all() and ar["ar_partner"].isna().all()
    assert (spec["ar_partner"] == "shared").all() and spec["speedup"].notna().all()
    r = spec.iloc[0]
    assert r["speedup"] == pytest.approx(r["tokens_per_s"] / (r["ar_new_tokens"] / r["ar_wall_s"]))
    tau_only = tmp_path / "tau"  # no AR rows (baseline=false): speedup NaN, tau usable
    write_synthetic_results(tau_only, suites=("gsm8k",), n_items=2, seeds=(0,), temperatures=(1.0,), ms=(1,))
    for shard in storage.iter_shards(tau_only):
        if storage.read_row(shard)["method"] == AR.name:
            shard.unlink()
    df = analysis.load(tau_only)
    assert len(df) == 4 and df["speedup"].isna().all() and df["tau"].notna().all()


def test_every_row_column_is_documented():
    doc = (ROOT / "docs" / "results-columns.md").read_text()
    documented = {c.strip("`") for line in doc.splitlines() if line.startswith("| `")
                  for c in line.split("|")[1].replace(" ", "").split(",")}
    missing = (set(storage.COLUMNS) | set(analysis.DERIVED_COLUMNS)) - documented
    assert not missing, f"columns without a row in docs/results-columns.md: {sorted(missing)}"


def test_tables_and_figures_from_parquet(synthetic, tmp_path, capsys):
    written = make_tables(synthetic, tmp_path / "tables", theory=False)
    # no phase columns: no phases.md
    assert set(written) == {"main", "m_ablation", "temperature", "speed", "agreement", "acceptance", "runs"}
    speed = written["speed"].read_text()  # the synthetic AR rows are shared (paired_baseline=false), and say so
    assert "AR tok/s (shared)" in speed and "(paired)" not in speed and "Rheo m=1" in speed
    main = written["main"].read_text()
    assert "τ Top-K" in main and "Δτ (paired)" in main and "**pooled**" in main and "mt_bench" in main
    assert "Rheo m=3" in written["m_ablation"].read_text()
    temps = written["temperature"].read_text()
    assert "| 0 |" in temps and "| 0.5 |" in temps and "| 1 |" in temps
    figures = make_figures(synthetic, tmp_path / "figures", theory=False)
    assert all(p.stat().st_size > 1000 and p.suffix == ".png" for p in figures)
    acceptance = [p for p in figures if p.name.startswith("acceptance_")]
    assert len(figures) - len(acceptance) == 3 and len(acceptance) == 3  # one per temperature of the tree rows


def _outside(fig) -> bool:
    """Every legend of ``fig`` lies outside the data area of every axes (rendered extents)."""
    fig.canvas.draw()
    boxes = [ax.get_window_extent() for ax in fig.axes]
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return bool(legends) and all(not leg.get_window_extent().overlaps(b) for leg in legends for b in boxes)


def test_figures_draw_only_panels_with_data_legends_outside_registry_names(tmp_path):
    from eval.report import plots
    runs = tmp_path / "runs"  # Top-K, m=0, m=1 at three temperatures; m=2, m=3 at T=1 only; no AR rows
    write_synthetic_results(runs, suites=("gsm8k",), n_items=3, seeds=(0,), temperatures=(0.0, 0.5, 1.0), ms=(0, 1))
    write_synthetic_results(runs, suites=("gsm8k",), n_items=3, seeds=(0,), temperatures=(1.0,), ms=(2, 3))
    for shard in storage.iter_shards(runs):
        if storage.read_row(shard)["method"] == AR.name:
            shard.unlink()
    df = analysis.load(runs)
    allowed = {analysis.display_name(v) for v in df["variant"].unique()} | {analysis.display_name("rheo")}
    [(_, bars)] = plots.suite_bar_figures(df)
    assert len(bars.axes) == 1 and "τ" in bars.axes[0].get_ylabel()  # no speedup panel without AR rows
    [(_, temp)] = plots.temperature_figures(df)
    points = {c.get_label(): len(c.lines[0].get_xdata()) for c in temp.axes[0].containers}  # errorbar lines
    assert points == {"Top-K": 3, "Rheo m=0": 3, "Rheo m=1": 3, "Rheo m=2 (T=1 only)": 1, "Rheo m=3 (T=1 only)": 1}
    [(_, abl)] = plots.m_ablation_figures(df)
    for fig in (bars, temp, abl):
        assert _outside(fig)
        labels = {t.get_text().removesuffix(" (T=1 only)").removesuffix(f" {plots.CI_SHORT}").removesuffix(f" ({plots.CI_SHORT})")
                  for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
        assert labels <= allowed, labels
        assert all(ax.get_xlabel() and "(" in ax.get_ylabel() for ax in fig.axes)  # labelled, with units
    paired = analysis.load(write_synthetic_results(tmp_path / "speed", suites=("gsm8k",), n_items=2, seeds=(0,),
                                                   temperatures=(1.0,), ms=(1,)))
    [(_, both)] = plots.suite_bar_figures(paired)
    assert len(both.axes) == 2 and "speedup" in both.axes[1].get_ylabel() and _outside(both)
    assert all(np.isfinite(p.get_height()) for p in both.axes[1].patches)


def test_missing_runs_are_skipped_with_a_message(tmp_path, capsys):
    only_topk = tmp_path / "runs"
    write_synthetic_results(only_topk, suites=("gsm8k",), n_items=2, seeds=(0,), temperatures=(0.5,), ms=())
    written = make_tables(only_topk, tmp_path / "tables", theory=False)
    empty = tmp_path / "empty_runs"
    storage.prepare_output_dir(empty)
    figures = make_figures(empty, tmp_path / "figures", theory=False)
    out = capsys.readouterr().out
    assert set(written) == {"runs", "speed", "acceptance"} and figures == []  # Top-K next to AR: speed, acceptance
    assert "skipped main.md" in out and "skipped phases.md" in out and "skipped m_ablation.md" in out and "skipped temperature.md" in out
    assert "skipped m-ablation figures" in out
    assert "skipped m_ablation.md: needs Top-K rows and >= 3 variants in all" in out  # what it needs, not only that
    assert all("needs " in line for line in out.splitlines() if line.startswith("skipped"))


def test_corrupt_shard_is_reported_in_the_inventory(tmp_path):
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, seeds=(0,),
                                   temperatures=(1.0,), ms=(1,))
    victim = next(storage.iter_shards(runs))
    victim.write_bytes(victim.read_bytes()[:50])
    written = make_tables(runs, tmp_path / "tables", theory=False)
    assert str(victim) in written["runs"].read_text()
    assert "corrupt shards skipped: 1" in written["runs"].read_text()


@pytest.mark.slow
def test_theory_table_and_figure(tmp_path):
    from eval.report import theory_checks as theory
    text = theory.theory_markdown(tmp_path / "theory", n_cycles=300)
    assert "Lemma 1" in text and "ad-hoc" in text
    lemma = theory.lemma1_monte_carlo(n_cycles=300)
    rheo, adhoc = lemma.iloc[0], lemma.iloc[1]
    assert rheo["TV to target"] < rheo["TV 95% noise level"] * 1.5 < adhoc["TV to target"]
    assert list((tmp_path / "theory").glob("lemma1_monte_carlo_n300.parquet"))
    node = pd.read_parquet(tmp_path / "theory" / "node_acceptance_n300.parquet")
    # seeded; a 4-sigma band (false-alarm rate ~5e-4 over the 8 cases) around the closed form
    sigma = (node["closed_form"] * (1 - node["closed_form"]) / node["n_cycles"]) ** 0.5
    assert ((node["monte_carlo"] - node["closed_form"]).abs() <= 4 * sigma + 1e-9).all(), node
    fig = theory.theory_figure(tmp_path / "theory", n_cycles=300)
    assert len(fig.axes) == 2 and all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    names = {t.get_text() for t in fig.axes[1].get_legend().get_texts()}
    assert {"Top-K", "Rheo m=0", "Rheo m=1", "Rheo m=2", "RSD (3)", "SpecInfer (3)", "Chain d=1"} <= names
    assert not names & {"topk", "rheo"}


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("script", ["make_tables", "make_figures"])
def test_missing_or_foreign_results_dir_is_an_error(tmp_path, capsys, script):
    import importlib

    main = importlib.import_module(script).main
    assert main(["--results", str(tmp_path / "no_such_dir"), "--out", str(tmp_path / "o"), "--no-theory"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert main(["--results", str(tmp_path / "plain"), "--out", str(tmp_path / "o"), "--no-theory"]) == 2
    assert "not a rheo results directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


@pytest.mark.slow
def test_stale_tables_and_figures_of_an_earlier_run_are_removed(synthetic, tmp_path, capsys):
    out_t, out_f = tmp_path / "tables", tmp_path / "figures"
    make_tables(synthetic, out_t, theory=False)
    make_figures(synthetic, out_f, theory=False)
    (out_t / "notes.md").write_text("mine")  # not ours: left alone
    only_topk = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, seeds=(0,),
                                        temperatures=(0.5,), ms=())
    written = make_tables(only_topk, out_t, theory=False)
    left = sorted(p.name for p in out_t.glob("*.md"))
    # Top-K + AR rows only: the inventory, the speed table (AR timed next to Top-K) and Top-K's acceptance
    # are drawn from them; every table of the earlier run that needs other methods is gone
    assert left == ["acceptance.md", "notes.md", "runs.md", "speed.md"]
    assert set(written) == {"runs", "speed", "acceptance"}
    drawn = make_figures(only_topk, out_f, theory=False)  # Top-K's acceptance figure only
    assert [p.name for p in drawn] == [p.name for p in out_f.glob("*.png")]
    assert len(drawn) == 1 and drawn[0].name.startswith("acceptance_")
    assert "removed stale" in capsys.readouterr().out


@pytest.mark.slow
def test_theory_cache_stays_inside_the_output_folder(synthetic, tmp_path, monkeypatch):
    from eval.report import theory_checks as theory
    seen = []
    monkeypatch.setattr(theory, "theory_markdown", lambda folder: seen.append(folder) or "## Theory\n")
    monkeypatch.setattr(theory, "theory_figure", lambda folder: seen.append(folder) or plt_figure())
    make_tables(synthetic, tmp_path / "a" / "tables")
    make_figures(synthetic, tmp_path / "a" / "figures")
    assert seen == [tmp_path / "a" / "tables" / "theory", tmp_path / "a" / "figures" / "theory"]


def plt_figure():
    from eval.report.plots import plt

    return plt.figure()


def test_agreement_table_counts_tokens_before_the_first_divergence():
    from eval.report.agreement import agreement_table, first_divergence

    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2

    def row(method, item, turn, tokens, chash, paired=None, t=0.0):
        return {"model": "m", "device": "cpu", "dtype": "bfloat16", "max_new_tokens": 8, "dataset": "mt_bench",
                "item_id": item, "turn": turn, "seed": 0, "temperature": t, "method": method,
                "variant": method, "k": None if method == AR.name else 4, "depth": 3, "tree_size": 6,
                "sparse_top": 128, "output_tokens": tokens, "config_hash": chash, "paired_with": paired}

    ar0, ar1 = [1, 2, 3, 4], [5, 6, 7, 8]
    rows = [row(AR.name, 0, 0, ar0, "a", paired="t"), row(AR.name, 0, 1, ar1, "a", paired="t"),
            row("topk", 0, 0, [1, 2, 3, 4], "t"), row("topk", 0, 1, [5, 6, 0, 0], "t"),  # turn 2 parts at 2
            row(AR.name, 1, 0, ar0, "a", paired="t"), row(AR.name, 1, 1, ar1, "a", paired="t"),
            row("topk", 1, 0, [1, 9, 9, 9], "t"), row("topk", 1, 1, ar1, "t"),  # turn 1 differs: turn 2 skipped
            row("topk", 2, 0, [1, 2, 3, 4], "t", t=1.0)]  # T>0: not compared
    text = agreement_table(pd.DataFrame(rows))
    line = next(ln for ln in text.splitlines() if ln.startswith("| Top-K") or ln.startswith("| topk"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # compared: item 0 turns 0 and 1, item 1 turn 0 -> 3 outputs, 1 identical; agree = 4 + 2 + 1 of 12
    assert cells[2:5] == ["3", "1/3", f"{7 / 12:.3f}"]
    assert cells[5] == "1 / 1.5"
    assert agreement_table(pd.DataFrame([r for r in rows if r["method"] != AR.name])) is None


def test_generate_reference_rows_get_their_own_variant(tmp_path):
    """`method=hf_generate` rows (the speed reference) load next to registered methods."""
    df = pd.DataFrame([{"method": HF_GENERATE.name, "m": None, "k": None, "depth": None, "tree_size": None,
                        "sparse_top": None, "target_path": None, "head_path": None},
                       {"method": AR.name, "m": None, "k": None, "depth": None, "tree_size": None,
                        "sparse_top": None, "target_path": None, "head_path": None}])
    assert analysis.add_variant(df)["variant"].tolist() == [HF_GENERATE.name, AR.name]


@pytest.mark.slow
def test_results_archive_reads_like_its_directory(synthetic, tmp_path):
    """scripts/export_results.py packs the shards into one parquet; tables from it are the same."""
    from export_results import main as export_main

    archive = tmp_path / "runs.parquet"
    assert export_main(["--results", str(synthetic), "--out", str(archive)]) == 0
    a = make_tables(synthetic, tmp_path / "from_dir", theory=False)
    b = make_tables(archive, tmp_path / "from_archive", theory=False)
    assert set(a) == set(b) and len(a) >= 5
    for name in a:
        assert a[name].read_text() == b[name].read_text()
    assert len(storage.load_results(archive, include_failed=True)) == len(storage.load_results(synthetic, include_failed=True))
    assert export_main(["--results", str(synthetic), "--out", str(tmp_path / "x.csv")]) == 2
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(storage.OutputDirError, match="unreadable"):
        storage.load_results(tmp_path / "junk.parquet")
    with pytest.raises(FileNotFoundError, match="archive"):
        storage.require_results_dir(tmp_path / "missing.parquet")
