"""Every resumable measurement reuses a stored result only when everything that decides its value is the
same (rheo.resume_key): each field of its key, changed alone, makes the result computed again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store.storage import export_results, load_results

TINY = ["model=tiny_random", "max_new_tokens=12", "method.k=4", "method.depth=2", "method.tree_size=6",
        "num_threads=1", "progress=false", "warmup=false", "record_expected=true", "temperature=1.0",
        "dataset=gsm8k", "limit=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "runs"
    for method in ("rheo", "topk"):
        entry.run(compose_config(TINY + [f"output_dir={out}", f"method={method}"]))
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_replay_of_another_variant_is_not_read_from_the_first_ones_lines(runs, tmp_path, capsys):
    from eval.measure.expected_replay import main

    lines = tmp_path / "r.jsonl"
    assert main([str(runs), "--rows", "0", "--mc", "0", "--jsonl", str(lines)]) == 0
    capsys.readouterr()
    assert main([str(runs), "--rows", "0", "--mc", "0", "--jsonl", str(lines), "--variant", "topk"]) == 0
    text = capsys.readouterr().out
    got = _lines(lines)
    assert [g["key"]["variant"] for g in got] == ["rheo m=1"] * 2 + ["topk"] * 2
    assert text.startswith("### topk: 2 rows") and "committed tokens reproduced: 2 / 2" in text


class _Counter:
    """A stand-in for replay_row that counts the rows it is asked to replay."""

    def __init__(self):
        self.calls = 0

    def __call__(self, pair, row, prompt, mc, seed_offset, dtype):
        self.calls += 1
        return dict(dataset=row["dataset"], item_id=int(row["item_id"]), turn=int(row["turn"]), seed_offset=seed_offset,
                    mc=mc, dtype=dtype, cycles=1, identical=True, replay_matches=True if mc else None,
                    expected_matches=True if mc else None, r_minus_e=0.0, mc_minus_e=0.0, mc_minus_e_var=0.0,
                    r_minus_mc=0.0)


def _edited_archive(runs: Path, path: Path, column: str, change) -> Path:
    export_results(runs, path)
    table = pq.read_table(path)
    values = [change(v) if m == "rheo" else v for v, m in zip(table.column(column).to_pylist(),
                                                               table.column("method").to_pylist())]
    pq.write_table(table.set_column(table.schema.get_field_index(column), column,
                                    pa.array(values, type=table.schema.field(column).type)), path)
    return path


@pytest.mark.parametrize("field", ["mc", "seed_offset", "dtype", "prompt", "weights", "output_tokens", "gen_seed",
                                   "config_hash"])
def test_each_field_of_a_replay_key_changed_alone_recomputes(runs, tmp_path, monkeypatch, field):
    import eval.measure.expected_replay as er

    counter = _Counter()
    monkeypatch.setattr(er, "replay_row", counter)
    lines = tmp_path / "r.jsonl"
    base = ["--rows", "0", "--mc", "0", "--jsonl", str(lines)]
    assert er.main([str(runs), *base]) == 0 and counter.calls == 2
    assert er.main([str(runs), *base]) == 0 and counter.calls == 2  # the same key: nothing again
    source, extra = str(runs), []
    if field == "mc":
        extra = ["--mc", "3"]
    elif field == "seed_offset":
        extra = ["--seed-offset", "1"]
    elif field == "dtype":
        extra = ["--dtype", "bfloat16"]
    elif field == "prompt":
        real = er.prompt_of
        monkeypatch.setattr(er, "prompt_of", lambda *a: real(*a) + [5])
    elif field == "weights":
        monkeypatch.setattr(er, "pair_weights", lambda model: {"head_sha": "another head"})
    elif field == "output_tokens":
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: v[:-1]))
    elif field == "gen_seed":
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: v + 1))
    elif field == "config_hash":  # another runs file whose rows share their places with these
        source = str(_edited_archive(runs, tmp_path / "a.parquet", field, lambda v: "0" * 12))
    assert er.main([source, *base, *extra]) == 0
    assert counter.calls == 4, field
