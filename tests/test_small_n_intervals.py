"""Intervals say only what their rows can: at n = 2 prompts no 95% interval is printed (the cell says
"n too small") or drawn, and no drawn interval of tau reaches below 1 (a decoder emits at least one
token per target call)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import synthetic_results
from matplotlib.container import ErrorbarContainer
from synthetic_results import write_synthetic_results

from eval.report import analysis, plots, tables


def _caps(fig) -> list[float]:
    return [y for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)
            for cap in c.lines[1] for y in cap.get_ydata()]


def test_two_values_give_no_interval_and_the_cell_says_so():
    mean, half, n = analysis.mean_ci([3.74 - 0.83, 3.74 + 0.83])
    assert n == 2 and mean == pytest.approx(3.74) and math.isnan(half)
    assert analysis.fmt(mean, half) == "3.74 (n too small)"
    one = analysis.mean_ci([2.0])
    assert math.isnan(one[1]) and analysis.fmt(one[0], one[1]) == "2.00"  # n = 1: the n column says it
    three = analysis.mean_ci([1.0, 2.0, 3.0])
    assert analysis.fmt(*three[:2]) == f"2.00 ± {4.303 / math.sqrt(3):.2f}"


def test_tables_of_two_prompts_print_no_interval(tmp_path):
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, seeds=(0,),
                                   temperatures=(1.0,), ms=(0, 1))
    body = tables.main_table(analysis.load(runs)).split("|---")[-1]
    assert body.count("(n too small)") == 6 and " ± " not in body  # tau of both, their difference; suite and pooled


def test_two_prompts_draw_no_bar(tmp_path):
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=2, seeds=(0,),
                                   temperatures=(1.0,), ms=(0, 1))
    figures = plots.all_figures(analysis.load(runs))
    assert figures and all(not np.isfinite(_caps(fig)).any() for _, fig in figures)
    [(_, bars)] = plots.suite_bar_figures(analysis.load(runs))
    assert "(none under 3 items)" in bars.axes[-1].get_legend().get_title().get_text()


def test_no_drawn_interval_of_tau_goes_below_one(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic_results, "FAKE_TAU", {"topk": 1.35, "rheo": 1.35})  # near 1, spread +-0.3
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=3, seeds=(0,),
                                   temperatures=(0.5, 1.0), ms=(0, 1))
    df = analysis.load(runs)
    spec = df[df["method"] != "ar"]
    unclipped = [m - h for _, g in spec.groupby(["variant", "temperature"]) for m, h, _ in [analysis.mean_ci(g["tau"])]]
    assert min(unclipped) < 1  # the rows' t-interval reaches below 1: the figures must cut it there
    figures = plots.all_figures(df)
    caps = [y for _, fig in figures for y in _caps(fig)]
    drawn = [y for y in caps if np.isfinite(y)]  # speedups over AR rows of separate jobs draw no bar (NaN caps)
    assert len(drawn) >= len(caps) / 2 and min(drawn) >= 1.0 and min(drawn) == pytest.approx(1.0)
    bounds = plots.tau_bounds([{"tau": 1.2, "tau_ci": 0.5}, {"tau": 2.0, "tau_ci": analysis.NoInterval()}])
    assert bounds[0].tolist() == pytest.approx([1.0, 1.7]) and np.isnan(bounds[1]).all()
