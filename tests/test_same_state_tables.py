"""Same-state tables and figures on a synthetic rows frame of known values: registry labels,
paired Student-t CIs over keys (not states), the power column, the m ablation, the root and probe
columns, every figure, and the command line (one-line refusals, committed files kept)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.states.mech_plots as mech_plots
import eval.states.plots as plots
from eval.states.labels import baseline_label, ordered_labels, with_labels
from eval.states.outputs import joined_rows
from eval.states.stats import keys_for, m_ablation, mechanism_table, paired_differences, probe_share
from eval.states.tables import main, report_markdown
from eval.store.state_archive import ROW_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
T95 = {1: 12.706, 3: 3.182}  # two-sided 95% Student-t quantiles, df = 1, 3
DYN = dict(k=4, depth=3, tree_size=8, sparse_top=32)
CONFIGS = {  # config hash -> (method, variant, parameters, offset of its expected emitted over Top-K)
    "h_topk": ("topk", "topk", DYN, 0.0),
    "h_m0": ("rheo", "rheo m=0", {**DYN, "m": 0}, 0.05),
    "h_m1": ("rheo", "rheo m=1", {**DYN, "m": 1}, 0.10),
    "h_m2": ("rheo", "rheo m=2", {**DYN, "m": 2}, 0.12),
    "h_rsd": ("static", "static rsd (2,1)", {"branching": [2, 1], "replacement": False}, -0.05),
    "h_si": ("static", "static specinfer (2,1)", {"branching": [2, 1], "replacement": True}, -0.10),
    "h_chain": ("chain", "chain d=3", {"depth": 3}, -0.30),
}
KEYS = [("gsm8k", 0), ("gsm8k", 1), ("alpaca", 0), ("alpaca", 1)]
KEY_SHIFT = {"h_m1": [0.1, 0.3, -0.1, 0.5], "h_m2": [0.0, 0.2, 0.2, 0.4]}  # per-key differences of their own
STATE_NOISE = [0.3, -0.45, 0.15]  # sums to 0: each key's mean over its states is exact


def _row(chash: str, temperature: float, key: int, state: int) -> dict:
    method, variant, params, offset = CONFIGS[chash]
    suite, item = KEYS[key]
    value = 2.0 + key * 0.1 + offset + KEY_SHIFT.get(chash, [0.0] * 4)[key] + STATE_NOISE[state]
    is_root = method != "static"
    gap = 0.02 * (key + 1) if method == "rheo" else 0.0
    return {**dict.fromkeys(ROW_SCHEMA.names), **params, "model": "toy", "dataset": suite, "item_id": item,
            "turn": 0, "seed": 0, "temperature": temperature, "head_sha": "abc123", "max_new_tokens": 16,
            "driver": "topk", "driver_hash": "h_topk", "state": state, "method": method, "variant": variant,
            "config_hash": chash, "expected_emitted": value, "kept_nodes": 3,
            "depth_accept": [0.6, 0.3, 0.1] if method != "chain" else [0.5, 0.2, 0.05], "sampled_share": 0.2,
            "probe_drawn": [1, 2, 2] if method == "rheo" else [0, 0, 0],
            "probe_kept": [1, 1, 0] if method == "rheo" else [0, 0, 0],
            "calib_n": [2, 0, 0, 0, 0, 0, 0, 0, 0, 1], "calib_q": [0.1, 0, 0, 0, 0, 0, 0, 0, 0, 0.95],
            "calib_p": [0.06, 0, 0, 0, 0, 0, 0, 0, 0, 0.9],
            "root_acceptance": 0.5 if is_root else None, "root_ot_bound": (0.5 + gap) if is_root else None}


def synthetic(temps=(0.0, 1.0), configs=tuple(CONFIGS)) -> pd.DataFrame:
    return pd.DataFrame([_row(c, t, k, s) for t in temps for c in configs for k in range(4) for s in range(3)])


def test_labels_come_from_the_registry_and_tell_variants_apart():
    rows = with_labels(synthetic())
    assert ordered_labels(rows) == ["Top-K", "Rheo m=0", "Rheo m=1", "Rheo m=2", "RSD (2,1)", "SpecInfer (2,1)",
                                    "Chain d=3"]
    assert dict(zip(rows["label"], rows["family"])) == {
        "Top-K": "dynamic", "Rheo m=0": "dynamic", "Rheo m=1": "dynamic", "Rheo m=2": "dynamic",
        "RSD (2,1)": "static", "SpecInfer (2,1)": "static", "Chain d=3": "chain"}
    wide = synthetic(configs=("h_topk",)).assign(k=6, config_hash="h_topk6")  # a second Top-K budget
    both = with_labels(pd.concat([synthetic(configs=("h_topk", "h_m1")), wide]))
    assert set(both["label"]) == {"Top-K k=4", "Top-K k=6", "Rheo m=1 k=4"}  # budgets differ: every tree names its k
    assert baseline_label(both) == "Top-K k=4"  # the driver's own config
    assert with_labels(synthetic().assign(head_sha=None))["head_sha"].unique().tolist() == ["none"]


def _t_ci(values: list[float]) -> tuple[float, float]:
    s = pd.Series(values)
    return float(s.mean()), T95[len(values) - 1] * float(s.std(ddof=1)) / math.sqrt(len(values))


def test_paired_difference_is_a_t_interval_over_keys():
    table = paired_differences(synthetic()).set_index(["temperature", "suite", "label"])
    per_key = [0.10 + d for d in KEY_SHIFT["h_m1"]]
    mean, half = _t_ci(per_key)
    got = table.loc[(1.0, "pooled", "Rheo m=1")]
    assert got["keys"] == 4 and got["diff_keys"] == 4
    assert got["diff"] == pytest.approx(mean, abs=1e-12) and got["half_width"] == pytest.approx(half, abs=1e-12)
    assert got["keys_for_003"] == math.ceil(4 * (half / 0.03) ** 2)
    gsm = table.loc[(1.0, "gsm8k", "Rheo m=1")]  # two keys: no interval (eval.report.analysis.MIN_CI_N)
    assert gsm["diff"] == pytest.approx(0.3) and math.isnan(gsm["half_width"])
    chain = table.loc[(0.0, "pooled", "Chain d=3")]  # a constant difference: a zero-width interval
    assert chain["diff"] == pytest.approx(-0.30) and chain["half_width"] == pytest.approx(0.0, abs=1e-12)
    top = table.loc[(0.0, "pooled", "Top-K")]
    assert top["mean"] == pytest.approx(2.15) and math.isnan(top["diff"])
    assert top["mean_hw"] == pytest.approx(_t_ci([2.0, 2.1, 2.2, 2.3])[1])


def test_power_column_arithmetic():
    assert keys_for(0.06, 10) == 40
    assert keys_for(0.03, 50) == 50
    assert keys_for(0.0301, 100) == 101  # 100.67, rounded up
    assert keys_for(0.01, 9) == 2  # already finer than 0.03: at least two keys
    assert math.isnan(keys_for(math.nan, 10)) and math.isnan(keys_for(0.1, 1))


def test_m_ablation_is_paired_against_m1():
    table = m_ablation(synthetic()).set_index(["temperature", "suite", "label"])
    assert set(table.index.get_level_values("label")) == {"Rheo m=0", "Rheo m=1", "Rheo m=2"}
    mean, half = _t_ci([0.02 + b - a for a, b in zip(KEY_SHIFT["h_m1"], KEY_SHIFT["h_m2"])])
    got = table.loc[(1.0, "pooled", "Rheo m=2")]
    assert got["diff"] == pytest.approx(mean) and got["half_width"] == pytest.approx(half)
    assert m_ablation(synthetic(configs=("h_topk", "h_m1"))).empty


def test_root_and_probe_columns():
    mech = mechanism_table(synthetic()).set_index(["temperature", "label"])
    rheo = mech.loc[(1.0, "Rheo m=1")]
    assert rheo["root_gap"] == pytest.approx(0.05) and rheo["root_gap_hw"] == pytest.approx(_t_ci(
        [0.02, 0.04, 0.06, 0.08])[1])
    assert rheo["root_below"] == 0 and rheo["root_states"] == 12
    assert rheo["probe_survival"] == pytest.approx([1.0, 0.5, 0.0])
    assert probe_share(rheo["probe_drawn"], rheo["probe_survival"]) == pytest.approx(1 / 5 * 2)
    assert rheo["calib_target"][0] == pytest.approx(0.03) and math.isnan(rheo["calib_target"][1])
    static = mech.loc[(1.0, "RSD (2,1)")]
    assert static["root_states"] == 0 and math.isnan(static["root_gap"])
    below = synthetic(configs=("h_topk",)).assign(root_ot_bound=0.49)  # an "upper bound" below the acceptance
    assert mechanism_table(below)["root_below"].tolist() == [12, 12]


def test_markdown_names_methods_and_power():
    text = report_markdown(synthetic())
    assert "| RSD (2,1) | 4 |" in text and "SpecInfer (2,1)" in text and "keys for ±0.03" in text
    assert "## Rheo m vs Rheo m=1" in text and "Student-t" in text and "| 0/12 |" in text


@pytest.mark.parametrize("make", [plots.fig_m_ablation, plots.fig_temperature, plots.fig_families,
                                  mech_plots.fig_depth, mech_plots.fig_probe, mech_plots.fig_calibration,
                                  mech_plots.fig_root_gap])
@pytest.mark.slow
def test_every_figure_draws_a_png(make, tmp_path):
    data = make(synthetic())
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    (tmp_path / "f.png").write_bytes(data)


@pytest.mark.slow
def test_figures_the_rows_cannot_draw_are_left_out():
    one_t = synthetic(temps=(1.0,), configs=("h_topk", "h_rsd"))
    drawn, skipped = plots.figures(one_t)
    assert set(drawn) == {"depth", "calibration", "root_gap"}
    assert {s.split(":")[0] for s in skipped} == {"m_ablation", "temperature", "families", "probe"}
    assert set(plots.figures(synthetic())[0]) == {"m_ablation", "temperature", "families", "depth", "probe",
                                                  "calibration", "root_gap"}


def _archive(tmp_path: Path, rows: pd.DataFrame) -> Path:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pandas(rows, schema=ROW_SCHEMA, preserve_index=False), path)
    return path


@pytest.mark.slow
def test_cli_writes_tables_and_figures_and_removes_only_its_own_stale_ones(tmp_path):
    from eval.store.committed import Outputs

    archive = _archive(tmp_path, synthetic(configs=("h_topk", "h_m1", "h_m2")))
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "ss_families.png").write_bytes(b"mine")  # one family now: not drawn, but not ours
    (tmp_path / "figs" / "ss_other.png").write_bytes(b"keep")
    args = [str(archive), "--out", str(tmp_path / "t.md"), "--figures", str(tmp_path / "figs" / "ss_")]
    assert main(args) == 0
    assert "Rheo m=2" in (tmp_path / "t.md").read_text()
    names = sorted(p.name for p in (tmp_path / "figs").iterdir() if not p.name.startswith("."))
    drawn = ["ss_calibration.png", "ss_depth.png", "ss_m_ablation.png", "ss_probe.png", "ss_root_gap.png",
             "ss_temperature.png"]
    assert names == sorted(drawn + ["ss_families.png", "ss_other.png"])
    earlier = Outputs(tmp_path / "figs")  # as an earlier report that drew the families figure
    earlier.add(tmp_path / "figs" / "ss_families.png", b"drawn")
    earlier.write((), archive)
    assert main(args) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir() if not p.name.startswith(".")) == \
        sorted(drawn + ["ss_other.png"])


def test_also_joins_rows_once(tmp_path):
    both = synthetic(temps=(1.0,), configs=("h_topk", "h_m1"))
    hot = _archive(tmp_path, both)
    cold = tmp_path / "cold.parquet"  # another temperature, plus a copy of one state of the first file
    extra = pd.concat([synthetic(temps=(0.0,), configs=("h_topk", "h_m1")), both.iloc[:1]], ignore_index=True)
    pq.write_table(pa.Table.from_pandas(extra, schema=ROW_SCHEMA, preserve_index=False), cold)
    joined = joined_rows(hot, [cold])
    assert len(joined) == 2 * len(both) and sorted(joined.temperature.unique()) == [0.0, 1.0]
    assert main([str(hot), "--also", str(cold), "--out", str(tmp_path / "t.md")]) == 0
    assert "T = 0" in (tmp_path / "t.md").read_text() and "T = 1" in (tmp_path / "t.md").read_text()


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval.states.tables", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


@pytest.mark.slow
def test_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    proc = _cli(tmp_path / "none")  # the real entry point: one line, status 2, no traceback
    assert proc.returncode == 2 and "not a same-state results directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    archive = _archive(tmp_path, synthetic(configs=("h_topk",)))
    for args, needle in (([tmp_path / "none.parquet"], "does not exist"),
                         ([archive, "--figures", ""], "--figures is empty"),
                         ([archive, "--out", archive / "t.md"], "is a file, not a folder"),
                         ([archive, "--bogus"], "unrecognized arguments")):
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:  # argparse's refusals (rheo.cli.fail)
            code = stop.code
        err = capsys.readouterr().err
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_cli_keeps_committed_files(tmp_path, capsys):
    archive = _archive(tmp_path, synthetic(configs=("h_topk", "h_m1")))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "t.md").write_text("committed\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "t.md"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "t"], check=True)
    assert main([str(archive), "--out", str(repo / "t.md")]) == 2
    err = capsys.readouterr().err
    assert "is committed" in err and "make publish" in err and len(err.strip().splitlines()) == 1
    assert (repo / "t.md").read_text() == "committed\n"
    assert main([str(archive), "--out", str(tmp_path / "t.md")]) == 0
    assert "Rheo m=1" in (tmp_path / "t.md").read_text()
