"""Plain reference twins of the static trees' build and verification (``rheo.methods.static``).

Python lists, node by node and child by child, drawing the same randomness in the same
order as the batched code; the tests check the two agree draw for draw.
"""

from __future__ import annotations

from typing import Optional

import torch

from rheo.candidates import LEAD, SAMPLE
from rheo.config import SpecConfig
from rheo.models.base import TreeView
from rheo.probs import target_probs, tempered
from rheo.random import RandomSource
from rheo.tree import BuiltTree, DraftFn
from rheo.verify import VerifyResult

__all__ = ["reference_build_static_tree", "reference_verify_static"]


def reference_build_static_tree(draft_fn: DraftFn, root_token: int, shape: tuple[int, ...], cfg: SpecConfig,
                                rng: RandomSource, draft_to_target: Optional[torch.Tensor] = None) -> dict:
    """StaticShape.build of the tree ``shape`` with Python lists, node by node; same randomness.
    Returns the tree as lists: tokens, parents, depths, kinds, sample_prob."""
    nodes = [dict(token=root_token, parent=-1, depth=0, kind=LEAD, prob=0.0)]
    frontier = [0]
    for layer, b in enumerate(shape):
        view = TreeView(*(torch.tensor([n[k] for n in nodes]) for k in ("token", "parent", "depth")))
        rows = draft_fn(view, torch.tensor(frontier)).to(torch.float64).tolist()
        support = [sorted(range(len(r)), key=lambda i: (-r[i], i))[: cfg.sparse_top] for r in rows]
        drawn = _reference_draws([[r[i] for i in s] for r, s in zip(rows, support)], b, cfg, rng)
        new = []
        for parent, sup, kids in zip(frontier, support, drawn):
            for slot, prob in kids:
                token = sup[slot] if draft_to_target is None else int(draft_to_target[sup[slot]])
                nodes.append(dict(token=token, parent=parent, depth=layer + 1,
                                  kind=LEAD if cfg.greedy else SAMPLE, prob=prob))
                new.append(len(nodes) - 1)
        frontier = new
        if not frontier:
            break
    return dict(tokens=[n["token"] for n in nodes], parents=[n["parent"] for n in nodes],
                depths=[n["depth"] for n in nodes], kinds=[n["kind"] for n in nodes],
                sample_prob=[n["prob"] for n in nodes])


def _reference_draws(logits: list[list[float]], b: int, cfg: SpecConfig,
                     rng: RandomSource) -> list[list[tuple[int, float]]]:
    """logits: per node, its support's draft logits (sorted). Per node, its children as
    (support slot, probability it was drawn with)."""
    if cfg.greedy:
        return [[(s, 0.0) for s in range(min(b, len(row))) if row[s] > -float("inf")] for row in logits]
    q_t = [tempered(torch.tensor(row, dtype=torch.float64), cfg.temperature).tolist() for row in logits]
    if cfg.replacement:
        picks = rng.categorical(torch.tensor([q for q in q_t for _ in range(b)], dtype=torch.float64)).tolist()
        return [[(picks[i * b + j], q_t[i][picks[i * b + j]]) for j in range(b)] for i in range(len(q_t))]
    avail = [list(q) for q in q_t]
    out: list[list[tuple[int, float]]] = [[] for _ in q_t]
    for _ in range(b):
        rows = [a if sum(a) > 0 else [1.0] + [0.0] * (len(a) - 1) for a in avail]
        picks = rng.categorical(torch.tensor(rows, dtype=torch.float64)).tolist()
        for node, (a, s) in enumerate(zip(avail, picks)):
            if sum(a) > 0:
                out[node].append((s, a[s] / sum(a)))
                a[s] = 0.0
    return out


def reference_verify_static(built: BuiltTree, target_logits: torch.Tensor, cfg: SpecConfig,
                            rng: RandomSource) -> VerifyResult:
    """verify_static with Python lists, child by child."""
    tokens, parents = built.tree.tokens.tolist(), built.tree.parents.tolist()
    path, out = [0], []
    while True:
        node = path[-1]
        kids = [c for c in range(len(parents)) if parents[c] == node]
        r = target_probs(target_logits[node], cfg.temperature).tolist()
        if cfg.greedy:
            y = max(range(len(r)), key=lambda i: (r[i], -i))
            hit = [c for c in kids if tokens[c] == y]
            if not hit:
                return VerifyResult(path=path, tokens=out + [y], sample_accepted=0)
            path.append(hit[0])
            out.append(y)
            continue
        q = [0.0] * len(r)
        if kids:
            row = int(built.exp_row[node])
            for tok, w in zip(built.resid_ids[row].tolist(), built.resid_probs[row].tolist()):
                q[tok] = w
        accepted = None
        for c in kids:
            x = tokens[c]
            q_i = q if cfg.replacement else [v / sum(q) for v in q]
            if bool(rng.bernoulli(torch.tensor([min(1.0, r[x] / q_i[x])], dtype=torch.float64))[0]):
                accepted = c
                break
            left = [max(a - b, 0.0) for a, b in zip(r, q_i)]
            r = [v / sum(left) for v in left] if sum(left) > 0 else r
            if not cfg.replacement:
                q[x] = 0.0
        if accepted is None:
            y = int(rng.categorical(torch.tensor([r], dtype=torch.float64))[0])
            return VerifyResult(path=path, tokens=out + [y], sample_accepted=len(path) - 1)
        path.append(accepted)
        out.append(tokens[accepted])
