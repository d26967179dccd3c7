"""Markdown tables of the paper's artifacts from the result parquet only.

    python scripts/make_tables.py [--results outputs/runs] [--out outputs/tables]

Writes main.md (Top-K vs Rheo m=1 per model x suite), m_ablation.md,
temperature.md, methods.md (every method at one node budget, experiment=methods),
speed.md (tokens/s and speedup next to AR, `generate` reference),
phases.md (where the time goes, ms per cycle per phase), cost.md (each tree method's ms per
cycle, tau and tokens/s next to Top-K's on the same prompts), agreement.md (T=0 output vs our AR:
identity in fp32, agreement rate in bf16), acceptance.md (per-position acceptance rates and accepted-length
histograms of every tree method, from the rows' accept_lengths), runs.md (inventory, failures included) and theory.md (Lemma-1
worked example, closed form vs Monte-Carlo; its Monte-Carlo numbers are cached
in <out>/theory/). A table whose runs are absent is skipped, and the script
says what it needs (eval/report/needs.py); a copy of it that an earlier run of this script wrote into <out>
is removed (a file it did not write is left alone), so that every table it wrote there is drawn from the given
results. A results directory that does not exist (or is not one) is an error (exit status 2). The
committed results are never written (exit status 2, nothing written): `make publish` updates them.
"""

from __future__ import annotations

from pathlib import Path

from eval.report import acceptance, agreement, methods_study, speed, tables
from eval.report.analysis import add_variant, load
from eval.report.needs import TABLE_NEEDS, skipped
from eval.store.committed import Outputs, outputs_main
from eval.store.storage import load_results, require_results_dir, rows_or_archive
from rheo.cli import run_main

#: every table drawn from the rows: name -> builder (rows -> Markdown, or None without the rows it needs)
TABLES = {"main": tables.main_table, "m_ablation": tables.m_ablation_table, "temperature": tables.temperature_table,
          "methods": methods_study.methods_table, "speed": speed.speed_table, "phases": speed.phase_table,
          "cost": speed.paired_cost_table, "agreement": agreement.agreement_table, "expected": tables.expected_check_table,
          "acceptance": acceptance.acceptance_table}
#: tables another target writes into the same folder from its own results (`make methods`): never removed as stale
SHARED = ("methods",)
#: a copy of these left in the output folder by an earlier run is removed when not drawn now
RESULT_TABLES = tuple(f"{name}.md" for name in TABLES if name not in SHARED) + ("runs.md",)


def make_tables(results: Path, out: Path, theory: bool = True) -> dict[str, Path]:
    results, out = rows_or_archive(Path(results)), Path(out)
    require_results_dir(results)
    df = load(results)
    written, outputs = {}, Outputs(out)  # written at the end, after the check
    for name, build in TABLES.items():
        text = build(df) if not df.empty else None
        if text is None:
            print(skipped(f"{name}.md", TABLE_NEEDS[name], results))
            continue
        written[name] = outputs.add(out / f"{name}.md", text.encode())
    everything = load_results(results, include_failed=True)
    corrupt = everything.attrs.get("corrupt_shards", [])
    if everything.empty and not corrupt:
        print(f"skipped runs.md: no rows under {results}")
    else:
        inventory = tables.runs_table(add_variant(everything)) or "## Stored rows per configuration\n\nnone\n"
        failed = int((everything["status"] == "failed").sum())
        notes = f"\nfailed rows: {failed}; corrupt shards skipped: {len(corrupt)}\n"
        notes += "".join(f"- {p}\n" for p in corrupt)
        written["runs"] = outputs.add(out / "runs.md", (inventory + notes).encode())
    if theory:
        from eval.report import theory_checks as th
        written["theory"] = outputs.add(out / "theory.md", th.theory_markdown(out / "theory").encode())
    for path in outputs.write(RESULT_TABLES, results):
        print(f"removed stale {path}: the runs it was drawn from are not under {results}")
    return written


def main(argv=None) -> int:
    return outputs_main(argv, make_tables, "tables", __doc__.splitlines()[0])


if __name__ == "__main__":
    run_main(main)
