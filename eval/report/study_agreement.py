"""Do two same-state archives agree on a method's gain over Top-K? A paired comparison over the
prompts they share.

Each archive's gain of ``variant`` at temperature T is, per prompt (suite, item, turn), the mean
over that prompt's driver states of ``expected_emitted`` of the variant minus Top-K's. Two archives
are compared prompt by prompt: ``gain_a(prompt, t_a) - mean over t_b of gain_b(prompt, t_b)`` (the
second archive's neighbouring temperatures averaged where it has no row at ``t_a``), with a 95%
Student-t interval and a one-sample t-test over the shared prompts. The same comparison at a
temperature both archives hold, where their driver states coincide, is the control: it tells a
change of code apart from a change of states.

    python -m eval.report.study_agreement results/same_state_fp32.parquet 0.75 \
        results/same_state_serving.parquet 0.7 0.8
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

PROMPT = ["dataset", "item_id", "turn"]
BASE = "topk"


@dataclass(frozen=True)
class Paired:
    """Mean, 95% half-width, p-value (t-test of mean 0) and number of prompts of a per-prompt difference."""

    mean: float
    half: float
    p: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:+.3f} ± {self.half:.3f} (p {self.p:.3f}, {self.n} prompts)"


def paired(values: pd.Series) -> Paired:
    x = values.dropna().to_numpy(dtype=float)
    n = len(x)
    half = float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n))
    return Paired(float(x.mean()), half, float(stats.ttest_1samp(x, 0.0).pvalue), n)


def gains(rows: pd.DataFrame, temperature: float, variants: Sequence[str]) -> pd.DataFrame:
    """prompt -> each variant's gain over Top-K (mean over the prompt's states held by all of them)."""
    at = rows[np.isclose(rows["temperature"], temperature)]
    wide = at.pivot_table(index=PROMPT + ["state"], columns="variant", values="expected_emitted")
    wide = wide.dropna(subset=[BASE, *variants])
    per_prompt = wide.groupby(level=PROMPT).mean()
    out = pd.DataFrame({v: per_prompt[v] - per_prompt[BASE] for v in variants})
    if len(variants) == 2:  # the ranking of the two: second minus first
        out[f"{variants[1]} - {variants[0]}"] = out[variants[1]] - out[variants[0]]
    return out


def compare(a: pd.DataFrame, t_a: float, b: pd.DataFrame, t_b: Sequence[float],
            variants: Sequence[str] = ("rheo m=0", "rheo m=1")) -> dict[str, dict[str, Paired]]:
    """variant -> {"a": a's gain at t_a, "b": b's (averaged over t_b), "a - b": paired difference},
    over the prompts both archives hold (two variants: their difference too)."""
    ga = gains(a, t_a, variants)
    gb = sum(gains(b, t, variants) for t in t_b) / len(t_b)
    shared = ga.index.intersection(gb.index)
    return {v: {"a": paired(ga.loc[shared, v]), "b": paired(gb.loc[shared, v]),
                "a - b": paired(ga.loc[shared, v] - gb.loc[shared, v])} for v in ga.columns}


def main(argv: Sequence[str]) -> int:
    a_path, t_a, b_path, *t_b = argv
    a, b = (pd.read_parquet(p, columns=PROMPT + ["state", "variant", "temperature", "expected_emitted"])
            for p in (a_path, b_path))
    for label, (ta, tb) in {"near": (float(t_a), [float(t) for t in t_b]), "control T = 1": (1.0, [1.0])}.items():
        for variant, row in compare(a, ta, b, tb).items():
            print(f"{label}: {variant}{'' if ' - ' in variant else ' - Top-K'}: a {row['a']}; b {row['b']}; a - b {row['a - b']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
