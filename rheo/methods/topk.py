"""Top-K (EAGLE-2/3): every slot one of the node's top-K draft tokens, verified as point masses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rheo.candidates import Candidates, select_topk
from rheo.expected import dynamic_path_probs
from rheo.methods.registry import Method, label_number, register
from rheo.ot import topk_sets
from rheo.probs import DraftDist, clamp_probability, draft_distribution
from rheo.random import RandomSource
from rheo.tree import build_dynamic_tree
from rheo.verify import verify_dynamic

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.spec import Spec

DYNAMIC_FIELDS = ("k", "depth", "tree_size", "sparse_top", "rank")


def topk_candidates(dist: DraftDist, cfg: Spec, rng: RandomSource, layer: int) -> Candidates:
    """dist: [f, S] -> the top-K tokens of each node (no randomness)."""
    return select_topk(dist, cfg.k, cfg.rank, cfg.temperature)


def _set(value) -> bool:
    """A row's (or config's) option cell holds a value: not None, not NaN (pandas' empty cell)."""
    return value is not None and value == value


#: the fields option_label writes, each as ' field=value'
OPTION_FIELDS = ("rank", "probe_min")


def option_label(row) -> str:
    """' rank=q_T probe_min=0.1': the ranking and probe options where they differ from the paper's
    rule (a row keyed before they existed, or at their defaults, holds None or the default)."""
    out = ""
    rank = getattr(row, "rank", None)
    if _set(rank) and rank != "q":
        out += f" rank={rank}"
    probe_min = getattr(row, "probe_min", None)
    if _set(probe_min) and float(probe_min) > 0:
        out += f" probe_min={label_number(probe_min)}"
    return out


def topk_label(row) -> str:
    """'topk', or 'topk rank=q_T'."""
    return "topk" + option_label(row)


def check_sparse_top(cfg: Spec, slots: int, name: str) -> None:
    """The truncated draft support must hold at least the ``slots`` children of one node."""
    if cfg.sparse_top is not None and cfg.sparse_top < slots:
        raise ValueError(f"sparse_top must be None or >= {name}={slots}, got sparse_top={cfg.sparse_top}")


def _validate(cfg: Spec) -> None:
    check_sparse_top(cfg, cfg.k, "k")


def top_slots_mass(target_probs: torch.Tensor, draft_logits: torch.Tensor, sparse_top, slots: int) -> float:
    """target_probs: [V], draft_logits: [V] -> p of the draft's top-``slots`` tokens (drawable ones)."""
    dist = draft_distribution(draft_logits.to(torch.float64)[None], sparse_top)
    ids, finite = dist.ids[0][:slots], torch.isfinite(dist.logits[0][:slots])  # [<= slots]
    return clamp_probability(target_probs.to(torch.float64)[ids][finite].sum())


def topk_acceptance(target_probs: torch.Tensor, draft_logits: torch.Tensor, cfg: Spec) -> float:
    """alpha_topk = p(top-K of q): the children are point masses, one is accepted iff the target's
    sample is one of them. target_probs: [V] (tempered), draft_logits: [V]."""
    return top_slots_mass(target_probs, draft_logits, cfg.sparse_top, cfg.k)


register(Method(
    name="topk", display="Top-K", kind="dynamic", candidates=topk_candidates, build=build_dynamic_tree,
    verify=verify_dynamic, fields=DYNAMIC_FIELDS, validate=_validate, label=topk_label, acceptance=topk_acceptance,
    path_probs=dynamic_path_probs, candidate_sets=topk_sets))
