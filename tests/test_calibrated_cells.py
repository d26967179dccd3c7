"""eval.states.calibrated: Rheo's gain over Top-K with the head as trained and as calibrated, from
synthetic same-state rows whose per-prompt values are chosen, so every paired difference is exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from eval.states.calibrated import calibrated_rows, gain_frame, gain_markdown, main, trained_rows

VARIANTS = {"topk": ("topk", None, "rheo"), "rheo m=0": ("rheo", 0, "rheo"), "rheo m=1": ("rheo", 1, "rheo"),
            "rheo m=1 proxy=tempered": ("rheo", 1, "tempered")}


def _rows(offsets: dict, t: float, mix, draft_temp, n_keys: int = 10, seed: int = 1) -> pd.DataFrame:
    """offsets: variant -> value added to a per-prompt base shared by every variant of the run."""
    rng = np.random.default_rng(seed)
    out = []
    for key in range(n_keys):
        base = 2.0 + rng.normal(0, 0.3)
        for variant, offset in offsets.items():
            method, m, proxy = VARIANTS[variant]
            out.append({"method": method, "variant": variant, "m": m, "proxy": proxy, "adapt": None,
                        "head_sha": "h", "dtype": "float32", "model": "x", "driver": "topk", "temperature": t,
                        "dataset": "gsm8k", "item_id": key, "turn": 0, "seed": 0, "draft_mix": mix,
                        "draft_temp": draft_temp, "state": 0, "expected_emitted": base + offset})
    return pd.DataFrame(out)


TRAINED = {"topk": 0.0, "rheo m=0": 0.05, "rheo m=1": 0.10, "rheo m=1 proxy=tempered": 0.12}
CALIBRATED = {"topk": 0.02, "rheo m=0": 0.10, "rheo m=1": 0.11, "rheo m=1 proxy=tempered": 0.12}


def _approx(x: float):
    return pytest.approx(x, abs=1e-9)


def test_the_gain_change_is_paired_over_prompts_and_other_dial_values_are_left_out():
    dial = pd.concat([_rows(TRAINED, 0.7, 0.0, None), _rows({k: 1.0 for k in TRAINED}, 0.7, 0.5, None)])
    cal = _rows(CALIBRATED, 0.7, 0.0, 1.07, seed=2)  # other states: another per-prompt base
    assert len(trained_rows(dial)) == 40 and len(calibrated_rows(dial)) == 0
    frame = gain_frame(trained_rows(dial), calibrated_rows(cal)).set_index("setting")
    assert list(frame.index) == ["Rheo m=0", "Rheo m=1", "rheo_auto"]
    assert frame.loc["Rheo m=0", "gain_trained"] == _approx(0.05)
    assert frame.loc["Rheo m=0", "gain_calibrated"] == _approx(0.08)
    assert frame.loc["Rheo m=0", "change"] == _approx(0.03)
    assert frame.loc["rheo_auto", "change"] == _approx(-0.02)
    assert frame.loc["Rheo m=0", "change_hw"] < 1e-9 and frame.loc["Rheo m=0", "prompts"] == 10
    assert frame.loc["Rheo m=0", "tau_change_hw"] > 0.01  # the setting's own tau is not paired on states
    text = gain_markdown(frame.reset_index(), [1.07])
    assert "(1.07)" in text and "+0.030 ± 0.000" in text


def test_the_command_writes_the_table_and_refuses_a_run_without_calibrated_rows(tmp_path, capsys):
    trained, cal = tmp_path / "trained.parquet", tmp_path / "cal.parquet"
    _rows(TRAINED, 1.0, 0.0, None).to_parquet(trained)
    _rows(CALIBRATED, 1.0, None, 1.07).to_parquet(cal)
    assert main([str(trained), str(trained)]) == 2
    assert "holds no same-state rows of that head" in capsys.readouterr().err
    assert main([str(trained), str(cal), "--out", str(tmp_path / "t.md")]) == 0
    assert "| 1 | Rheo m=1 | 10 |" in (tmp_path / "t.md").read_text()
