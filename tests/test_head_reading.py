"""eval.measure.head_reading: the readings table, its resume (rows already measured are not measured
again under their keys: no model is loaded), its one-line refusals, and the committed table against its archive."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from eval.measure.head_reading import main, markdown, reading_table
from eval.prompts.suites import SUITE_FILES, load_suite

ROOT = Path(__file__).resolve().parents[1]


def _rows(mix: float, t: float, accept: float) -> list[dict]:
    items = [item for suite in SUITE_FILES for item in load_suite(ROOT / "data" / "benchmarks", suite, limit=1)]
    return [{"prompt_set": "benchmarks", "draft_mix": mix, "temperature": t, "suite": item.suite, "item_id": item.item_id, "new_tokens": 8,
             "cycles": 4, "m0_share": 0.75, "root_accept": accept + 0.01 * (i % 2), "tau": 2.0}
            for i, item in enumerate(items)]


def test_the_table_holds_each_cells_means_and_the_dials_best_setting():
    rows = pd.DataFrame(_rows(0.0, 1.0, 0.4) + _rows(1.0, 1.0, 0.9))
    table = reading_table(rows, {(1.0, 0.0): "m=1", (1.0, 1.0): "m=0"}).set_index("a")
    assert table.loc["0", "prompts"] == 6 and table.loc["0", "root_accept"].startswith("0.405 ± ")
    assert table.loc["1", "dial's best fixed setting"] == "m=0" and table.loc["1", "m0_share"] == "0.750 ± 0.000"
    assert "(6 prompts per cell). 8 new tokens" in markdown(rows, {}, "cmd")
    held = pd.DataFrame(_rows(0.0, 1.0, 0.5)).assign(prompt_set="held-out")
    both = reading_table(pd.concat([rows, held]), {(1.0, 0.0): "m=1"})
    assert both["prompt set"].tolist() == ["benchmarks", "benchmarks", "held-out"]
    assert both["dial's best fixed setting"].tolist() == ["m=1", "-", "-"]  # the dial was measured on benchmarks


def test_rows_already_measured_are_read_not_measured_again(tmp_path, monkeypatch):
    import eval.measure.head_reading as hr
    import eval.measure.pairs

    monkeypatch.setattr(eval.measure.pairs, "load_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    items = {(i.suite, i.item_id): i for suite in SUITE_FILES for i in load_suite(ROOT / "data" / "benchmarks", suite,
                                                                                   limit=1)}
    weights = hr.pair_weights()
    old = [{**r, "key": hr.cell_key(0.0, 1.0, "benchmarks", r["suite"], r["item_id"], items[r["suite"], r["item_id"]],
                                    8, weights)} for r in _rows(0.0, 1.0, 0.4)]  # stored with their keys
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in old))
    out = tmp_path / "t.md"
    assert main(["--mix", "0", "--temperatures", "1", "--per-suite", "1", "--heldout", "0", "--new-tokens", "8", "--rows", str(rows),
                 "--dial", str(tmp_path / "none"), "--archive", str(tmp_path / "a.parquet"), "--out", str(out)]) == 0
    assert "| benchmarks | 1 | 0 | 6 | 0.405 ± " in out.read_text()
    archive = pd.read_parquet(tmp_path / "a.parquet")
    assert len(archive) == 6 and "key" not in archive.columns  # the archive holds the readings, not the keys


@pytest.mark.parametrize("bad", [["--mix", "1.5"], ["--temperatures", "0"], ["--heldout", "-1"]])
def test_a_bad_value_is_refused_in_one_line(bad, tmp_path):
    with pytest.raises(SystemExit, match="--mix takes values in"):
        main(bad + ["--rows", str(tmp_path / "r.jsonl")])


def test_the_committed_table_is_the_one_its_archive_gives():
    from eval.measure.head_reading import dial_best
    from eval.store.state_archive import load_rows

    rows = pd.read_parquet(ROOT / "results" / "head_reading.parquet")
    committed = (ROOT / "results" / "tables" / "head_reading.md").read_text()
    best = dial_best(load_rows(ROOT / "results" / "same_state_dial.parquet"))
    lines = reading_table(rows, best).to_dict("records")
    assert len(lines) == 14  # benchmarks: T = 0.7 and 1 x a = 0, 0.25, 0.5, 0.75, 1; held-out: a = 0 and 1
    for line in lines:
        assert "| " + " | ".join(str(v) for v in line.values()) + " |" in committed, line


def test_the_algorithm_pages_reading_table_rounds_the_committed_means():
    text = (ROOT / "docs" / "algorithm.md").read_text()
    block = text.split("| T | root_accept at a = 0 (this head) |")[1].split("\n\n")[0]
    rows = pd.read_parquet(ROOT / "results" / "head_reading.parquet").query("prompt_set == 'benchmarks'")
    means = rows.groupby(["temperature", "draft_mix"])["root_accept"].mean()
    from eval.measure.head_reading import dial_best
    from eval.store.state_archive import load_rows

    best = dial_best(load_rows(ROOT / "results" / "same_state_dial.parquet"))
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        t = float(cells[0])
        for a, cell in zip((0.0, 0.25, 0.5, 0.75, 1.0), cells[1:]):
            assert cell.split()[0] == f"{means[(t, a)]:.2f}" and f"({best[(t, a)]}" in cell, (t, a, cell)


def test_the_readme_and_algorithm_page_quote_the_committed_readings():
    rows = pd.read_parquet(ROOT / "results" / "head_reading.parquet").query("prompt_set == 'benchmarks'")
    accept = rows.groupby(["temperature", "draft_mix"])["root_accept"].mean()
    share = rows.groupby(["temperature", "draft_mix"])["m0_share"].mean()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"the embedded head: {accept[(0.7, 0.0)]:.2f} at T = 0.7, {accept[(1.0, 0.0)]:.2f} at T = 1" in readme
    spans = [f"{100 * min(share[(t, a)] for t in (0.7, 1.0)):.0f}-{100 * max(share[(t, a)] for t in (0.7, 1.0)):.0f}%"
             for a in (0.0, 1.0)]
    assert f"({spans[0]} of cycles for the embedded head, {spans[1]} for the target itself)" in readme
    algorithm = " ".join((ROOT / "docs" / "algorithm.md").read_text().split())
    assert f"the rule drafts {spans[0]} of its cycles with m=0 for the embedded head and {spans[1]} for" in algorithm


def test_the_algorithm_page_quotes_the_held_out_readings():
    rows = pd.read_parquet(ROOT / "results" / "head_reading.parquet").query("prompt_set == 'held-out'")
    accept = rows.groupby(["temperature", "draft_mix"])["root_accept"].mean()
    algorithm = " ".join((ROOT / "docs" / "algorithm.md").read_text().split())
    assert (f"the embedded head reads {accept[(0.7, 0.0)]:.2f} at T = 0.7 and {accept[(1.0, 0.0)]:.2f} at T = 1, "
            f"the target itself {accept[(0.7, 1.0)]:.2f} and {accept[(1.0, 1.0)]:.2f}") in algorithm


@pytest.mark.slow
def test_rows_outside_the_asked_cells_are_left_out_of_the_table(tmp_path):
    rows = tmp_path / "rows.jsonl"
    extra = [dict(r, new_tokens=16) for r in _rows(0.0, 1.0, 0.9)] + _rows(0.5, 1.0, 0.9)  # other length, other a
    rows.write_text("".join(json.dumps(r) + "\n" for r in _rows(0.0, 1.0, 0.4) + extra))
    assert main(["--mix", "0", "--temperatures", "1", "--per-suite", "1", "--heldout", "0", "--new-tokens", "8",
                 "--rows", str(rows), "--dial", str(tmp_path / "none"), "--archive", str(tmp_path / "a.parquet"),
                 "--out", str(tmp_path / "t.md")]) == 0
    kept = pd.read_parquet(tmp_path / "a.parquet")
    assert len(kept) == 6 and set(kept["draft_mix"]) == {0.0} and set(kept["new_tokens"]) == {8}


def test_the_level_rules_mark_is_halfway_between_the_held_out_readings():
    """rheo_level's LEVEL: the midpoint of the trained head's and the target's mean root acceptance on the
    held-out prompts, averaged over T = 0.7 and 1, to 0.05 (no benchmark prompt enters it)."""
    from rheo.adaptive import LEVEL

    rows = pd.read_parquet(ROOT / "results" / "head_reading.parquet").query("prompt_set == 'held-out'")
    means = rows.groupby(["temperature", "draft_mix"])["root_accept"].mean()
    mids = [(means[(t, 0.0)] + means[(t, 1.0)]) / 2 for t in (0.7, 1.0)]
    assert round(20 * sum(mids) / len(mids)) / 20 == pytest.approx(LEVEL)
