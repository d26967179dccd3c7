"""The verifiers of static trees and chains (``SpecConfig.verifier``): recursive rejection sampling
(``rrs``, the default; its rule: :mod:`rheo.methods.static`) and Traversal Verification
(``traversal``, :mod:`rheo.traversal`). A verifier joins by one entry in :data:`VERIFIERS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rheo.expected import static_path_probs
from rheo.probs import target_probs
from rheo.random import RandomSource
from rheo.traversal import check_tree, traversal_path_probs, verify_traversal
from rheo.tree import BuiltTree
from rheo.verify import TreeIndex, VerifyResult, residual_draft, subtract_draft, walk_greedy

if TYPE_CHECKING:
    from rheo.spec import Spec


def verify_static(built: BuiltTree, target_logits: torch.Tensor, cfg: Spec,
                  rng: RandomSource) -> VerifyResult:
    """Recursive rejection sampling down the tree (module docstring). target_logits: [n, V]."""
    if cfg.greedy:
        return walk_greedy(TreeIndex(built), target_logits)
    tokens, parents = built.tree.tokens.tolist(), built.tree.parents.tolist()
    children: list[list[int]] = [[] for _ in parents]  # sibling (draw) order
    for child in range(1, len(parents)):
        children[parents[child]].append(child)
    vocab = target_logits.shape[1]
    path, out = [0], []
    while True:
        node = path[-1]
        r = target_probs(target_logits[node], cfg.temperature)  # [V]
        accepted = None
        if children[node]:
            q = residual_draft(built, node, vocab, r)  # q_T on [V]; loses each rejected sibling (RSD)
            for child in children[node]:
                x = tokens[child]
                q_i = q if cfg.replacement else q / q.sum()  # [V]
                if bool(rng.bernoulli((r[x] / q_i[x]).clamp(max=1.0)[None])[0]):
                    accepted = child
                    break
                r = subtract_draft(r, q_i)
                if not cfg.replacement:
                    q = q.clone()
                    q[x] = 0.0
        if accepted is None:
            out.append(int(rng.categorical(r[None])[0]))
            return VerifyResult(path=path, tokens=out, sample_accepted=len(path) - 1)
        path.append(accepted)
        out.append(tokens[accepted])


#: the verifiers a static tree or chain can be checked with (``SpecConfig.verifier``): name ->
#: (verifier, path probabilities, display suffix, tree check (replacement, branching) raising ValueError)
VERIFIERS = {
    "rrs": (verify_static, static_path_probs, "", lambda replacement, branching: None),
    "traversal": (verify_traversal, traversal_path_probs, " + Traversal", check_tree),
}


def verifier_of(cfg: Spec):
    """The VERIFIERS entry of ``cfg.verifier``; ValueError naming the choices otherwise."""
    if cfg.verifier not in VERIFIERS:
        raise ValueError(f"verifier must be one of {list(VERIFIERS)}, got {cfg.verifier!r}")
    return VERIFIERS[cfg.verifier]


def verify_any(built: BuiltTree, target_logits: torch.Tensor, cfg: Spec, rng: RandomSource) -> VerifyResult:
    """The configured verifier (``cfg.verifier``) of a static tree or chain."""
    return VERIFIERS[cfg.verifier][0](built, target_logits, cfg, rng)


def path_probs_any(built: BuiltTree, target_logits: torch.Tensor, cfg: Spec) -> torch.Tensor:
    """The configured verifier's path probabilities (rheo.expected): [n] float64."""
    return VERIFIERS[cfg.verifier][1](built, target_logits, cfg)


def verifier_tag(row) -> str:
    """' traversal' for a row (or SpecConfig) verified otherwise than by RRS; '' for RRS (and rows stored
    before the verifier column, which were all RRS)."""
    verifier = getattr(row, "verifier", None)
    return "" if verifier in (None, "rrs") or verifier != verifier else f" {verifier}"
