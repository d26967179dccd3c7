"""PNG figures of the paper's artifacts from the result parquet only.

    python scripts/make_figures.py [--results outputs/runs] [--out outputs/figures]

m-ablation (tau vs m, Top-K band), temperature study (tau vs T for Top-K and
Rheo m=0, 1, 2), per-suite bars (tau and speedup), the methods study (tau vs T
per method, experiment=methods), per-position acceptance rates and accepted-length histograms
(every tree method, Top-K and Rheo first), and the theory figure
(single-node acceptance, closed form vs Monte-Carlo; cached in <out>/theory/).
Figures whose runs are absent are skipped, and the script says so; figures that an
earlier run of this script wrote into <out> and that are not drawn now are removed (a file it
did not write is left alone). A results directory that does not exist (or is not one) is an
error (exit status 2). The committed results are never written (exit status 2, nothing
written): `make publish` updates them.
"""

from __future__ import annotations

from pathlib import Path

from eval.report import acceptance, methods_study, plots
from eval.report.analysis import load
from eval.report.needs import FIGURE_NEEDS, skipped
from eval.store.committed import Outputs, outputs_main
from eval.store.storage import require_results_dir, rows_or_archive
from rheo.cli import run_main
from rheo.io import check_dir, child_path

RESULT_FIGURES = ("m_ablation_*.png", "temperature_*.png", "suites_*.png", "acceptance_*.png")


def make_figures(results: Path, out: Path, theory: bool = True) -> list[Path]:
    results, out = rows_or_archive(Path(results)), Path(out)
    require_results_dir(results)
    df = load(results)
    written, outputs = [], Outputs(out)  # written at the end, after the check
    makers = {"m-ablation": plots.m_ablation_figures, "temperature": plots.temperature_figures,
              "per-suite": plots.suite_bar_figures, "methods": methods_study.methods_figures,
              "acceptance": acceptance.acceptance_figures}
    check_dir(out)
    for what, make in makers.items():
        figs = make(df) if not df.empty else []
        if not figs:
            print(skipped(f"{what} figures", FIGURE_NEEDS[what], results))
        written += [_save(outputs, fig, child_path(out, f"{name}.png")) for name, fig in figs]  # names come from rows
    if theory:
        from eval.report import theory_checks as th
        written.append(_save(outputs, th.theory_figure(out / "theory"), out / "theory_node_acceptance.png"))
    for path in outputs.write(RESULT_FIGURES, results):
        print(f"removed stale {path}: the runs it was drawn from are not under {results}")
    return written


def _save(outputs: Outputs, fig, path: Path) -> Path:
    data = plots.palette_png(fig, dpi=150)
    plots.plt.close(fig)
    return outputs.add(path, data)


def main(argv=None) -> int:
    return outputs_main(argv, make_figures, "figures", __doc__.splitlines()[0])


if __name__ == "__main__":
    run_main(main)
