"""Root columns of the same-state rows: the closed form and the OT bound rank one candidate list."""

from __future__ import annotations

import pytest
import torch

from rheo.config import SpecConfig
from rheo.mechanism import DraftRecorder, root_columns
from rheo.methods import get_method

V, VD = 49152, 32000  # the embedded pair's sizes: a draft vocabulary mapped into the target's
ROOT = 7


def _tied_root(seed: int):
    """bf16 draft logits [VD] with four tokens tied across the k-th slot, a sorted draft-to-target map
    [VD], and target logits [1, V] preferring two of the tied tokens."""
    g = torch.Generator().manual_seed(seed)
    d2t = torch.sort(torch.randperm(V, generator=g)[:VD]).values  # [VD]
    row = (2 * torch.randn(VD, generator=g)).to(torch.bfloat16)  # [VD]
    top = torch.topk(row.float(), 12).indices
    row[top[8:12]] = float(row[top[8]])  # slots 9-12 tie: which of them is the 10th depends on the tie-break
    target = torch.full((1, V), -5.0)  # [1, V]
    target[0, d2t[top[9]]], target[0, d2t[top[11]]] = 8.0, 7.0
    recorder = DraftRecorder(None)
    recorder.rows[(ROOT,)] = row
    return recorder, target, d2t


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
def test_topk_acceptance_is_its_bound_with_tied_draft_logits(seed, temperature):
    recorder, target, d2t = _tied_root(seed)
    cfg = SpecConfig(method="topk", k=10, sparse_top=128, temperature=temperature)
    cols = root_columns(get_method("topk"), cfg, recorder, ROOT, target, d2t)
    # one fixed candidate set: the best any verifier can do is its target mass, which Top-K accepts
    assert cols["root_acceptance"] == pytest.approx(cols["root_ot_bound"], abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name,extra", [("rheo", {"m": 0}), ("rheo", {"m": 1}), ("rheo", {"m": 3}),
                                        ("chain", {"depth": 2})])
def test_no_method_beats_the_bound_of_its_own_candidate_sets(seed, name, extra):
    recorder, target, d2t = _tied_root(seed)
    for temperature in (0.5, 1.0):
        cfg = SpecConfig.for_method(method=name, k=10, sparse_top=128, temperature=temperature, **extra)
        cols = root_columns(get_method(name), cfg, recorder, ROOT, target, d2t)
        assert 0.0 <= cols["root_acceptance"] <= cols["root_ot_bound"] + 1e-6 <= 1.0 + 1e-6
