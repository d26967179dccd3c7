"""The report of ``scripts/gpu_check.py``: ``checks.json``, ``summary.md`` and the markdown of its sections.

:class:`Report` rewrites both files after every section, so a run cut short keeps what it
did; :func:`greedy_section` and :func:`tau_parity` turn the rows of :mod:`eval.device.devcheck`
into a section's text (and say whether a strict check failed).
"""

from __future__ import annotations

import json
from pathlib import Path

from baselines import AR
from eval.device import devcheck as dc
from eval.report.markdown import markdown_table
from rheo.io import atomic_write_text


class Report:
    """checks.json + summary.md, rewritten after each section."""

    def __init__(self, out: Path, env: dict) -> None:
        self.out, self.env, self.sections, self.data, self.failed = out, env, [], {"env": env}, []

    def add(self, name: str, data, markdown: str, failed: bool = False) -> None:
        self.data[name] = data
        self.sections.append(markdown)
        if failed:
            self.failed.append(name)
        self.write()

    def write(self) -> None:
        atomic_write_text(self.out / "checks.json", json.dumps(self.data, indent=1, default=str), record=True)
        head = "# GPU check\n\n" + "\n".join(f"- {k}: {v}" for k, v in self.env.items()) + "\n"
        verdict = f"\n**FAILED: {', '.join(self.failed)}**\n" if self.failed else ""
        atomic_write_text(self.out / "summary.md", head + verdict + "\n" + "\n\n".join(self.sections) + "\n",
                          record=True)


def md_table(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            return f"{v:.3g}"
        return "-" if v is None else str(v)
    return markdown_table(cols, [[cell(r.get(c)) for c in cols] for r in rows])


def greedy_section(rows: list[dict], dtype: str, strict: bool) -> tuple[str, bool]:
    spec_rows = [r for r in rows if r["method"] != AR.name]
    same = sum(r["identical"] for r in rows)
    agree = sum(r["agree"] for r in rows) / max(1, sum(r["ref_len"] for r in rows))
    failed = strict and any(not r["identical"] and (r["margin"] is None or r["margin"] > 0.05) for r in rows)
    title = "identity" if strict else "agreement"
    text = (f"## Greedy {title} vs generate(do_sample=False), {dtype}\n\n"
            f"{same}/{len(rows)} runs identical (Top-K + Rheo: {sum(r['identical'] for r in spec_rows)}/"
            f"{len(spec_rows)}); tokens before the first divergence / reference tokens: {agree:.3f}. "
            "margin = target's top-1 minus top-2 logit at a divergence (a near-tie is rounding, a wide margin "
            "a bug).\n\n" + md_table(rows, ["suite", "method", "ref_len", "len", "identical", "agree", "margin",
                                             "tau"]))
    return text, failed


def tau_parity(rows: list[dict], reference: dict) -> tuple[list[dict], str]:
    ref = {(r["suite"], r["method"]): r for r in reference["rows"]}
    out = []
    for r in rows:
        c = ref.get((r["suite"], r["method"]))
        if c is None or r["method"] == AR.name:
            continue
        div = dc.first_divergence(c["tokens"], r["tokens"])
        out.append({"suite": r["suite"], "method": r["method"], "tau_device": r["tau"], "tau_cpu": c["tau"],
                    "delta": r["tau"] - c["tau"], "agree": len(c["tokens"]) if div is None else div,
                    "cpu_len": len(c["tokens"])})
    mean_abs = sum(abs(r["delta"]) for r in out) / max(1, len(out))
    text = (f"## Tau parity, T=0 fp32: this device vs the CPU reference ({reference['source']})\n\n"
            f"mean |Δτ| = {mean_abs:.3f}; token agreement = tokens before the first divergence from the CPU's "
            f"output.\n\n" + md_table(out, ["suite", "method", "tau_device", "tau_cpu", "delta", "agree", "cpu_len"]))
    return out, text
