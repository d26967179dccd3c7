"""Traversal Verification (Weng, Hu et al. 2025): sequence-level acceptance, from the leaves up.

Recursive rejection sampling (:mod:`rheo.methods.static`) walks down from the root and
accepts token by token: once a node is rejected, its whole subtree is lost. Traversal
Verification walks the tree in post-order (a node's children, in draw order, each with its
whole subtree, then the node itself) and asks at each node whether to accept the *sequence*
from the root to it. Terms, at a node ``u`` with target distribution ``P_u`` (at temperature
T) and the draft distribution ``q_u`` its children were drawn from:

* **weight** ``w``: the probability with which the sequence root..u is still to be accepted;
  the root's is 1, a child ``c`` with token ``x`` gets ``w_c = min(1, w_u P_u(x) / q_u(x))``
  from its parent's state at the moment the child is visited;
* **rejecting a child** (its whole subtree was visited and nothing accepted) updates the
  parent's state with the mass its draw left uncovered, ``m = max(w_u P_u - q_u, 0)``,
  ``M = sum(m)``: ``w_u <- M / (M + 1 - w_u)`` and ``P_u <- m / M``;
* **accepting** ``u`` (after every child was rejected): a coin with probability ``w_u``;
  the bonus token is drawn from ``P_u`` as it is then (the target itself at a leaf, the
  residual above a rejected child). Rejecting ``u`` hands the search to its parent.

Why it is exact (the induction the paper's proof makes; the tests enumerate it): a node
entered with state ``(w, P)`` whose children are drawn *independently* from ``q`` emits
``x`` followed by a target continuation with probability ``w P(x)``, and rejects with
``1 - w``. A child drawn from ``q`` covers ``min(w P, q)`` of that mass; conditioned on the
child being rejected (probability ``1 - w + M``), the rest is exactly the updated
``(w', P')``. The step needs the next sibling to be a fresh draw from the same ``q`` whatever
the rejected one was: chains (one child) and i.i.d. siblings (SpecInfer's scheme). Siblings
drawn without replacement (RSD) break it; :func:`check_tree` refuses them and the tests
show the loss. At the root ``w = 1``, so something is always emitted. On a chain this is
the optimal (block) verification: its expected accepted length is at least recursive
rejection sampling's on every draft.

**Point masses.** A child that was not drawn (a deterministic lead, kind LEAD) is a draft that
puts all its mass on its token: ``w_c = w_u P_u(x)`` and, on rejection, ``P_u`` loses ``x``.
The same induction holds for any set of point masses, even one chosen after the drawn siblings
(only the drawn children must be fresh draws), so a node may hold a drawn child followed by
deterministic ones (:mod:`rheo.methods.rheo_seq`, Rheo's lead-plus-sample construction).

**T = 0**: children are the draft's top tokens and verification is greedy (as for RRS).

The verifier (:func:`verify_traversal`) draws one coin per visited node and one categorical
for the bonus; :func:`traversal_path_probs` follows the same walk without coins and returns
the probability that the accepted path holds each node (:mod:`rheo.expected`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from rheo.candidates import SAMPLE
from rheo.expected import greedy_path_probs
from rheo.probs import NonFiniteLogitsError, nan_cause, tempered
from rheo.random import RandomSource
from rheo.tree import BuiltTree
from rheo.verify import TreeIndex, VerifyResult, walk_greedy

if TYPE_CHECKING:
    from rheo.spec import Spec

F64 = torch.float64


def check_tree(replacement: bool, branching: tuple[int, ...]) -> None:
    """Refuse, in one line, a static tree Traversal Verification is not exact on: siblings drawn
    without replacement."""
    if not replacement and max(branching) > 1:
        raise ValueError("verifier='traversal' needs siblings drawn i.i.d. (replacement=true): its proof "
                         "needs each sibling to be a fresh draw from the draft whatever the earlier ones were, "
                         "which draws without replacement (RSD) are not")


class _Walk:
    """The post-order walk shared by the verifier and the path probabilities."""

    def __init__(self, built: BuiltTree, target_logits: torch.Tensor, temperature: float) -> None:
        self.built, self.logits, self.temperature = built, target_logits, temperature
        parents = built.tree.parents.tolist()
        self.tokens = built.tree.tokens.tolist()
        self.drawn = (built.kind == SAMPLE).tolist()  # drawn from the parent's draft row, else a point mass
        self.children: list[list[int]] = [[] for _ in parents]  # draw order
        for child in range(1, len(parents)):
            self.children[parents[child]].append(child)
        self.vocab = target_logits.shape[1]

    def target(self, node: int) -> torch.Tensor:
        """P at ``node``: [V] float64, the target at T."""
        row = self.logits[node].to(F64)
        p = tempered(row, self.temperature)
        if torch.isnan(p).any():
            raise NonFiniteLogitsError(nan_cause(row[None], self.temperature))
        return p

    def draft(self, node: int) -> Optional[torch.Tensor]:
        """q of ``node``'s expansion on the target vocabulary: [V] float64 (None: no drawn child)."""
        if self.built.resid_probs is None or not any(self.drawn[c] for c in self.children[node]):
            return None
        row = int(self.built.exp_row[node])
        full = torch.zeros(self.vocab, dtype=F64, device=self.logits.device)
        return full.scatter_(0, self.built.resid_ids[row], self.built.resid_probs[row].to(F64))

    def child_draft(self, child: int, q: Optional[torch.Tensor]) -> torch.Tensor:
        """What ``child`` was drafted from: its parent's row ``q`` if drawn, else a point mass on its token."""
        if self.drawn[child]:
            return q
        return torch.zeros(self.vocab, dtype=F64, device=self.logits.device).index_fill_(
            0, torch.tensor([self.tokens[child]], device=self.logits.device), 1.0)


def child_weight(w: float, p: torch.Tensor, q: torch.Tensor, token: int) -> float:
    """w_c = min(1, w P(x) / q(x)) of a child with token x; p, q: [V]."""
    return min(1.0, w * float(p[token]) / float(q[token]))


def reject_child(w: float, p: torch.Tensor, q: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The parent's state (w, P [V]) after a child drawn from q [V] was rejected with its subtree."""
    left = (w * p - q).clamp(min=0)  # [V]
    mass = float(left.sum())
    denom = mass + (1.0 - w)  # at the root (w = 1) exactly mass, so w stays 1
    if denom <= 0.0:  # w = 1 and P = q: a child cannot be rejected; nothing to update
        return w, p
    return mass / denom, (left / mass if mass > 0 else p)


def verify_traversal(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec",
                     rng: RandomSource) -> VerifyResult:
    """Traversal Verification of a chain or i.i.d. tree (module docstring). target_logits: [n, V]."""
    if cfg.greedy:
        return walk_greedy(TreeIndex(built), target_logits)
    walk = _Walk(built, target_logits, cfg.temperature)

    def visit(node: int, w: float) -> Optional[tuple[int, torch.Tensor]]:
        p = walk.target(node)
        if walk.children[node]:
            q = walk.draft(node)
            for child in walk.children[node]:
                q_c = walk.child_draft(child, q)
                got = visit(child, child_weight(w, p, q_c, walk.tokens[child]))
                if got is not None:
                    return got
                w, p = reject_child(w, p, q_c)
        if node == 0 or w >= 1.0 or bool(rng.bernoulli(torch.tensor([w], dtype=F64))[0]):  # the root: w = 1
            return node, p
        return None

    node, p = visit(0, 1.0)
    path = [node]
    parents = built.tree.parents.tolist()
    while path[-1] != 0:
        path.append(parents[path[-1]])
    path.reverse()
    out = [walk.tokens[v] for v in path[1:]] + [int(rng.categorical(p[None])[0])]
    return VerifyResult(path=path, tokens=out, sample_accepted=len(path) - 1)


def traversal_path_probs(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec") -> torch.Tensor:
    """[n] float64: the probability that Traversal Verification's accepted path holds each node
    (root: 1). The walk of :func:`verify_traversal` with every coin weighed instead of drawn."""
    if cfg.greedy:
        return greedy_path_probs(built, target_logits)
    walk = _Walk(built, target_logits, cfg.temperature)
    n = len(walk.tokens)
    final = torch.zeros(n, dtype=F64)  # probability that the walk ends at each node

    def visit(node: int, w: float, entered: float) -> float:
        """Adds to ``final`` below ``node``; returns the probability it rejects, given entered."""
        alive = 1.0  # every earlier child rejected
        if walk.children[node]:
            p, q = walk.target(node), walk.draft(node)
            for child in walk.children[node]:
                q_c = walk.child_draft(child, q)
                alive *= visit(child, child_weight(w, p, q_c, walk.tokens[child]), entered * alive)
                w, p = reject_child(w, p, q_c)
        final[node] = entered * alive * w
        return alive * (1.0 - w)

    visit(0, 1.0, 1.0)
    return _subtree_sums(built.tree.parents.cpu(), built.tree.depths.cpu(), final)


def _subtree_sums(parents: torch.Tensor, depths: torch.Tensor, final: torch.Tensor) -> torch.Tensor:
    """final: [n] probability of ending at each node -> [n] probability of passing through it."""
    reach = final.clone()
    for d in range(int(depths.max()), 0, -1):
        nodes = torch.nonzero(depths == d).flatten()
        reach.index_add_(0, parents[nodes], reach[nodes])
    reach[0] = 1.0  # the sum of the ends, to rounding
    return reach

