"""The report of a tree tuning (``scripts/tune_tree.py``): ``tune.md`` and ``speedup_vs_tree.png``.

Both are drawn from the report dict that ``tune.json`` stores (costs per dtype, the tau runs,
expected speedups, the picked shapes), so ``--replot`` redraws the figure from the file alone.
"""

from __future__ import annotations

from pathlib import Path

from baselines import AR
from eval.device.tuning import METHODS, label
from eval.report.markdown import markdown_table
from eval.report.plots import palette_png
from rheo.io import atomic_write_bytes


def markdown(report: dict) -> str:
    lines = [f"# Tree tuning on {report['machine']}", "",
             f"device {report['device']}, {report['threads']} thread(s), torch {report['torch']}, {report['date']}; "
             f"tau from {report['prompts']} held-out training-style prompts x {report['max_new_tokens']} tokens, "
             f"measured in {report['tau_dtype']}; {report['wall_s']:.0f} s in all.", "",
             "## Costs (median ms)", ""]
    first = next(iter(report["costs"].values()))
    header = ["dtype"] + [f"target n={n}" for n in first["target_ms"]] + ["head/layer (f=K)", "commit"]
    lines.append(markdown_table(header,
                                [[dtype] + [f"{v:.1f}" for v in c["target_ms"].values()]
                                 + [", ".join(f"{f}:{v:.1f}" for f, v in c["head_ms"].items()), f"{c['commit_ms']:.1f}"]
                                 for dtype, c in report["costs"].items()]))
    lines += ["", "AR tokens/s: " + ", ".join(f"{a['dtype']} T={a['temperature']:g}: {a['tokens_per_s']:.1f}"
                                             for a in report[AR.name]), "",
              "## Shapes (tau measured; speedup over AR in the same dtype and T)", ""]
    exp = {(e["method"], tuple(e["shape"]), e["temperature"], e["dtype"]): e for e in report["expected"]}
    body = []
    for r in report["runs"]:
        k, depth, size = r["shape"]
        cells = [f"{exp[(r['method'], (k, depth, size), r['temperature'], d)]['expected_speedup']:.2f}x"
                 for d in report["costs"]]
        body.append([r["method"], k, depth, size, f"{r['temperature']:g}", f"{r['tau']:.2f}", f"{r['core_ms']:.1f}"]
                    + cells + [f"{r['measured_speedup']:.2f}x"])
    lines.append(markdown_table(["method", "K", "depth", "R", "T", "tau", "core ms"]
                                + [f"expected {d}" for d in report["costs"]] + [f"measured ({report['tau_dtype']})"],
                                body))
    lines += ["", "## Picked (best expected tokens/s, mean over T)", ""]
    for m, b in report["best"].items():
        if b:
            lines.append(f"- {m}: K={b['shape'][0]} depth={b['shape'][1]} R={b['shape'][2]}, {b['dtype']}, "
                         f"{b['expected_tokens_per_s']:.1f} tok/s expected")
    return "\n".join(lines) + "\n"


def figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.report.analysis import display_name

    temps = report["temperatures"]
    fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4), squeeze=False)
    for ax, t in zip(axes[0], temps):
        for method, color in zip([label(n, f) for n, f in METHODS], ("tab:blue", "tab:orange")):
            for dtype, style in zip(report["costs"], ("-", "--", ":")):
                pts = sorted((e["shape"][2], e["expected_speedup"]) for e in report["expected"]
                             if e["method"] == method and e["temperature"] == t and e["dtype"] == dtype)
                if pts:
                    ax.plot(*zip(*pts), style, color=color, marker=".", label=f"{display_name(method)} expected, {dtype}")
            pts = sorted((r["shape"][2], r["measured_speedup"]) for r in report["runs"]
                         if r["method"] == method and r["temperature"] == t)
            if pts:
                ax.plot(*zip(*pts), "o", color=color, mfc="none", ms=8,
                        label=f"{display_name(method)} measured, {report['tau_dtype']}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("tree size R (drafted nodes kept)")
        ax.set_ylabel("speedup over AR, same dtype (×)")
        ax.set_title(f"T={t:g}")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    fig.suptitle(f"Speedup vs tree size: {report['machine']}", fontsize=9)
    fig.tight_layout()
    atomic_write_bytes(Path(path), palette_png(fig, dpi=110), record=True)
    plt.close(fig)
