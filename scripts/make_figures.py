"""PNG figures of the paper's artifacts from the result parquet only.

    python scripts/make_figures.py [--results results/runs] [--out results/figures]

m-ablation (tau vs m, Top-K band), temperature study (tau vs T for Top-K and
Rheo m=0, 1, 2), per-suite bars (tau and speedup), the methods study (tau vs T
per method, experiment=methods), and the theory figure
(single-node acceptance, closed form vs Monte-Carlo). Figures whose runs are
absent are skipped, and the script says so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval import methods_study, plots  # noqa: E402
from eval.analysis import load  # noqa: E402


def make_figures(results: Path, out: Path, theory: bool = True) -> list[Path]:
    results, out = Path(results), Path(out)
    df = load(results)
    written = []
    makers = {"m-ablation": plots.m_ablation_figures, "temperature": plots.temperature_figures,
              "per-suite": plots.suite_bar_figures, "methods": methods_study.methods_figures}
    out.mkdir(parents=True, exist_ok=True)
    for what, make in makers.items():
        figs = make(df) if not df.empty else []
        if not figs:
            print(f"skipped {what} figures: the runs they need are not under {results}")
        written += [_save(fig, out / f"{name}.png") for name, fig in figs]
    if theory:
        from eval import theory as th

        fig = th.theory_figure(out.parent / "theory")
        if fig is None:
            print("skipped theory figure: rheo.theory.node_acceptance is not available")
        else:
            written.append(_save(fig, out / "theory_node_acceptance.png"))
    return written


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".tmp-{path.name}")
    fig.savefig(tmp, dpi=150, format="png")
    tmp.replace(path)
    plots.plt.close(fig)
    print(f"wrote {path}")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results/runs"))
    ap.add_argument("--out", type=Path, default=Path("results/figures"))
    ap.add_argument("--no-theory", action="store_true", help="skip the (Monte-Carlo) theory figure")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    make_figures(args.results, args.out, theory=not args.no_theory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
