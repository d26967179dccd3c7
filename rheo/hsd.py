"""Hierarchical Speculative Decoding (HSD, Zhou et al. 2026): a sequence-level lossless verifier.

A mechanism, like :mod:`rheo.verify`: the verifier and its exact path probabilities, which
:mod:`rheo.methods.hsd` registers on static trees and chains.

**One chain.** A chain ``x_1 .. x_L`` drafted below a node, ``x_{i+1}`` drawn from the draft
law ``d_i`` at level ``i`` and verified against the target law ``t_i`` there (level 0: the
node's own target, or a residual; deeper: the target after the prefix). With the prefix
ratio ``rho_i = prod_{j<i} t_j(x_{j+1}) / d_j(x_{j+1})`` and its running maximum
``M_i = max(1, rho_1, .., rho_i)``, HSD caps the target mass of the prefix ``x_{1:i}`` at
``T_i = P_i / M_i`` (``P``, ``Q``: the target and draft probabilities of the prefix; so
``T_i <= Q_i``, and ``T_{i+1} <= t_i(x_{i+1}) T_i``). Writing ``u_i = T_i / Q_i = rho_i / M_i``:

* the whole chain is accepted with probability ``u_L``;
* otherwise levels ``L-1, .., 0`` are visited from the deepest up; at level ``i`` the walk
  stops with probability ``sigma_i = sum(u_i t_i - d_i)^+ / sum(d_i - u_i t_i)^+`` (1 at
  level 0), and the next token is drawn from the residual ``(u_i t_i - d_i)^+``
  (normalised); ``x_{1:i}`` is accepted.

So the accepted prefix reaches ``x_{1:i}`` with probability exactly ``u_i`` given the prefix,
which is the largest reach the cap allows; the residual at level ``i`` is the target mass of
the branch ``x_{1:i} y`` that neither the capped prefix nor the draft below it supplies.
Uncapped (``min(1, rho_L)`` for the whole chain, as one may read the method) is lossy once a
prefix ratio exceeds 1 (tests: ``hsd_uncapped``). On one chain HSD's reach is never below
token-wise speculative sampling's (``prod min(1, ratio)``): ``rho_i / M_i`` is at least that
product.

**Trees.** A node's children are tried in order (a static tree's in draw order; a dynamic
tree's sampled child first, then its point masses). Trying child ``c`` runs HSD on the chain
``c``, ``c``'s first child, its first child, ... When the walk stops at level ``i`` (the node
``n_i`` of that chain; ``n_0`` the node it started from), the residual is not drawn from at
once: it becomes the target for ``n_i``'s next untried child, and so on; the residual is drawn
from only when a node has no untried child left (after a full acceptance: the target at the
chain's leaf, which has no children). Each step is an HSD call whose chain was drawn from the
law it is verified against, independently of everything the walk has looked at so far, so
the output keeps the target's distribution (docs/algorithm.md, "Sequence-level verifiers").
The draft law of a child:

* a sampled child of a static tree: ``q_T`` of its parent (SpecInfer, i.i.d. siblings), or
  ``q_T`` without the earlier siblings' tokens, renormalised (RSD, ``replacement=False``);
* a point mass (a Top-K child, a Rheo lead or fill): the one-hot law of its own token. On
  a tree of point masses HSD is Top-K's one-hot walk exactly.

The paper proves one chain and independently drawn chains that share only the root
(``branching = (k, 1, .., 1)`` with replacement, their "multi-draft" with recursive rejection);
deeper branching and RSD siblings are the same recursion, checked here by exact enumeration.
On Rheo's mixed tree (``rheo_hsd``) the chains run through the samples; lossless because a
sample's survival never depends on its own value (Rheo's proxy): its ad-hoc ablation
(``proxy='fixed'``) is refused (:data:`REFUSED`). ``T = 0``: the greedy walk.

Host side, float64: one read of the tree, then one categorical draw per HSD call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from rheo.candidates import SAMPLE
from rheo.expected import greedy_path_probs
from rheo.probs import target_probs
from rheo.random import RandomSource
from rheo.tree import BuiltTree
from rheo.verify import TreeIndex, VerifyResult, residual_draft, walk_greedy

if TYPE_CHECKING:
    from rheo.spec import Spec

F64 = torch.float64

#: why HSD refuses a tree kind, one line each (a shared ``verifier`` option can print these)
REFUSED = {
    "proxy=fixed": ("HSD cannot verify a tree whose samples survive pruning depending on their own value "
                    "(Rheo with proxy='fixed'): a chain through them is no longer drawn from the law it is "
                    "verified against (docs/algorithm.md, 'Sequence-level verifiers')"),
}


class HsdTree:
    """Host-side view of a kept tree for HSD: children in the order they are tried, and each
    node's target and draft rows (float64, [V]) on demand.

    cap: False for the uncapped variant (the whole chain with ``min(1, rho_L)``), which is lossy:
    kept only as the negative control of the tests."""

    def __init__(self, built: BuiltTree, target_logits: torch.Tensor, temperature: float,
                 replacement: bool, cap: bool = True) -> None:
        index = TreeIndex(built)
        self.tokens = index.tokens
        parents = built.tree.parents.tolist()
        kinds = built.kind.tolist()
        self.sampled = [k == SAMPLE for k in kinds]
        self.children: list[list[int]] = [[] for _ in parents]
        for child in range(1, len(parents)):
            self.children[parents[child]].append(child)
        for kids in self.children:  # sampled children first (in draw order), then the point masses
            kids.sort(key=lambda c: not self.sampled[c])
        self.built, self.logits, self.temperature = built, target_logits, temperature
        self.replacement, self.cap, self.vocab = replacement, cap, target_logits.shape[1]
        self._p: dict[int, torch.Tensor] = {}

    def target(self, node: int) -> torch.Tensor:
        if node not in self._p:
            self._p[node] = target_probs(self.logits[node].to(F64), self.temperature)
        return self._p[node]

    def draft(self, node: int, slot: int) -> torch.Tensor:
        """The law the ``slot``-th child of ``node`` was drawn from, given its earlier siblings: [V]."""
        child = self.children[node][slot]
        if not self.sampled[child]:
            return torch.zeros(self.vocab, dtype=F64).index_fill_(0, torch.tensor([self.tokens[child]]), 1.0)
        q = residual_draft(self.built, node, self.vocab, torch.zeros(1, dtype=F64))
        earlier = [self.tokens[c] for c in self.children[node][:slot] if self.sampled[c]]
        if self.replacement or not earlier:
            return q
        q = q.clone()
        q[earlier] = 0.0
        return q / q.sum().clamp(min=1e-300)

    def chain(self, node: int, slot: int) -> list[int]:
        """The ``slot``-th child of ``node``, then first children down to a leaf."""
        out = [self.children[node][slot]]
        while self.children[out[-1]]:
            out.append(self.children[out[-1]][0])
        return out


@dataclass
class Call:
    """One HSD call: chain [L] (n_1 .. n_L), reach [L+1] (a_i = P(accepted prefix holds n_1..n_i),
    a_0 = 1), residual [L] (the normalised next-token law where the walk stops at level i)."""

    chain: list[int]
    reach: list[float]
    residual: list[torch.Tensor]

    def outcomes(self) -> torch.Tensor:
        """[L+1] probability that exactly i chain nodes are accepted."""
        a = self.reach + [0.0]
        return torch.tensor([max(a[i] - a[i + 1], 0.0) for i in range(len(self.chain) + 1)], dtype=F64)


def hsd_call(tree: HsdTree, node: int, slot: int, target: torch.Tensor) -> Call:
    """HSD on the chain of ``node``'s ``slot``-th child, with ``target`` [V] at level 0."""
    chain = tree.chain(node, slot)
    levels = [node] + chain[:-1]  # the node each level's token was drawn below
    rho, top = 1.0, 1.0
    u, sigma, residual = [], [], []
    for i, below in enumerate(levels):
        t = target if i == 0 else tree.target(below)
        d = tree.draft(node, slot) if i == 0 else tree.draft(below, 0)
        u_i = 1.0 if i == 0 else (rho / top if tree.cap else min(1.0, rho))
        plus, minus = (u_i * t - d).clamp(min=0), (d - u_i * t).clamp(min=0)
        s_plus, s_minus = float(plus.sum()), float(minus.sum())
        sigma.append(1.0 if i == 0 or s_minus <= 0 else min(1.0, s_plus / s_minus))
        residual.append(plus / s_plus if s_plus > 0 else t)
        u.append(u_i)
        x = tree.tokens[chain[i]]
        rho = rho * float(t[x]) / float(d[x])
        top = max(top, rho)
    reach = [rho / top if tree.cap else min(1.0, rho)]  # a_L
    for i in range(len(chain) - 1, -1, -1):
        reach.insert(0, reach[0] + (1.0 - reach[0]) * sigma[i])
    reach[0] = 1.0
    return Call(chain=chain, reach=reach, residual=residual)


def _start(tree: HsdTree, call: Call, level: int, node: int, slot: int) -> tuple[int, int]:
    """Where the walk goes on after stopping at ``level``: (node, its next untried slot)."""
    return (node, slot + 1) if level == 0 else (call.chain[level - 1], 1)


def verify_hsd(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec", rng: RandomSource,
               cap: bool = True) -> VerifyResult:
    """HSD on a kept tree (module docstring). target_logits: [n, V] untempered."""
    if cfg.greedy:
        return walk_greedy(TreeIndex(built), target_logits)
    tree = HsdTree(built, target_logits, cfg.temperature, cfg.replacement, cap)
    path, out = [0], []
    node, slot, target = 0, 0, tree.target(0)
    while slot < len(tree.children[node]):
        call = hsd_call(tree, node, slot, target)
        level = int(rng.categorical(call.outcomes()[None])[0])
        path += call.chain[:level]
        out += [tree.tokens[c] for c in call.chain[:level]]
        if level == len(call.chain):  # the whole chain: its leaf has no children
            node, slot, target = call.chain[-1], 0, tree.target(call.chain[-1])
            break
        target = call.residual[level]
        node, slot = _start(tree, call, level, node, slot)
    out.append(int(rng.categorical(target[None])[0]))
    return VerifyResult(path=path, tokens=out, sample_accepted=sum(tree.sampled[c] for c in path[1:]))


def hsd_path_probs(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec",
                   cap: bool = True) -> torch.Tensor:
    """[n] float64: the probability that HSD's accepted path holds each kept node (root: 1); the
    sum is the cycle's expected number of emitted tokens. Follows every branch of
    :func:`verify_hsd` with its weight instead of drawing."""
    if cfg.greedy:
        return greedy_path_probs(built, target_logits)
    tree = HsdTree(built, target_logits, cfg.temperature, cfg.replacement, cap)
    reach = torch.zeros(built.tree.num_nodes, dtype=F64)
    reach[0] = 1.0
    stack: list[tuple[int, int, torch.Tensor, float]] = [(0, 0, tree.target(0), 1.0)]
    while stack:
        node, slot, target, weight = stack.pop()
        if slot >= len(tree.children[node]) or weight <= 0:
            continue
        call = hsd_call(tree, node, slot, target)
        for i, c in enumerate(call.chain, start=1):
            reach[c] += weight * call.reach[i]
        stops = call.outcomes()
        for level in range(len(call.chain)):
            if stops[level] > 0:
                stack.append((*_start(tree, call, level, node, slot), call.residual[level],
                              weight * float(stops[level])))
    return reach


def refusal(tree_rule: str) -> Optional[str]:
    """Why HSD refuses a tree rule (a method name, or 'proxy=fixed'), or None where it is lossless."""
    return REFUSED.get(tree_rule)
