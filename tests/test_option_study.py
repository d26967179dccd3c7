"""eval.states.options: the envelope verdicts and the dial table computed from rows whose answers
are known (synthetic same-state rows: per-key values chosen, so every difference is exact)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from eval.states.options import PAPER_POINTS, dial_frame, dial_markdown, pooled_serving, serving_frame, serving_markdown

VARIANTS = {"topk": ("topk", 0), "rheo m=0": ("rheo", 0), "rheo m=1": ("rheo", 1),
            "rheo m=1 proxy=tempered": ("rheo", 1), "rheo m=2 proxy=tempered": ("rheo", 2)}


def _rows(values: dict, temps=(0.7,), n_keys: int = 12, mix=None) -> pd.DataFrame:
    """values: variant -> offset added to a per-key base; two states per key; small per-key noise
    that is the same for every variant (so paired differences are exact, half-widths ~0)."""
    rng = np.random.default_rng(0)
    out = []
    for t in temps:
        for key in range(n_keys):
            base = 2.0 + rng.normal(0, 0.3)
            for variant, offset in values.items():
                method, m = VARIANTS[variant]
                for state in range(2):
                    out.append({"method": method, "variant": variant, "m": m if method == "rheo" else None,
                                "proxy": "tempered" if "tempered" in variant else "rheo", "head_sha": "h",
                                "dtype": "float32", "model": "x", "driver": "topk", "temperature": t,
                                "dataset": "gsm8k", "item_id": key, "turn": 0, "seed": 0, "draft_mix": mix,
                                "expected_emitted": base + offset + (0.01 * key if variant == "rheo m=2 proxy=tempered" else 0),
                                "sampled_share": 0.1, "probe_drawn": [1, 2], "probe_kept": [1, 1],
                                "depth_accept": [0.5, 0.25, 0.1]})
    return pd.DataFrame(out)


def test_envelope_verdicts():
    rows = _rows({"topk": 0.0, "rheo m=0": 0.05, "rheo m=1": 0.10, "rheo m=1 proxy=tempered": 0.095,
                  "rheo m=2 proxy=tempered": 0.0})
    frame = serving_frame(rows).set_index("label")
    assert frame.loc["Rheo m=1", "envelope"] == "Rheo m=1"
    assert frame.loc["rheo_auto", "d_topk"] == pytest.approx(0.095)
    assert frame.loc["rheo_auto", "d_env"] == pytest.approx(-0.005)
    assert bool(frame.loc["rheo_auto", "meets"])  # within 0.01 of m=1, above m=0
    assert not bool(frame.loc["rheo_auto", "beats"])
    assert not bool(frame.loc["Rheo m=2 proxy=tempered", "meets"])  # 0.1 below m=1
    text = serving_markdown(rows)
    assert "Options meeting the envelope at every one of them: rheo_auto." in text


def test_an_option_above_both_beats_the_envelope():
    rows = _rows({"topk": 0.0, "rheo m=0": 0.05, "rheo m=1": 0.02, "rheo m=1 proxy=tempered": 0.15})
    frame = serving_frame(rows).set_index("label")
    assert frame.loc["Rheo m=1", "envelope"] == "Rheo m=0"
    assert bool(frame.loc["rheo_auto", "beats"]) and bool(frame.loc["rheo_auto", "meets"])


def test_meeting_is_required_at_every_temperature():
    rows = pd.concat([_rows({"topk": 0.0, "rheo m=0": 0.05, "rheo m=1": 0.1, "rheo m=1 proxy=tempered": 0.1}, (1.0,)),
                      _rows({"topk": 0.0, "rheo m=0": 0.05, "rheo m=1": 0.0, "rheo m=1 proxy=tempered": 0.0}, (0.5,))])
    assert "at every one of them: none." in serving_markdown(rows)


def test_pooling_over_serving_temperatures_takes_each_temperatures_envelope():
    # envelope m=1 at 0.6 and 0.8 (tempered +0.03 and -0.01 over it), m=0 at 0.7 (tempered +0.01 over it)
    rows = pd.concat([_rows({"topk": 0.0, "rheo m=0": 0.0, "rheo m=1": 0.1, "rheo m=1 proxy=tempered": 0.13}, (0.6,)),
                      _rows({"topk": 0.0, "rheo m=0": 0.2, "rheo m=1": 0.1, "rheo m=1 proxy=tempered": 0.21}, (0.7,)),
                      _rows({"topk": 0.0, "rheo m=0": 0.0, "rheo m=1": 0.1, "rheo m=1 proxy=tempered": 0.09}, (0.8,))])
    pooled = pooled_serving(rows).set_index("option")
    assert pooled.loc["rheo_auto", "prompts"] == 12
    assert pooled.loc["rheo_auto", "− envelope, mean over T"].startswith("+0.010 ± 0.000")
    assert pooled.loc["rheo_auto", "beats"] == "yes"
    assert pooled_serving(rows[rows["temperature"] != 0.8]).empty  # needs all three
    assert "### Pooled over T = 0.6, 0.7, 0.8" in serving_markdown(rows)


def test_dial_gain_and_percent():
    rows = pd.concat([_rows({"topk": 0.0, "rheo m=1": 0.2}, mix=0.0), _rows({"topk": 1.0, "rheo m=1": 1.5}, mix=1.0)])
    frame = dial_frame(rows).set_index("draft_mix")
    assert frame.loc[0.0, "gain"] == pytest.approx(0.2) and frame.loc[1.0, "gain"] == pytest.approx(0.5)
    assert frame.loc[1.0, "gain_pct"] == pytest.approx(100 * 0.5 / frame.loc[1.0, "topk"])
    text = dial_markdown(rows)
    assert all(name in text for name, _, _ in PAPER_POINTS)


ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("study,archive,table", [
    pytest.param("serving", "same_state_serving.parquet", "serving_temps.md", marks=pytest.mark.slow),  # half a minute
    ("dial", "same_state_dial.parquet", "draft_dial.md")])
def test_committed_tables_and_verdicts_are_recomputed_from_the_committed_rows(study, archive, table):
    from eval.states.options import dial_markdown, serving_markdown
    from eval.store.state_archive import load_rows

    rows = load_rows(ROOT / "results" / archive)
    assert len(rows) > 0
    text = (serving_markdown if study == "serving" else dial_markdown)(rows)
    assert text == (ROOT / "results" / "tables" / table).read_text()


def test_the_readme_shows_the_option_studies_as_committed():
    """The README's table of the serving study and docs/results.md's of both studies are generated
    blocks of their committed tables (the docs test checks that every block is current)."""
    readme, page = (ROOT / "README.md").read_text(), (ROOT / "docs" / "results.md").read_text()
    assert "<!-- table: results/tables/serving_temps.md 1 -->" in readme
    for table in ("serving_temps.md 1", "draft_dial.md 1"):  # the long form: docs/results.md
        assert f"<!-- table: results/tables/{table} -->" in page
    summary = (ROOT / "results" / "tables" / "serving_temps.md").read_text()
    assert "| T | prompts | Rheo m=1 | Rheo m=0 | rheo_auto | rheo_auto − envelope | verdict |" in summary


def test_rheo_auto_is_the_studied_tempered_rule_and_rheo_stays_the_papers():
    """method=rheo_auto composes to the option the serving study labels "rheo_auto"
    (same decoding configuration, so the same config hash at a given T); method=rheo is unchanged."""
    from eval.conf.compose import compose_config
    from eval.conf.schema import spec_config
    from rheo.config import SpecConfig

    for t in (0.0, 0.7, 1.0):
        auto = spec_config(compose_config(["method=rheo_auto", f"temperature={t}"]))
        assert auto == SpecConfig(method="rheo", m=1, proxy="tempered", temperature=t)
        paper = spec_config(compose_config(["method=rheo", f"temperature={t}"]))
        assert paper == SpecConfig(method="rheo", m=1, proxy="rheo", temperature=t)
    study = compose_config(["measure=same_state"] + ["experiment=serving_temps", "temperature=0.7"])
    compared = [SpecConfig.for_method(method=c["name"], temperature=0.7, **{f: v for f, v in dict(c).items() if f != "name"})
                for c in study.compare]
    assert spec_config(compose_config(["method=rheo_auto", "temperature=0.7"])) in compared
