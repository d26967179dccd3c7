"""The optimal-transport bound of one node: the most any verifier can accept for its candidate sets.

A method proposes, at a node, a random *set* of candidate tokens ``C`` (Top-K: the fixed
top-K; Rheo: the leads, one sample ``y ~ q~`` and the fills ``F_y``; a static tree: the
tokens of its ``b`` draws). A lossless verifier emits a token ``X ~ p`` and accepts a child
exactly when ``X`` is in ``C``, so its acceptance is ``P(X in C)`` under some coupling of
``C`` and ``X``. The largest value over all couplings (the maximal coupling) is a small
linear program, a transport problem from sets to tokens::

    max sum_{S, x in S} pi(S, x)   s.t.  sum_x pi(S, x) <= mu(S),  sum_S pi(S, x) <= p(x),  pi >= 0

solved with ``scipy.optimize.linprog`` (HiGHS). By max-flow / min-cut it equals
``min over token sets B of  mu(C not within B) + p(B)`` (:func:`min_cut_bound`, the plain
twin for small vocabularies). For a fixed set it is ``p(D)``; for one sample from ``q``
it is ``sum min(p, q)``.

``*_sets`` are the methods' candidate-set distributions (``Method.candidate_sets``): a
node's truncated draft distribution ``dist`` ([1, S], target ids) -> ``[(tokens, prob)]``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Optional, Sequence

import torch

from rheo.candidates import draws_probe
from rheo.probs import DraftDist, tempered

if TYPE_CHECKING:
    from rheo.spec import Spec

CandidateSets = list[tuple[frozenset, float]]
MAX_STATIC_SEQUENCES = 20_000  # ordered draws enumerated for a static node; above it: no bound


def topk_sets(dist: DraftDist, cfg: "Spec") -> CandidateSets:
    """The top-k tokens, with probability 1."""
    return [(_top(dist, cfg.k), 1.0)]


def rheo_sets(dist: DraftDist, cfg: "Spec") -> CandidateSets:
    """Leads + sample y + fills F_y, with probability q~(y) (rheo.candidates)."""
    ids, logits = dist.ids[0].tolist(), dist.logits[0]
    slots, m = min(cfg.k, len(ids)), cfg.m
    if not bool(draws_probe(dist, m, cfg.temperature, cfg.probe_min)[0]):  # a Top-K node
        return [(_top(dist, cfg.k), 1.0)]
    q_tail = tempered(logits[m:].double(), cfg.temperature).tolist()
    finite = torch.isfinite(logits).tolist()
    out = []
    for j, w in enumerate(q_tail):
        if w <= 0:
            continue
        fills = [t for i, t in enumerate(ids[m:], start=m) if i != m + j and finite[i]][: slots - m - 1]
        out.append((frozenset(ids[:m] + [ids[m + j]] + fills), w))
    return out


def static_sets(b: int):
    """The candidate rule of a static node with ``b`` children (with or without replacement)."""
    def sets(dist: DraftDist, cfg: "Spec") -> Optional[CandidateSets]:
        if cfg.greedy:
            return [(_top(dist, b), 1.0)]
        q = tempered(dist.logits[0].double(), cfg.temperature).tolist()
        ids = dist.ids[0].tolist()
        support = [i for i, w in enumerate(q) if w > 0]
        draws = min(b, len(support)) if not cfg.replacement else b
        if len(support) ** draws > MAX_STATIC_SEQUENCES:
            return None
        out: dict[frozenset, float] = {}
        for seq in itertools.product(support, repeat=draws):
            if not cfg.replacement and len(set(seq)) < draws:
                continue
            prob, left = 1.0, 1.0
            for i in seq:
                prob *= q[i] / (1.0 if cfg.replacement else left)
                left -= 0.0 if cfg.replacement else q[i]
            key = frozenset(ids[i] for i in seq)
            out[key] = out.get(key, 0.0) + prob
        return list(out.items())
    return sets


def coupling_bound(sets: CandidateSets, p: torch.Tensor) -> float:
    """Maximal P(X in C) over couplings of C ~ ``sets`` and X ~ p ([V]): the LP of the module docstring."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    p = p.double().tolist()
    edges = [(i, x) for i, (tokens, _) in enumerate(sets) for x in sorted(tokens)]
    tokens = sorted({x for _, x in edges})
    col = {x: j for j, x in enumerate(tokens)}
    rows = [i for i, _ in edges] + [len(sets) + col[x] for _, x in edges]
    a = coo_matrix(([1.0] * (2 * len(edges)), (rows, list(range(len(edges))) * 2)),
                   shape=(len(sets) + len(tokens), len(edges)))
    b = [w for _, w in sets] + [p[x] for x in tokens]
    res = linprog(-torch.ones(len(edges)).numpy(), A_ub=a.tocsr(), b_ub=b, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the coupling LP failed: {res.message}")
    return min(1.0, max(0.0, -float(res.fun)))


def min_cut_bound(sets: CandidateSets, p: Sequence[float]) -> float:
    """The same bound by min-cut, over every token set B of the sets' union (small cases only)."""
    union = sorted(set().union(*(s for s, _ in sets)))
    best = 1.0
    for r in range(len(union) + 1):
        for chosen in itertools.combinations(union, r):
            b = set(chosen)
            best = min(best, sum(w for s, w in sets if not s <= b) + sum(float(p[x]) for x in b))
    return best


def _top(dist: DraftDist, k: int) -> frozenset:
    finite = torch.isfinite(dist.logits[0, :k])
    return frozenset(dist.ids[0, :k][finite].tolist())
