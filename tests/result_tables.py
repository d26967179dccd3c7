"""Reading the committed result tables (results/tables/*.md) and formatting numbers as the README writes them."""

from __future__ import annotations

import re
from pathlib import Path

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def tables(path: Path) -> list[tuple[str, list[dict]]]:
    """(the last '### ' heading above it, its rows as {column: cell}) for every Markdown table of ``path``."""
    out, heading, lines = [], "", path.read_text().splitlines() + [""]
    block: list[str] = []
    for line in lines:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            header = [c.strip() for c in block[0].strip("|").split("|")]
            rows = [dict(zip(header, (c.strip() for c in row.strip("|").split("|")))) for row in block[2:]]
            out.append((heading, rows))
            block = []
        if line.startswith("### "):
            heading = line[4:]
    return out


def headed_table(path: Path, heading_has: str, column: str = "") -> tuple[str, list[dict]]:
    """(heading, rows) of the one table of ``path`` whose heading contains ``heading_has`` (and that has
    the column ``column``, when given)."""
    found = [(h, rows) for h, rows in tables(path) if heading_has in h and (not column or column in rows[0])]
    assert len(found) == 1, f"{path}: {len(found)} tables under a heading with {heading_has!r}"
    return found[0]


def table(path: Path, heading_has: str, column: str = "") -> list[dict]:
    return headed_table(path, heading_has, column)[1]


def setting(heading: str) -> dict:
    """The tree and the token budget a table's heading names ('K=10 depth=8 R=60 top-128, max_new_tokens=32')."""
    found = dict(re.findall(r"\b(K|depth|R|top|max_new_tokens)[=-](\d+)", heading))
    return {k: int(v) for k, v in found.items()}


def row(rows: list[dict], **match) -> dict:
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, f"{len(hits)} rows match {match}"
    return hits[0]


def numbers(cell: str) -> list[float]:
    """The numbers of a cell: '1.97 ± 0.15' -> [1.97, 0.15]; '+0.101 +- 0.080' -> [0.101, 0.08]."""
    return [float(x) for x in NUMBER.findall(cell.replace("+-", "±"))]


def apart(cell: str) -> str:
    """A cost table's cell of rows from separate jobs ('3.27 (separate jobs)') as the prose writes it ('3.27')."""
    assert cell.endswith(" (separate jobs)"), cell
    return cell.removesuffix(" (separate jobs)")


def signed(x: float, digits: int) -> str:
    """+0.10 / −0.010, with the minus sign the README's prose uses."""
    return f"{x:+.{digits}f}".replace("-", "−")


def diff_ci(cell: str, digits: int) -> str:
    """A same-state table's 'diff vs topk' cell ('+0.101 +- 0.080') as the README writes it ('+0.10 ± 0.08')."""
    diff, half = numbers(cell)
    return f"{signed(diff, digits)} ± {half:.{digits}f}"


def short_p(p: float) -> str:
    """5.7e-09 -> '6e-9' (one significant digit)."""
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def in_words(x: float) -> str:
    """A count or share as the prose says it: 3 -> 'three'; 0.34 -> 'a third'."""
    if x >= 1:
        return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}[round(x)]
    shares = {"a quarter": 1 / 4, "a third": 1 / 3, "half": 1 / 2, "two thirds": 2 / 3}
    return min(shares, key=lambda w: abs(shares[w] - x))


def replications(root: Path) -> list[tuple[float, float, str, int]]:
    """(per-cycle realized - expected, its 95% half-width, label, rows) of every new-trajectory run of
    eval.measure.expected_replay over all the main table's Rheo keys (not the replays of committed rows)."""
    out = []
    for path in sorted((root / "results/tables").glob("expected_replay*.md")):
        text = path.read_text()
        head = re.search(r"rheo m=1: (\d+) rows, seed offset (\d+)(?:, (\w+))?,", text)
        if head is None or "committed tokens reproduced" in text:
            continue
        value = re.search(r"summed over a row's cycles .*?per cycle ([+-]\d\.\d+) ± (\d\.\d+)", text)
        out.append((float(value.group(1)), float(value.group(2)),
                    f"{head.group(3) or 'bf16'} +{head.group(2)}".replace("bfloat16", "bf16"), int(head.group(1))))
    assert len({g[2] for g in out}) == len(out) >= 3
    return sorted(out, key=lambda g: g[2])


def pooled_diffs(path: Path) -> dict:
    """{T: {method: (diff, half-width)}} of the pooled paired tables of a same-state table file."""
    out = {}
    for heading, rows in tables(path):
        if "diff vs Top-K" in rows[0] and "suite" not in rows[0]:
            t = heading.rsplit("T = ", 1)[1]
            out[t] = {r["method"]: numbers(r["diff vs Top-K"]) for r in rows if r["diff vs Top-K"] != "-"}
    return out


def pooled_keys(path: Path) -> dict:
    """{T: keys} of the pooled paired tables of a same-state table file (one key count per T)."""
    out = {}
    for heading, rows in tables(path):
        if "diff vs Top-K" in rows[0] and "suite" not in rows[0]:
            counts = {r["keys"] for r in rows}
            assert len(counts) == 1, f"{heading}: methods with different key counts {counts}"
            out[heading.rsplit("T = ", 1)[1]] = counts.pop()
    return out


def pm(cell) -> str:
    return f"{signed(cell[0], 3)} ± {cell[1]:.3f}"


def option_studies(root: Path) -> list[str]:
    """The README's four beyond-the-paper rows, from the serving study's summary and pooled tables."""
    text = (root / "results/tables/serving_temps.md").read_text()
    summary = {r["T"]: r for r in rows_after(text, "| T | prompts | Rheo m=1 |")}
    pooled = {r["option"]: r for r in rows_after(text, "| option | prompts | − envelope, mean over T |")}
    m1, auto = (lambda t: summary[t]["Rheo m=1"]), (lambda t: summary[t]["rheo_auto"])
    meets = sum(r["verdict"].startswith("meets") for r in summary.values())
    return [f"Rheo m=1 − Top-K at T = 0.6 / 0.7 / 0.8: {m1('0.6')} / {m1('0.7')} / {m1('0.8')} (T = 1: {m1('1')})",
            f"Rheo m=1 − Top-K at T = 0 / 0.25: {m1('0')} / {m1('0.25')}; rheo_auto: {auto('0')} / {auto('0.25')}",
            f"rheo_auto meets the envelope at all {'seven' if meets == len(summary) == 7 else meets} T",
            f"pooled over T = 0.6-0.8 per prompt: {pooled['rheo_auto']['− envelope, mean over T']}",
            dial_row(root)]


def dial_row(root: Path) -> str:
    """The README's dial numbers, from the dial study's summary table."""
    text = (root / "results/tables/draft_dial.md").read_text()
    rows = {(r["T"], r["a"]): r for r in rows_after(text, "| T | a | prompts | E[τ] Top-K |")}
    tau = lambda t, a: f"{numbers(rows[(t, a)]['E[τ] Top-K'])[0]:.2f}"  # noqa: E731

    def gain(t: str, a: str, col: str) -> str:
        mean, _, pct, _ = numbers(rows[(t, a)][f"{col} − Top-K"])
        return f"{signed(mean, 3)} ({signed(pct, 1)}%)"

    m1, auto = "Rheo m=1", "rheo_auto"
    return (f"Top-K E[τ] {tau('1', '0')} → {tau('1', '1')} at T = 1, {tau('0.7', '0')} → {tau('0.7', '1')} at T = 0.7; "
            f"at T = 0.7 Rheo m=1 gain {gain('0.7', '0', m1)} → {gain('0.7', '1', m1)}, rheo_auto "
            f"{gain('0.7', '0', auto)} → {gain('0.7', '1', auto)}")


def rows_after(text: str, header: str) -> list[dict]:
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = [c.strip() for c in lines[at].strip("|").split("|")]
    out = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        out.append(dict(zip(names, (c.strip() for c in line.strip("|").split("|")))))
    return out


def cycle_cost(root: Path) -> list[str]:
    """The README's launch sentence: per target call on the tiny 32-layer pair at T = 1 (make cycle-cost)."""
    import pandas as pd

    rows = pd.read_parquet(root / "results/tables/cycle_cost_tiny32_cpu.parquet").query("temperature == 1.0")
    topk, rheo = (rows[rows.method == m].iloc[0] for m in ("Top-K", "Rheo m=1"))
    return [f"Top-K adds {topk.beyond_forward:,.0f} ops and {topk.syncs:.1f} host reads to the target's forward, "
            f"Rheo m=1 {rheo.beyond_forward:,.0f} and {rheo.syncs:.1f}: at τ = 5, {5 * topk.ar_ops / topk.ops:.2f}x "
            f"and {5 * rheo.ar_ops / rheo.ops:.2f}x"]
