"""RheoSampling: m leads + one sample from the residual (ranked by a proxy) + fills;
stochastic-first verification (rheo.candidates, rheo.verify)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rheo.candidates import Candidates, select_rheo
from rheo.expected import dynamic_path_probs
from rheo.methods.registry import Method, register
from rheo.methods.topk import DYNAMIC_FIELDS, check_sparse_top
from rheo.ot import rheo_sets
from rheo.probs import DraftDist
from rheo.random import RandomSource
from rheo.tree import build_dynamic_tree
from rheo.verify import verify_dynamic

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.config import SpecConfig


def rheo_candidates(dist: DraftDist, cfg: SpecConfig, rng: RandomSource, layer: int) -> Candidates:
    """dist: [f, S] -> leads, one sample per node (one categorical draw of [f] rows), fills."""
    return select_rheo(dist, cfg.k, cfg.m, cfg.temperature, rng, cfg.proxy, cfg.proxy_value, cfg.proxy_eps)


def _validate(cfg: SpecConfig) -> None:
    if not 0 <= cfg.m <= cfg.k - 1:
        raise ValueError(f"m must be in [0, k-1] = [0, {cfg.k - 1}], got m={cfg.m}")
    check_sparse_top(cfg, cfg.k, "k")


def rheo_label(row) -> str:
    """'rheo m=1'; the lossy ablations say so."""
    label = f"rheo m={int(row.m)}"
    if row.verify_order != "stochastic_first":
        label += f" {row.verify_order}"
    if row.proxy != "rheo":
        label += f" proxy={row.proxy}"
    return label


def _acceptance(target_probs, draft_logits, cfg: SpecConfig) -> float:
    from rheo.theory import node_acceptance

    return node_acceptance(target_probs, draft_logits, "rheo", cfg.k, cfg.m, cfg.temperature, cfg.sparse_top)


register(Method(
    name="rheo", display="Rheo", kind="dynamic", candidates=rheo_candidates, build=build_dynamic_tree,
    verify=verify_dynamic, fields=DYNAMIC_FIELDS + ("m", "verify_order", "proxy"), validate=_validate,
    label=rheo_label, acceptance=_acceptance, path_probs=dynamic_path_probs, candidate_sets=rheo_sets))
