"""Tree verification: Top-K point masses, RheoVerification (stochastic-first), greedy.

A mechanism: this module holds the dynamic-tree verifier of Top-K and Rheo
(registered in :mod:`rheo.methods`) and the pieces the static verifier shares.

One pass walks the accepted path from the root. At each node on it, with ``p`` the
target distribution at temperature ``T``:

* **stochastic-first** (Rheo, default): if the node's sampled child survived,
  accept it with ``min(1, p(x_s) / q~(x_s))``; on rejection ``p`` becomes the
  residual ``max(p - q~, 0) / beta``. Then the deterministic children (leads,
  fills) are point-mass drafts against the current residual ``r``.
* **Top-K**: every child is a deterministic point mass against ``p``.
* **deterministic-first** (ablation, lossy when fills exist): the point masses
  first against ``p``, then the sample against what is left.
* ``T = 0``: accept the child equal to the target's argmax; bonus = argmax.

Point masses visited in rank order, each accepted with the renormalised residual
mass and zeroed on rejection, accept child ``d`` with probability exactly ``r(d)``
and otherwise emit a bonus distributed as ``r`` outside the children. We draw that
outcome with a single ``y ~ r`` (accept the child whose token is ``y``, else ``y``
is the bonus); ``rheo/reference.py`` keeps the child-by-child form and the tests
show both give the same output distribution exactly.

Host syncs: one read of the kept tree (parents, tokens, kinds together; none when the builder
read them with its own, ``DraftTree.host``), then one read per draw at a visited node (the node's NaN
check travels with its first; at most ``depth + 1`` reads, and one more at a node whose sample was
rejected by a random source without ``bernoulli_else_categorical``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rheo.candidates import SAMPLE
from rheo.probs import NonFiniteLogitsError, raise_nan, target_probs
from rheo.random import RandomSource
from rheo.tree import BuiltTree

if TYPE_CHECKING:
    from rheo.spec import Spec


@dataclass(frozen=True)
class VerifyResult:
    path: list[int]  # kept-node indices on the accepted path, root first
    tokens: list[int]  # accepted drafted tokens, then the bonus token
    sample_accepted: int  # sampled children accepted on the path


class TreeIndex:
    """Host-side child lists of a kept tree (one transfer per cycle)."""

    def __init__(self, built: BuiltTree) -> None:
        tree = built.tree
        if tree.host is not None and built.host_kind is not None:  # read by the builder with the tree
            (parents, self.tokens), kinds = tree.host, built.host_kind
        else:
            parents, self.tokens, kinds = torch.stack([tree.parents, tree.tokens.to(tree.parents.dtype),
                                                       built.kind.to(tree.parents.dtype)]).tolist()
        self.sample_child: dict[int, int] = {}
        self.det_children: dict[int, dict[int, int]] = {}  # node -> {token: child}
        for child in range(1, len(parents)):
            if kinds[child] == SAMPLE:
                self.sample_child[parents[child]] = child
            else:
                self.det_children.setdefault(parents[child], {})[self.tokens[child]] = child

    def children_by_token(self, node: int) -> dict[int, int]:
        out = dict(self.det_children.get(node, {}))
        if node in self.sample_child:
            out[self.tokens[self.sample_child[node]]] = self.sample_child[node]
        return out


def residual_draft(built: BuiltTree, node: int, vocab: int, like: torch.Tensor) -> torch.Tensor:
    """q~ of ``node``'s expansion scattered onto the target vocabulary: [V]."""
    row = int(built.exp_row[node]) if built.host_exp_row is None else built.host_exp_row[node]
    full = torch.zeros(vocab, dtype=like.dtype, device=like.device)
    return full.scatter_(0, built.resid_ids[row], built.resid_probs[row].to(like.dtype))


def subtract_draft(r: torch.Tensor, q_tilde: torch.Tensor) -> torch.Tensor:
    """Residual after rejecting a draw from q~: max(r - q~, 0) / beta.  [V] -> [V]."""
    left = (r - q_tilde).clamp_(min=0)
    beta = left.sum()
    return torch.where(beta > 0, left / beta, r)  # no host read: the same values as a branch on beta


def verify_dynamic(built: BuiltTree, target_logits: torch.Tensor, cfg: "Spec",
                   rng: RandomSource) -> VerifyResult:
    """Top-K / Rheo verification (module docstring). target_logits: [n, V] untempered."""
    index = TreeIndex(built)
    if cfg.greedy:
        return walk_greedy(index, target_logits)
    vocab = target_logits.shape[1]
    path, out, n_samples = [0], [], 0
    while True:
        node = path[-1]
        r = target_probs(target_logits[node], cfg.temperature, check=False)  # [V]
        # a NaN logit makes the row all NaN: the flag is read with the node's first draw, and raises
        # before any outcome is used
        nan = torch.isnan(r[0])
        read = _Reader(nan, target_logits[node], cfg.temperature)
        det = index.det_children.get(node, {})
        sample = index.sample_child.get(node)
        if sample is not None and cfg.verify_order == "deterministic_first":
            y = read(rng.categorical(r[None])[0])
            if y in det:
                path.append(det[y]); out.append(y)
                continue
            r = r.clone()
            r[list(det)] = 0
            r = r / r.sum()
            det = {}
        y = None
        if sample is not None:
            s_tok = index.tokens[sample]
            accept = (r[s_tok] / built.sample_prob[sample].to(r.dtype)).clamp(max=1.0)
            both = getattr(rng, "bernoulli_else_categorical", None)
            if both is not None:  # the accept/reject draw and the draw after a rejection in one read
                rejected = subtract_draft(r, residual_draft(built, node, vocab, r))
                hit, y, flag = both(accept[None], rejected[None], nan)
                read.check(flag)
            else:
                hit = bool(read(rng.bernoulli(accept[None])[0]))
            if hit:
                path.append(sample); out.append(s_tok); n_samples += 1
                continue
            r = rejected if both is not None else subtract_draft(r, residual_draft(built, node, vocab, r))
        if y is None:
            y = read(rng.categorical(r[None])[0])
        if y in det:
            path.append(det[y]); out.append(y)
            continue
        out.append(y)
        return VerifyResult(path=path, tokens=out, sample_accepted=n_samples)


class _Reader:
    """One visited node's host reads: the first carries the node's NaN flag along with its draw (one
    transfer), and raises NonFiniteLogitsError if it is set; later reads carry the draw alone."""

    def __init__(self, nan: torch.Tensor, logits: torch.Tensor, temperature: float) -> None:
        self.nan, self.logits, self.temperature = nan, logits, temperature

    def __call__(self, draw: torch.Tensor) -> int:
        """draw: a 0-d integer or bool tensor -> its value."""
        if self.nan is None:
            return int(draw)
        value, flag = torch.stack([draw.long(), self.nan.long()]).tolist()
        self.check(flag)
        return value

    def check(self, flag: int) -> None:
        self.nan = None
        if flag:
            raise_nan(self.logits, self.temperature)


def walk_greedy(index: TreeIndex, target_logits: torch.Tensor) -> VerifyResult:
    """T = 0: follow the child equal to the target's argmax; the first miss is the bonus."""
    path, out = [0], []
    while True:
        row = target_logits[path[-1]]
        y, nan = torch.stack([row.argmax(), torch.isnan(row).any().long()]).tolist()  # one host read
        if nan:
            raise NonFiniteLogitsError("target model returned NaN logits")
        out.append(y)
        child = index.children_by_token(path[-1]).get(y)
        if child is None:
            return VerifyResult(path=path, tokens=out, sample_accepted=0)
        path.append(child)
