"""Inputs refused in one line that used to end in another library's error or in silence: a realized
results folder given to the same-state tables, a head of another size, an empty item list, an
argument the command line cannot take suggested as the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eval.states import tables as state_tables

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from synthetic_results import write_synthetic_results  # noqa: E402


@pytest.mark.parametrize("archive", [False, True])
def test_realized_rows_given_to_the_same_state_tables_name_their_command(tmp_path, capsys, archive):
    folder = write_synthetic_results(tmp_path / "runs", temperatures=(1.0,), seeds=(0,), ms=(1,), n_items=1)
    given = folder
    if archive:
        from eval.store.storage import export_results
        given = tmp_path / "runs.parquet"
        export_results(folder, given)
    assert state_tables.main([str(given)]) == 2
    err = capsys.readouterr().err
    assert "realized rows" in err and f"rheo tables --results {given}" in err, err
    assert len(err.strip().splitlines()) == 1
