"""Markdown tables of the paper's artifacts from the result parquet only.

    python scripts/make_tables.py [--results results/runs] [--out results/tables]

Writes main.md (Top-K vs Rheo m=1 per model x suite), m_ablation.md,
temperature.md, methods.md (every method at one node budget, experiment=methods),
runs.md (inventory, failures included) and theory.md (Lemma-1 worked example,
closed form vs Monte-Carlo). A table whose runs are absent is
skipped, and the script says so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval import methods_study, tables  # noqa: E402
from eval.analysis import add_variant, load  # noqa: E402
from eval.storage import load_results  # noqa: E402


def make_tables(results: Path, out: Path, theory: bool = True) -> dict[str, Path]:
    results, out = Path(results), Path(out)
    df = load(results)
    written = {}
    builders = {"main": tables.main_table, "m_ablation": tables.m_ablation_table,
                "temperature": tables.temperature_table, "methods": methods_study.methods_table}
    for name, build in builders.items():
        text = build(df) if not df.empty else None
        if text is None:
            print(f"skipped {name}.md: the runs it needs are not under {results}")
            continue
        written[name] = _write(out / f"{name}.md", text)
    everything = load_results(results, include_failed=True)
    corrupt = everything.attrs.get("corrupt_shards", [])
    if everything.empty and not corrupt:
        print(f"skipped runs.md: no rows under {results}")
    else:
        inventory = tables.runs_table(add_variant(everything)) or "## Stored rows per configuration\n\nnone\n"
        failed = int((everything["status"] == "failed").sum())
        notes = f"\nfailed rows: {failed}; corrupt shards skipped: {len(corrupt)}\n"
        notes += "".join(f"- {p}\n" for p in corrupt)
        written["runs"] = _write(out / "runs.md", inventory + notes)
    if theory:
        from eval import theory as th

        text = th.theory_markdown(out.parent / "theory")
        if text is None:
            print("skipped theory.md: rheo.theory.node_acceptance is not available")
        else:
            written["theory"] = _write(out / "theory.md", text)
    return written


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    print(f"wrote {path}")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results/runs"))
    ap.add_argument("--out", type=Path, default=Path("results/tables"))
    ap.add_argument("--no-theory", action="store_true", help="skip the (Monte-Carlo) theory table")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    make_tables(args.results, args.out, theory=not args.no_theory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
