"""scripts/eval_draft_head.py's pooling: tau per group, paired Rheo - Top-K at T=1, --merge."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("eval_draft_head", ROOT / "scripts" / "eval_draft_head.py")
edh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(edh)


def row(method, temp, prompt, seed, tokens, cycles, group="heldout", kind="chat", **extra):
    return dict(group=group, kind=kind, prompt=prompt, method=method, temperature=temp, seed=seed,
                tokens=tokens, cycles=cycles, tau=round(tokens / cycles, 3), **extra)


ROWS = [row("topk", 0.0, 0, 0, 120, 40, greedy_identical=True), row("topk", 0.0, 1, 0, 60, 30, greedy_identical=False),
        row("topk", 1.0, 0, 0, 100, 50), row("rheo", 1.0, 0, 0, 100, 40),
        row("topk", 1.0, 1, 0, 100, 50), row("rheo", 1.0, 1, 0, 100, 50),
        row("topk", 0.0, 0, 0, 30, 10, group="suites", kind="gsm8k"), row("topk", 0.0, 1, 0, 30, 20, group="suites", kind="gsm8k")]


def test_summary_pools_tokens_over_cycles_and_pairs_by_prompt_and_seed():
    s = edh.summarise(ROWS, Namespace(), 1.0)
    pooled = {(r["group"], r["method"], r["temperature"]): r for r in s["pooled"]}
    assert pooled[("heldout", "topk", 0.0)]["tau_pooled"] == pytest.approx(180 / 70, abs=1e-3)
    assert pooled[("heldout", "topk", 0.0)]["greedy_identical"] == "1/2"
    assert s["paired_t1"]["pairs"] == 2 and s["paired_t1"]["mean"] == pytest.approx((2.5 - 2.0 + 0.0) / 2, abs=1e-3)
    assert s["per_suite"] == [dict(suite="gsm8k", items=2, tau=pytest.approx(60 / 30, abs=1e-3))]
    assert "paired by (prompt, seed)" in edh.markdown(s)


def _part(path: Path, rows, head: str, wall_s: float) -> None:
    path.mkdir()
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "summary.json").write_text(json.dumps(dict(config=dict(head=head), wall_s=wall_s)))


def _merge(tmp_path, *names):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_draft_head.py"), "--merge",
                           *[str(tmp_path / n) for n in names], "--out", str(tmp_path / "all")],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_merge_pools_the_rows_of_several_runs_and_keeps_the_measured_head(tmp_path):
    _part(tmp_path / "a", ROWS[:4], "heads/new", 10.0)
    _part(tmp_path / "b", ROWS[4:], "heads/new", 20.0)
    assert _merge(tmp_path, "a", "b").returncode == 0
    merged = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert merged["paired_t1"]["pairs"] == 2 and len((tmp_path / "all" / "rows.jsonl").read_text().splitlines()) == 8
    assert merged["config"]["head"] == "heads/new" and merged["parts_wall_s"] == [10.0, 20.0]


@pytest.mark.slow
def test_merge_refuses_runs_of_different_heads(tmp_path):
    _part(tmp_path / "a", ROWS[:4], "heads/new", 10.0)
    _part(tmp_path / "b", ROWS[4:], "heads/old", 20.0)
    done = _merge(tmp_path, "a", "b")
    assert done.returncode != 0 and "different heads" in done.stderr
