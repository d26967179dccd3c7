"""A same-state archive named under the output root that the user never wrote is read from the committed
one, the whole way: its schema check reads the file it loads, not the missing path."""

from __future__ import annotations

import pandas as pd

from eval.store.state_archive import load_rows
from rheo.paths import REPO_ROOT


def test_an_archive_under_the_output_root_falls_back_to_the_committed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("RHEO_OUT", str(tmp_path))
    mine = tmp_path / "same_state_heads.parquet"
    assert not mine.exists()
    rows = load_rows(mine)
    committed = pd.read_parquet(REPO_ROOT / "results" / "same_state_heads.parquet")
    assert len(rows) == len(committed) > 0
    assert set(rows["config_hash"]) == set(committed["config_hash"])
