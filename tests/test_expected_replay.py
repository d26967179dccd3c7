"""eval.measure.expected_replay on the tiny pair: the replay reproduces the committed rows token for token,
the copied stream's verification is the decoder's own, and the recorded expectation is recomputed."""

import json

import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.measure.expected_replay import main
from eval.store.storage import load_results

TINY = ["model=tiny_random", "max_new_tokens=12", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "record_expected=true", "temperature=1.0"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "out"
    entry.run(compose_config(TINY + [f"output_dir={out}", "dataset=mt_bench", "limit=2"]))
    return out


def test_replay_reproduces_every_cycle(rows, tmp_path, capsys):
    lines = tmp_path / "r.jsonl"
    assert main([str(rows), "--rows", "0", "--mc", "40", "--jsonl", str(lines), "--order", "first"]) == 0
    got = [json.loads(x) for x in lines.read_text().splitlines()]
    stored = load_results(rows)
    assert len(got) == int((stored["method"] == "rheo").sum()) >= 4 and {g["turn"] for g in got} == {0, 1}
    assert all(g["identical"] and g["replay_matches"] and g["expected_matches"] for g in got)
    assert all(g["cycles"] >= 1 and g["mc_minus_e_var"] >= 0 for g in got)
    text = capsys.readouterr().out
    assert f"committed tokens reproduced: {len(got)} / {len(got)}" in text and "Monte-Carlo − expected" in text


def test_a_new_seed_is_a_new_trajectory(rows, tmp_path):
    lines = tmp_path / "r.jsonl"
    assert main([str(rows), "--rows", "0", "--mc", "0", "--seed-offset", "1", "--jsonl", str(lines)]) == 0
    got = [json.loads(x) for x in lines.read_text().splitlines()]
    assert all(g["replay_matches"] is None for g in got) and not all(g["identical"] for g in got)
    assert all(g["cycles"] >= 1 for g in got)


def test_an_unknown_variant_is_one_line(rows, capsys):
    assert main([str(rows), "--variant", "rheo m=7"]) == 2
    err = capsys.readouterr().err
    assert "no row of variant 'rheo m=7'" in err and len(err.strip().splitlines()) == 1


def test_a_rerun_continues_from_its_lines(rows, tmp_path, monkeypatch):
    import eval.measure.expected_replay as er

    lines, out = tmp_path / "r.jsonl", tmp_path / "r.md"
    args = [str(rows), "--rows", "0", "--mc", "0", "--jsonl", str(lines), "--out", str(out)]
    assert main(args) == 0
    first = out.read_text()
    with open(lines, "a", encoding="utf-8") as f:
        f.write('{"dataset": "mt_bench", "item_id"')  # a line cut by a kill
    monkeypatch.setattr(er, "replay_row", lambda *a, **k: pytest.fail("a finished row was generated again"))
    assert main(args) == 0
    assert out.read_text() == first and first.startswith("Command: `python -m eval.measure.expected_replay ")


def test_another_dtype_is_a_replication_not_a_replay(rows, tmp_path, capsys):
    stored = load_results(rows)
    own = str(stored["dtype"].iloc[0])
    other = "bfloat16" if own == "float32" else "float32"
    lines = tmp_path / "r.jsonl"
    assert main([str(rows), "--rows", "2", "--order", "first", "--mc", "0", "--jsonl", str(lines)]) == 0
    capsys.readouterr()
    assert main([str(rows), "--rows", "2", "--order", "first", "--mc", "0", "--dtype", other,
                 "--jsonl", str(lines)]) == 0
    got = [json.loads(x) for x in lines.read_text().splitlines()]
    assert [g["dtype"] for g in got] == [own, own, other, other]  # the rows of the own dtype were not reused
    text = capsys.readouterr().out
    assert f"seed offset 0, {other}" in text and "committed tokens reproduced" not in text
    assert f"the same keys' committed rows (seed offset 0, {own})" in text
