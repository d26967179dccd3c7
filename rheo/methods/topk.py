"""Top-K (EAGLE-2/3): every slot one of the node's top-K draft tokens, verified as point masses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rheo.candidates import Candidates, select_topk
from rheo.expected import dynamic_path_probs
from rheo.methods.registry import Method, register
from rheo.ot import topk_sets
from rheo.probs import DraftDist
from rheo.random import RandomSource
from rheo.tree import build_dynamic_tree
from rheo.verify import verify_dynamic

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.config import SpecConfig

DYNAMIC_FIELDS = ("k", "depth", "tree_size", "sparse_top")


def topk_candidates(dist: DraftDist, cfg: SpecConfig, rng: RandomSource, layer: int) -> Candidates:
    """dist: [f, S] -> the top-K tokens of each node (no randomness)."""
    return select_topk(dist, cfg.k)


def check_sparse_top(cfg: SpecConfig, slots: int, name: str) -> None:
    """The truncated draft support must hold at least the ``slots`` children of one node."""
    if cfg.sparse_top is not None and cfg.sparse_top < slots:
        raise ValueError(f"sparse_top must be None or >= {name}={slots}, got sparse_top={cfg.sparse_top}")


def _validate(cfg: SpecConfig) -> None:
    check_sparse_top(cfg, cfg.k, "k")


def _acceptance(target_probs, draft_logits, cfg: SpecConfig) -> float:
    from rheo.theory import node_acceptance

    return node_acceptance(target_probs, draft_logits, "topk", cfg.k, 0, cfg.temperature, cfg.sparse_top)


register(Method(
    name="topk", display="Top-K", kind="dynamic", candidates=topk_candidates, build=build_dynamic_tree,
    verify=verify_dynamic, fields=DYNAMIC_FIELDS, validate=_validate, acceptance=_acceptance,
    path_probs=dynamic_path_probs, candidate_sets=topk_sets))
