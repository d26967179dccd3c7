"""make speed-check: Top-K against an exact copy of itself, side by side; its summary is the noise floor that
every speed table states."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from eval.report import speed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import speed_check  # noqa: E402


def _rows(wall_b_factor: float) -> pd.DataFrame:
    walls = [1.0, 2.0, 1.5, 3.0, 2.5, 1.2]
    return pd.DataFrame({"dataset": ["gsm8k"] * 6, "item_id": range(6), "turn": 0, "new_tokens": 64,
                         "wall_A": walls, "wall_B": [w * wall_b_factor for w in walls]})


def test_identical_timings_give_a_ratio_of_one_and_a_slower_copy_less():
    same = speed_check.summary(_rows(1.0))
    assert same["ratio"] == pytest.approx(1.0) and same["low"] == pytest.approx(1.0) == same["high"]
    slower = speed_check.summary(_rows(1.25))  # copy B takes 25% longer: 0.8 of copy A's tok/s
    assert slower["ratio"] == pytest.approx(0.8) and slower["items"] == 6


def test_every_speed_table_states_the_noise_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("RHEO_OUT", str(tmp_path))
    committed = json.loads((ROOT / "results").joinpath(*speed.NOISE_FLOOR).read_text())
    said = speed.noise_floor()  # none of this output root's own: the committed one
    assert f"{committed['ratio']:.3f} [{committed['low']:.3f}, {committed['high']:.3f}] over {committed['items']} items" in said
    floor = tmp_path.joinpath(*speed.NOISE_FLOOR)
    floor.parent.mkdir(parents=True)
    floor.write_text(json.dumps({"ratio": 1.004, "low": 0.991, "high": 1.018, "items": 72, "device_name": "test CPU",
                                 "num_threads": 1, "date": "2026-12-07"}))
    said = speed.noise_floor()
    assert "1.004 [0.991, 1.018] over 72 items" in said and "test CPU" in said
    text = speed.speed_table(speed_check_rows())
    assert said in text


def speed_check_rows() -> pd.DataFrame:
    from eval.report.analysis import load

    return load(ROOT / "results" / "speed_xeon.parquet")


def test_the_target_runs_the_check_with_its_arguments():
    plan = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "speed-check", "ARGS=--limit 1"],
                          capture_output=True, text=True, check=True).stdout
    assert "scripts/speed_check.py --out" in plan and plan.rstrip().endswith("--limit 1")
