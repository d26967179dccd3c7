"""Gain vs draft quality (eval.states.head_quality): heads matched by fingerprint, the paired difference
per (head, temperature), one-line refusals."""

import json
import subprocess

import pandas as pd
import pytest
from test_same_state_tables import KEY_SHIFT, _archive, synthetic

from eval.states.head_quality import gain_table, main, read_top1


def _two_heads() -> pd.DataFrame:
    weak = synthetic(temps=(0.0, 1.0), configs=("h_topk", "h_m1"))
    strong = weak.copy()
    strong["head_sha"] = "def456"
    strong.loc[strong["method"] == "rheo", "expected_emitted"] += 0.2  # a larger gain with the better head
    return pd.concat([weak, strong], ignore_index=True)


def _top1(tmp_path, lines):
    path = tmp_path / "top1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


HEADS = [dict(head="x/weak", head_sha="abc123", held_out_top1=[0.35, 0.2]),
         dict(head="x/strong", head_sha="def456", held_out_top1=[0.65, 0.5])]


def test_one_point_per_head_and_temperature(tmp_path):
    table = gain_table(_two_heads(), read_top1(_top1(tmp_path, HEADS)))
    assert len(table) == 4 and list(table["top1"]) == [0.35, 0.65, 0.35, 0.65]
    gain = 0.10 + sum(KEY_SHIFT["h_m1"]) / 4  # the synthetic m=1 offset and per-key shifts
    weak, strong = table[table["head"] == "weak"], table[table["head"] == "strong"]
    assert weak["diff"].tolist() == pytest.approx([gain, gain])
    assert strong["diff"].tolist() == pytest.approx([gain + 0.2, gain + 0.2])
    assert (table["keys"] == 4).all() and (table["half_width"] > 0).all()


def test_cli_writes_table_and_figure_and_refuses_in_one_line(tmp_path, capsys):
    rows = _archive(tmp_path, _two_heads())
    assert main([str(rows), "--top1", str(_top1(tmp_path, HEADS)), "--out", str(tmp_path / "g.md"),
                 "--figure", str(tmp_path / "g.png")]) == 0
    assert "| strong | 0.650 | 1 | 4 |" in (tmp_path / "g.md").read_text()
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\"head\": 1}\n")
    for top1, needle in ((bad, "not a train_draft.py --eval-only line"),
                         (_top1(tmp_path, [dict(head="y", head_sha="zzz", held_out_top1=[0.5])]), "no head of")):
        assert main([str(rows), "--top1", str(top1)]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1


def test_a_committed_figure_stops_the_table_too(tmp_path, capsys):
    """Every output is checked against git before any is written (one plan for both folders)."""
    rows = _archive(tmp_path, _two_heads())
    repo = tmp_path / "repo"
    (repo / "figs").mkdir(parents=True)
    (repo / "figs" / "g.png").write_bytes(b"committed")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "figs/g.png"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "t"], check=True)
    args = [str(rows), "--top1", str(_top1(tmp_path, HEADS)), "--out", str(tmp_path / "tables" / "g.md"),
            "--figure", str(repo / "figs" / "g.png")]
    assert main(args) == 2
    assert "is committed" in capsys.readouterr().err
    assert not (tmp_path / "tables" / "g.md").exists() and (repo / "figs" / "g.png").read_bytes() == b"committed"
    assert main(args[:-1] + [str(tmp_path / "figs" / "g.png")]) == 0  # elsewhere: both written
    assert (tmp_path / "tables" / "g.md").is_file() and (tmp_path / "figs" / "g.png").read_bytes()[:4] == b"\x89PNG"
