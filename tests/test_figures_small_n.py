"""Figures say how many prompts each point rests on, draw no CI where there is none (n = 1: no
zero-width caps), and say that a speedup below 1 on a CPU is what large trees give there."""

from __future__ import annotations

import numpy as np
from matplotlib.container import ErrorbarContainer
from synthetic_results import write_synthetic_results

from eval.report import analysis, plots


def _caps(fig) -> list:
    """The y positions of every error-bar cap of a figure (NaN ones are not drawn)."""
    return [y for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)
            for cap in c.lines[1] for y in cap.get_ydata()]


def _caps_of(ax) -> list:
    return [y for c in ax.containers if isinstance(c, ErrorbarContainer) for cap in c.lines[1] for y in cap.get_ydata()]


def test_one_prompt_per_suite_shows_n_and_no_ci(tmp_path):
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k", "nq"), n_items=1, seeds=(0,),
                                   temperatures=(1.0,), ms=(1,))
    [(_, fig)] = plots.suite_bar_figures(analysis.load(runs))
    tau, speed = fig.axes
    assert [t.get_text() for t in tau.get_xticklabels()] == ["gsm8k\nn=1", "nq\nn=1"]
    assert _caps(fig) and not any(np.isfinite(_caps(fig)))  # every cap NaN: none drawn
    assert "(none under 3 items)" in speed.get_legend().get_title().get_text()
    assert "below 1 is expected on a CPU" in speed.get_title()


def test_more_prompts_draw_their_ci_and_count_them(tmp_path):
    runs = write_synthetic_results(tmp_path / "runs", suites=("gsm8k",), n_items=3, seeds=(0,),
                                   temperatures=(1.0,), ms=(0, 1))
    df = analysis.load(runs)
    [(_, fig)] = plots.suite_bar_figures(df)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["gsm8k\nn=3"]
    tau, speed = fig.axes
    assert all(np.isfinite(_caps_of(tau))) and len(_caps_of(tau)) == 2 * 2 * 1  # two variants, two caps each
    legend = speed.get_legend().get_title().get_text()
    assert "none under" not in legend and "clustered by item" in legend
    # the rows hold no run_id: their AR rows are not known to share their job, so no speedup bar
    assert "separate jobs" in legend and not any(np.isfinite(_caps_of(speed)))
    [(_, abl)] = plots.m_ablation_figures(df)
    assert "n = 3 paired prompts" in abl.axes[0].get_xlabel()
