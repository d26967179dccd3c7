"""Static stochastic trees (SpecInfer, RSD) and chain speculative sampling.

The other horn of the paper's dilemma: the topology is fixed in advance and every
child is *drawn* from the draft distribution, so ordinary recursive rejection
sampling keeps the output exact.

* **shape** - ``branching = (b1, ..., bd)``: every node at depth i-1 gets b_i
  children; no pruning, so a tree has b1 + b1*b2 + ... drafted nodes at depth d.
  :data:`PRESETS` holds ~60-node shapes (the paper's node budget).
* **drafting** (T > 0) - from ``q_T``, the draft distribution truncated to
  ``sparse_top`` logits at temperature T (as for every method). Without
  replacement (RSD, Jeon et al. 2024): sibling i is drawn from ``q_i`` = ``q_T``
  with siblings 1..i-1 removed and renormalised. With replacement (SpecInfer):
  ``q_i = q_T`` (siblings may repeat a token; each keeps its own subtree).
* **verification** (recursive rejection sampling) - at a node on the accepted
  path, with ``r_1 = p`` (target at T): child i is accepted with
  ``min(1, r_i(x_i) / q_i(x_i))``; on rejection ``r_{i+1} = max(r_i - q_i, 0) / beta``.
  If every child is rejected, the bonus is drawn from the last residual. Exact for
  both schemes *provided each child is verified against the distribution it was
  drawn from*; without-replacement draws verified as if i.i.d. are lossy (tests).
* **T = 0** - the children of a node are its top-b_i draft tokens; greedy
  verification (follow the target's argmax).
* **chain** - speculative sampling of one drafted sequence (Leviathan et al.;
  Chen et al. 2023): ``branching = (1,) * depth``.
* **verifier** - ``rrs`` (the above) or ``traversal`` (:mod:`rheo.traversal`: Traversal
  Verification, sequence-level acceptance from the leaves up; exact on chains and on
  i.i.d. siblings only, so refused with ``replacement=False`` where a node has siblings).

Host syncs: one per tree layer while drafting (none beyond the drafter's), one
per verified child.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch

from rheo.candidates import LEAD, SAMPLE, Candidates
from rheo.methods.registry import Method, register
from rheo.methods.static_verify import VERIFIERS, path_probs_any, verifier_of, verifier_tag, verify_any
# verify_static's old home re-exports it
from rheo.methods.static_verify import verify_static  # noqa: F401  # pylint: disable=unused-import
from rheo.methods.topk import check_sparse_top
from rheo.models.base import DraftTree, TreeView
from rheo.ot import static_sets
from rheo.probs import DraftDist, draft_distribution, tempered
from rheo.random import RandomSource
from rheo.tree import BuiltTree, CandidateFn, DraftFn, ancestor_mask

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.spec import Spec

#: ~60-node shapes for the paper's budget (Top-K / Rheo: R = 60 drafted nodes)
PRESETS = {
    "deep60": (4, 2, 1, 1, 1, 1, 1, 1),  # depth 8 like EAGLE's tree: 4 + 8 + 6 * 8 = 60 nodes
    "wide60": (6, 3, 1, 1),  # Sequoia-like, wider at the top: 6 + 18 + 18 + 18 = 60 nodes
}


def num_nodes(branching: tuple[int, ...]) -> int:
    """Drafted nodes of the full product shape (root excluded)."""
    total, width = 0, 1
    for b in branching:
        width *= b
        total += width
    return total


def draw_children(dist: DraftDist, b: int, temperature: float, replacement: bool,
                  rng: RandomSource) -> Candidates:
    """dist: [f, S] -> b children per node: tokens [f, b], log_score = log q_i(x_i) ([f, b], -inf
    where a node has fewer than b drawable tokens), kind SAMPLE (LEAD at T = 0),
    resid_probs = q_T [f, S] (None at T = 0). Randomness: one categorical draw of [f * b]
    rows with replacement, b draws of [f] rows (sibling by sibling) without."""
    n, support = dist.log_q.shape
    device = dist.ids.device
    if temperature == 0:
        slots = min(b, support)
        return Candidates(tokens=dist.ids[:, :slots], log_score=dist.log_q[:, :slots],
                          kind=torch.full((n, slots), LEAD, dtype=torch.long, device=device),
                          resid_probs=None, sample_prob=torch.zeros(n, dtype=dist.log_q.dtype, device=device))
    q_t = tempered(dist.logits, temperature)  # [f, S]
    if replacement:
        pick = rng.categorical(q_t.repeat_interleave(b, dim=0)).view(n, b)  # node-major, sibling-minor
        prob = q_t.gather(1, pick)  # [f, b]
    else:
        avail = q_t.clone()
        first = torch.zeros_like(q_t)
        first[:, 0] = 1.0  # a drawable placeholder row for nodes whose support is used up
        picks, probs = [], []
        for _ in range(b):
            mass = avail.sum(-1)  # [f]
            left = mass > 0
            pick = rng.categorical(torch.where(left[:, None], avail, first))  # [f]
            probs.append(torch.where(left, avail.gather(1, pick[:, None])[:, 0] / mass.clamp(min=1e-300), 0.0))
            picks.append(pick)
            avail.scatter_(1, pick[:, None], 0.0)
        pick, prob = torch.stack(picks, 1), torch.stack(probs, 1)  # [f, b]
    log_score = torch.where(prob > 0, prob.log(), -torch.inf)
    return Candidates(tokens=dist.ids.gather(1, pick), log_score=log_score,
                      kind=torch.full((n, b), SAMPLE, dtype=torch.long, device=device), resid_probs=q_t,
                      sample_prob=torch.zeros(n, dtype=q_t.dtype, device=device))


@dataclass(frozen=True)
class StaticShape:
    """The candidate rule and tree builder of a static tree whose shape is ``shape(cfg)``."""

    shape: Callable[[Spec], tuple[int, ...]]

    def candidates(self, dist: DraftDist, cfg: Spec, rng: RandomSource, layer: int) -> Candidates:
        return draw_children(dist, self.shape(cfg)[layer], cfg.temperature, cfg.replacement, rng)

    def build(self, rule: CandidateFn, draft_fn: DraftFn, root_token: int, cfg: Spec, rng: RandomSource,
              draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> BuiltTree:
        """Every node of a layer is expanded (one drafter call per layer), each with the candidate
        rule ``rule``; nothing is pruned."""
        long = dict(dtype=torch.long, device=device)
        tokens, parents = torch.tensor([root_token], **long), torch.tensor([-1], **long)  # [N]
        depths, kinds = torch.zeros(1, **long), torch.full((1,), LEAD, **long)  # [N]
        probs: Optional[torch.Tensor] = None  # [N] q_i(x_i) of sampled nodes
        exp_nodes, exp_ids, exp_probs = [], [], []
        frontier = torch.zeros(1, **long)  # [f]
        shape = self.shape(cfg)
        for layer in range(len(shape)):
            logits = draft_fn(TreeView(tokens, parents, depths, layer), frontier)  # [f, Vd]
            dist = draft_distribution(logits, cfg.sparse_top, draft_to_target)
            cand = rule(dist, cfg, rng, layer)
            if probs is None:
                probs = torch.zeros(1, dtype=cand.log_score.dtype, device=device)
            exp_nodes.append(frontier)
            exp_ids.append(dist.ids)
            if cand.resid_probs is not None:
                exp_probs.append(cand.resid_probs)
            valid = torch.isfinite(cand.log_score).flatten()  # [f*b]
            child_kind = cand.kind.flatten()[valid]
            first = tokens.shape[0]
            tokens = torch.cat([tokens, cand.tokens.flatten()[valid]])
            parents = torch.cat([parents, frontier.repeat_interleave(cand.tokens.shape[1])[valid]])
            depths = torch.cat([depths, torch.full_like(child_kind, layer + 1)])
            kinds = torch.cat([kinds, child_kind])
            probs = torch.cat([probs, torch.where(child_kind == SAMPLE, cand.log_score.flatten()[valid].exp(), 0.0)])
            frontier = torch.arange(first, tokens.shape[0], **long)
            if frontier.numel() == 0:
                break
        exp_row = torch.full((tokens.shape[0],), -1, **long)
        expanded = torch.cat(exp_nodes)  # [E]
        exp_row[expanded] = torch.arange(expanded.shape[0], **long)
        tree = DraftTree(tokens=tokens, parents=parents, depths=depths,
                         ancestor_mask=ancestor_mask(parents, len(shape)))
        return BuiltTree(tree=tree, kind=kinds, sample_prob=probs, exp_row=exp_row,
                         resid_ids=torch.cat(exp_ids) if exp_probs else None,
                         resid_probs=torch.cat(exp_probs) if exp_probs else None, drafted=tokens.shape[0] - 1)


def node_acceptance(target_probs: torch.Tensor, draft_logits: torch.Tensor, b: int, temperature: float,
                    replacement: bool, sparse_top: Optional[int] = None) -> float:
    """target_probs: [V] (tempered), draft_logits: [V]: probability that one node with b drawn
    children accepts one of them. With replacement ``1 - prod_i beta_i``; without, the
    rejection probability is summed over the rejected tokens' ordered draws (exact, V^(b-1))."""
    p = target_probs.to(torch.float64)
    dist = draft_distribution(draft_logits.to(torch.float64)[None], sparse_top)
    ids, logits = dist.ids[0], dist.logits[0]  # [S]
    if temperature == 0:
        top = ids[:b][torch.isfinite(logits[:b])]
        return min(1.0, float(p[top].sum()))
    q = torch.zeros_like(p).scatter_(0, ids, tempered(logits, temperature))  # q_T on [V]

    def all_rejected(r: torch.Tensor, avail: torch.Tensor, left: int) -> float:
        q_i = avail / avail.sum()
        excess = (q_i - r).clamp(min=0)  # P(draw x and reject it)
        beta = float((r - q_i).clamp(min=0).sum())
        if left == 1 or beta <= 0:
            return beta
        r_next = (r - q_i).clamp(min=0) / beta
        if replacement:
            return beta * all_rejected(r_next, avail, left - 1)
        total = 0.0
        for x in torch.nonzero(excess > 0).flatten().tolist():
            rest = avail.clone()
            rest[x] = 0.0
            if float(rest.sum()) > 0:
                total += float(excess[x]) * all_rejected(r_next, rest, left - 1)
            else:  # support used up: no later sibling exists, the bonus follows
                total += float(excess[x])
        return total

    return min(1.0, max(0.0, 1.0 - all_rejected(p, q, b)))


# ------------------------------------------------------------------ registration
#: drafted nodes a static tree may have: one target call scores them all (its attention mask is
#: nodes x nodes; a 40,200-node tree took 11 GB); the paper's trees have 60
MAX_STATIC_NODES = 4096


def _validate_static(cfg: Spec) -> None:
    if cfg.branching is None:
        raise ValueError("branching is required for method='static', e.g. branching="
                         f"{PRESETS['deep60']} ({num_nodes(PRESETS['deep60'])} nodes)")
    n = num_nodes(cfg.branching)
    if n > MAX_STATIC_NODES:
        raise ValueError(f"branching={list(cfg.branching)} makes a {n}-node tree, more than the {MAX_STATIC_NODES} "
                         f"nodes one target call may score: choose a smaller shape (e.g. {list(PRESETS['deep60'])})")
    check_sparse_top(cfg, max(cfg.branching), "max(branching)")
    verifier_of(cfg)[3](cfg.replacement, cfg.branching)


def _validate_chain(cfg: Spec) -> None:
    verifier_of(cfg)
    if cfg.depth > MAX_STATIC_NODES:
        raise ValueError(f"depth={cfg.depth}: a chain of more than {MAX_STATIC_NODES} nodes; choose a smaller depth")


def _static_label(row) -> str:
    shape = ",".join(str(int(b)) for b in row.branching)
    return f"static {'specinfer' if row.replacement else 'rsd'} ({shape}){verifier_tag(row)}"


def _static_pretty(variant: str) -> str:
    _, rule, rest = variant.split(" ", 2)
    shape, _, verifier = rest.partition(" ")
    suffix = VERIFIERS[verifier][2] if verifier in VERIFIERS else (f" {verifier}" if verifier else "")
    return f"{'SpecInfer' if rule == 'specinfer' else 'RSD'} {shape}{suffix}"


def _chain_pretty(variant: str) -> str:
    _, depth, *verifier = variant.split(" ")
    return f"Chain {depth}" + (VERIFIERS[verifier[0]][2] if verifier and verifier[0] in VERIFIERS else "")


def _acceptance(shape: Callable[[Spec], tuple[int, ...]]):
    def acceptance(target_probs, draft_logits, cfg: Spec) -> float:
        return node_acceptance(target_probs, draft_logits, shape(cfg)[0], cfg.temperature, cfg.replacement,
                               cfg.sparse_top)
    return acceptance


STATIC_SHAPE = StaticShape(shape=lambda cfg: cfg.branching)
CHAIN_SHAPE = StaticShape(shape=lambda cfg: (1,) * cfg.depth)

register(Method(
    name="static", display="Static", kind="static", candidates=STATIC_SHAPE.candidates, build=STATIC_SHAPE.build,
    verify=verify_any, fields=("branching", "replacement", "sparse_top", "verifier"), validate=_validate_static,
    max_children=lambda cfg: max(cfg.branching), label=_static_label, pretty=_static_pretty,
    acceptance=_acceptance(STATIC_SHAPE.shape), path_probs=path_probs_any,
    candidate_sets=lambda dist, cfg: static_sets(cfg.branching[0])(dist, cfg)))

register(Method(
    name="chain", display="Chain", kind="static", candidates=CHAIN_SHAPE.candidates, build=CHAIN_SHAPE.build,
    verify=verify_any, fields=("depth", "sparse_top", "verifier"), validate=_validate_chain, max_children=lambda cfg: 1,
    label=lambda row: f"chain d={int(row.depth)}{verifier_tag(row)}", pretty=_chain_pretty,
    acceptance=_acceptance(CHAIN_SHAPE.shape), path_probs=path_probs_any, candidate_sets=static_sets(1)))
