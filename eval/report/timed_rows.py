"""Which stored times a speed table may use: a row whose timed generation compiled graphs (column
``compiles`` > 0, ``engine=graphs`` before its warm-up reached a bucket) timed the compiler, not the
decoder. Its tau still counts; its times are left out, with a warning that says how many rows and
which (:func:`eval.report.analysis.load` applies it to every frame it returns).
"""

from __future__ import annotations

import logging

import pandas as pd

log = logging.getLogger("eval.report.analysis")

#: a row's times, which a compile inside its timed generation makes a measurement of the compiler
TIMING_COLUMNS = ("wall_s", "tokens_per_s", "phase_draft_ms", "phase_build_ms", "phase_score_ms", "phase_verify_ms",
                  "phase_commit_ms", "phase_other_ms", "phase_prefill_ms")


def without_compile_times(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the times of rows whose timed generation compiled graphs (``compiles`` > 0) left out
    (NaN; their tau still counts), and a warning saying how many."""
    if "compiles" not in df.columns:
        return df
    hit = pd.to_numeric(df["compiles"], errors="coerce").fillna(0).to_numpy() > 0
    if not hit.any():
        return df
    df = df.copy()
    for col in TIMING_COLUMNS:
        if col in df.columns:
            df[col] = df[col].astype(float).where(~hit)
    first = df[hit].iloc[0]
    log.warning("%d row(s) compiled graphs inside their timed generation (column compiles): their times are left "
                "out of every speed table (tau still counts), e.g. config %s %s item %s turn %s; rerun them with "
                "warmup=true after deleting their shards", int(hit.sum()), first["config_hash"], first["dataset"],
                first["item_id"], first["turn"])
    return df
