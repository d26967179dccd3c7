"""What each table and figure of scripts/make_tables.py and scripts/make_figures.py needs from the
rows, said when one is skipped (and which run makes those rows)."""

from __future__ import annotations

#: table name (<name>.md) -> the rows it is drawn from
TABLE_NEEDS = {
    "main": "Top-K and Rheo m=1 rows at T=1 on the same prompts (experiment=main_table)",
    "m_ablation": "Top-K rows and >= 3 variants in all (Top-K and at least two Rheo m values) at T=1 on the "
                  "same prompts (experiment=m_ablation)",
    "temperature": ">= 2 temperatures of >= 2 of Top-K and Rheo m=0..3 (experiment=temperature)",
    "methods": "rows of a static-tree method next to the others (experiment=methods)",
    "speed": "method rows with the AR rows timed next to them (baseline=true; experiment=speed)",
    "phases": "rows with per-phase timings (profile_phases=true, the default)",
    "cost": "Top-K and another tree method with phase timings on >= 2 shared prompts of one tree "
            "(alongside=[topk] or experiment=speed)",
    "agreement": "T=0 rows of a method and of AR on the same prompts (temperature=0 baseline=true)",
    "expected": "rows with each cycle's expected emitted tokens (record_expected=true; experiment=main_table)",
    "acceptance": "rows of a tree method (their accept_lengths)",
}
#: figure group -> the rows it is drawn from
FIGURE_NEEDS = {
    "m-ablation": TABLE_NEEDS["m_ablation"],
    "temperature": TABLE_NEEDS["temperature"],
    "per-suite": TABLE_NEEDS["main"],
    "methods": TABLE_NEEDS["methods"],
    "acceptance": TABLE_NEEDS["acceptance"],
}


def skipped(what: str, needs: str, results: object) -> str:
    """The line a skipped table or figure prints."""
    return f"skipped {what}: needs {needs}; no such rows under {results}"
