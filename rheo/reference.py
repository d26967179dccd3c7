"""Plain reference implementations, written for reading rather than speed.

Each mirrors an optimised function and consumes randomness the same way where
the tests compare them under one generator:

* :func:`reference_select` – per-node, per-slot candidate selection
  (== :func:`rheo.methods.select_candidates`), one twin per candidate rule.
* :func:`reference_build_tree` – the dynamic tree with Python lists
  (== :func:`rheo.methods.build_tree`).
* :func:`reference_verify` – verification exactly as the method states it: the
  deterministic children one by one in rank order, each accepted with the
  renormalised residual probability and zeroed on rejection
  (same output *distribution* as :func:`rheo.methods.verify_tree`, which draws the
  outcome in one step; the tests compare the exact distributions).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from rheo.candidates import FILL, LEAD, SAMPLE
from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.methods.rheo import rheo_candidates
from rheo.methods.topk import topk_candidates
from rheo.models.base import TreeView
from rheo.probs import target_probs, tempered
from rheo.random import RandomSource
from rheo.tree import DraftFn
from rheo.verify import VerifyResult


def _sorted_support(logits: list[float], sparse_top: Optional[int]) -> list[int]:
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    return order[: sparse_top] if sparse_top is not None else order


def reference_select(draft_logits: torch.Tensor, cfg: SpecConfig, rng: RandomSource,
                     draft_to_target: Optional[torch.Tensor] = None) -> list[list[tuple[int, float, int, float]]]:
    """draft_logits: [f, Vd] -> per node, its slots as (token, log score, kind, q~ of sample): the
    twin of ``cfg.method``'s candidate rule (Top-K's or Rheo's, found by the rule it registers)."""
    twin = _TWINS.get(get_method(cfg.method).candidates)
    if twin is None:
        raise ValueError(f"method {cfg.method!r}: its candidate rule has no reference twin (Top-K's and Rheo's do)")
    rows = draft_logits.to(torch.float64).tolist()
    supports = [_sorted_support(r, cfg.sparse_top) for r in rows]
    slots = min(cfg.k, len(supports[0]))
    d2t = draft_to_target
    return [[(int(d2t[t]) if d2t is not None else t, s, kd, qt) for t, s, kd, qt in chosen if s > -math.inf]
            for chosen in twin(rows, supports, slots, cfg, rng)]


def _log_q(r: list[float], sup: list[int], temperature: float = 1.0) -> dict[int, float]:
    """log q_T of the support's tokens (the truncated draft distribution at ``temperature``; q at
    1), -inf where undrawable."""
    finite = [i for i in sup if math.isfinite(r[i])]
    top = r[finite[0]] / temperature
    lse = math.log(sum(math.exp(r[i] / temperature - top) for i in finite)) + top
    return {i: r[i] / temperature - lse if math.isfinite(r[i]) else -math.inf for i in sup}


def _scores(r: list[float], sup: list[int], cfg: SpecConfig) -> dict[int, float]:
    """The ranking score of each support token: log q, log q_T, or at T = 0 the logit gap."""
    if cfg.rank == "q":
        return _log_q(r, sup)
    if cfg.temperature == 0:
        return {i: r[i] - r[sup[0]] if math.isfinite(r[i]) else -math.inf for i in sup}
    return _log_q(r, sup, cfg.temperature)


def _mass_outside(r: list[float], sup: list[int], m: int, temperature: float) -> float:
    """z_T: the mass of q_T off the first m support tokens (T = 0: of the one-hot argmax)."""
    if temperature == 0:
        return 0.0 if m > 0 else 1.0
    log_qt = _log_q(r, sup, temperature)
    return sum(math.exp(log_qt[i]) for i in sup[m:])


def _leads(r: list[float], sup: list[int], count: int, cfg: SpecConfig) -> list[tuple[int, float, int, float]]:
    score = _scores(r, sup, cfg)
    return [(i, score[i], LEAD, 0.0) for i in sup[:count]]


def _topk_slots(rows, supports, slots: int, cfg: SpecConfig, rng: RandomSource) -> list[list[tuple]]:
    """Top-K: every slot a lead (no randomness)."""
    return [_leads(r, sup, slots, cfg) for r, sup in zip(rows, supports)]


def _draws(r: list[float], sup: list[int], cfg: SpecConfig) -> bool:
    """The node draws a sample: a drawable tail token and z_T >= probe_min."""
    if not math.isfinite(r[sup[cfg.m]]):  # the leads hold all the mass
        return False
    return cfg.probe_min <= 0 or _mass_outside(r, sup, cfg.m, cfg.temperature) >= cfg.probe_min


def _proxy(r: list[float], sup: list[int], cfg: SpecConfig) -> float:
    """The sample's log score (rheo.candidates, module docstring), one node at a time."""
    m, score = cfg.m, _scores(r, sup, cfg)
    if cfg.proxy == "fixed":
        return math.log(cfg.proxy_value)
    if cfg.rank == "q_T" and cfg.temperature == 0:
        return score[sup[m]]
    q = [math.exp(score[i]) for i in sup]
    if m == 0:
        return math.log(min(q[0] + cfg.proxy_eps, 1.0))
    if cfg.proxy == "tempered":
        z_t = _mass_outside(r, sup, m, cfg.temperature)
        return math.log(max(min(q[m] + cfg.proxy_eps, 1.0), min(q[m - 1], z_t)))
    return math.log(min(q[m - 1], sum(q[m:])))


def _rheo_slots(rows, supports, slots: int, cfg: SpecConfig, rng: RandomSource) -> list[list[tuple]]:
    """Rheo: m leads, one sample from the residual (one categorical draw over all nodes), fills."""
    m = cfg.m
    resid_rows = []
    for r, sup in zip(rows, supports):
        vals = torch.tensor([r[i] for i in sup], dtype=torch.float64)
        resid_rows.append(tempered(vals[m:], cfg.temperature) if _draws(r, sup, cfg) else torch.ones(len(sup) - m))
    picks = rng.categorical(torch.stack(resid_rows)).tolist()
    out = []
    for node, (r, sup) in enumerate(zip(rows, supports)):
        if not _draws(r, sup, cfg):  # a Top-K node
            out.append(_leads(r, sup, slots, cfg))
            continue
        score = _scores(r, sup, cfg)
        sample = sup[m + picks[node]]
        fills = [i for i in sup[m:] if i != sample][: slots - m - 1]
        q_t = float(resid_rows[node][picks[node]])
        out.append(_leads(r, sup, m, cfg) + [(sample, _proxy(r, sup, cfg), SAMPLE, q_t)]
                   + [(i, score[i], FILL, 0.0) for i in fills])
    return out


_TWINS = {topk_candidates: _topk_slots, rheo_candidates: _rheo_slots}


def reference_build_tree(draft_fn: DraftFn, root_token: int, cfg: SpecConfig, rng: RandomSource,
                         draft_to_target: Optional[torch.Tensor] = None) -> dict:
    """Returns the kept tree as lists: tokens, parents (kept indices), depths, kinds, sample_prob."""
    nodes = [dict(token=root_token, parent=-1, depth=0, score=0.0, kind=LEAD, qt=0.0)]
    frontier = [0]
    for layer in range(cfg.depth):
        view = TreeView(torch.tensor([n["token"] for n in nodes]), torch.tensor([n["parent"] for n in nodes]),
                        torch.tensor([n["depth"] for n in nodes]))
        proposals = reference_select(draft_fn(view, torch.tensor(frontier)), cfg, rng, draft_to_target)
        new = []
        for parent, slots in zip(frontier, proposals):
            for token, log_score, kind, qt in slots:
                nodes.append(dict(token=token, parent=parent, depth=layer + 1,
                                  score=nodes[parent]["score"] + log_score, kind=kind, qt=qt))
                new.append(len(nodes) - 1)
        best = sorted(new, key=lambda i: (-nodes[i]["score"], i))[: cfg.k]
        frontier = sorted(best)
        if not frontier:
            break
    kept = [0] + sorted(sorted(range(1, len(nodes)), key=lambda i: (-nodes[i]["score"], i))[: cfg.tree_size])
    where = {old: new for new, old in enumerate(kept)}
    return dict(tokens=[nodes[i]["token"] for i in kept],
                parents=[where[nodes[i]["parent"]] if i else -1 for i in kept],
                depths=[nodes[i]["depth"] for i in kept], kinds=[nodes[i]["kind"] for i in kept],
                sample_prob=[nodes[i]["qt"] for i in kept])


def reference_verify(built, target_logits: torch.Tensor, cfg: SpecConfig, rng: RandomSource) -> VerifyResult:
    """Child-by-child verification of a :class:`rheo.tree.BuiltTree` (T > 0)."""
    parents, tokens, kinds = built.tree.parents.tolist(), built.tree.tokens.tolist(), built.kind.tolist()
    vocab = target_logits.shape[1]
    path, out, n_samples = [0], [], 0
    while True:
        node = path[-1]
        children = [c for c in range(len(parents)) if parents[c] == node]
        det = [c for c in children if kinds[c] != SAMPLE]
        sample = [c for c in children if kinds[c] == SAMPLE]
        r = target_probs(target_logits[node], cfg.temperature).tolist()
        q_t = [0.0] * vocab
        if sample:
            row = int(built.exp_row[node])
            for tok, w in zip(built.resid_ids[row].tolist(), built.resid_probs[row].tolist()):
                q_t[tok] = w
        order = ([("det", c) for c in det] + [("sample", c) for c in sample]
                 if cfg.verify_order == "deterministic_first" else
                 [("sample", c) for c in sample] + [("det", c) for c in det])
        accepted = None
        for how, c in order:
            tok = tokens[c]
            if how == "sample":
                qs = float(built.sample_prob[c])
                if bool(rng.bernoulli(torch.tensor([min(1.0, r[tok] / qs)], dtype=torch.float64))[0]):
                    accepted = c
                    break
                left = [max(a - b, 0.0) for a, b in zip(r, q_t)]
                beta = sum(left)
                r = [x / beta for x in left] if beta > 0 else r
            else:
                if bool(rng.bernoulli(torch.tensor([min(1.0, r[tok])], dtype=torch.float64))[0]):
                    accepted = c
                    break
                r[tok] = 0.0
                total = sum(r)
                r = [x / total for x in r] if total > 0 else r
        if accepted is None:
            y = int(rng.categorical(torch.tensor([r], dtype=torch.float64))[0])
            out.append(y)
            return VerifyResult(path=path, tokens=out, sample_accepted=n_samples)
        n_samples += kinds[accepted] == SAMPLE
        path.append(accepted)
        out.append(tokens[accepted])


# ------------------------------------------------------------------ expected acceptance (rheo.expected)
def reference_path_probs(built, target_logits: torch.Tensor, cfg: SpecConfig, static: bool) -> list[float]:
    """Probability that the accepted path holds each kept node, by recursion from the root, the
    children of a node tried one by one as the child-by-child verifiers state it
    (:func:`reference_verify`; ``static``: ``rheo.reference_static.reference_verify_static``)."""
    parents, tokens = built.tree.parents.tolist(), built.tree.tokens.tolist()
    reach = [0.0] * len(parents)

    def visit(node: int, prob: float) -> None:
        reach[node] = prob
        kids = [c for c in range(len(parents)) if parents[c] == node]
        if not kids:
            return
        row = target_logits[node].to(torch.float64).tolist()
        if cfg.greedy:
            best = max(range(len(row)), key=lambda i: (row[i], -i))
            accept = [(c, 1.0 if c == next((k for k in kids if tokens[k] == best), None) else 0.0) for c in kids]
        else:
            r = target_probs(target_logits[node].to(torch.float64), cfg.temperature).tolist()
            accept = (_static_accept if static else _dynamic_accept)(built, node, kids, r, cfg)
        for child, w in accept:
            visit(child, prob * w)

    visit(0, 1.0)
    return reach


def _draft_row(built, node: int, vocab: int) -> list[float]:
    """q~ (static trees: q_T) of ``node``'s expansion on the target vocabulary."""
    q = [0.0] * vocab
    row = int(built.exp_row[node])
    for tok, w in zip(built.resid_ids[row].tolist(), built.resid_probs[row].tolist()):
        q[tok] = w
    return q


def _residual(r: list[float], q: list[float]) -> list[float]:
    left = [max(a - b, 0.0) for a, b in zip(r, q)]
    return [x / sum(left) for x in left] if sum(left) > 0 else r


def _dynamic_accept(built, node: int, kids: list[int], r: list[float], cfg: SpecConfig) -> list[tuple[int, float]]:
    """(child, P(accepted | node reached)) in the order the child-by-child verifier tries them."""
    kinds, tokens = built.kind.tolist(), built.tree.tokens.tolist()
    det = [("det", c) for c in kids if kinds[c] != SAMPLE]
    sample = [("sample", c) for c in kids if kinds[c] == SAMPLE]
    order = det + sample if cfg.verify_order == "deterministic_first" else sample + det
    out, rejected = [], 1.0  # rejected: probability that every child tried so far was rejected
    for how, c in order:
        tok = tokens[c]
        a = min(1.0, r[tok] / float(built.sample_prob[c])) if how == "sample" else min(1.0, r[tok])
        out.append((c, rejected * a))
        rejected *= 1.0 - a
        if how == "sample":
            r = _residual(r, _draft_row(built, node, len(r)))
        else:
            r = [0.0 if i == tok else x for i, x in enumerate(r)]
            r = [x / sum(r) for x in r] if sum(r) > 0 else r
    return out


def _static_accept(built, node: int, kids: list[int], r: list[float], cfg: SpecConfig) -> list[tuple[int, float]]:
    """Recursive rejection sampling: siblings in draw order, each against the residual."""
    tokens = built.tree.tokens.tolist()
    q = _draft_row(built, node, len(r))
    out, rejected = [], 1.0
    for c in kids:
        x = tokens[c]
        q_i = q if cfg.replacement else [v / sum(q) for v in q]
        a = min(1.0, r[x] / q_i[x])
        out.append((c, rejected * a))
        rejected *= 1.0 - a
        r = _residual(r, q_i)
        if not cfg.replacement:
            q = [0.0 if i == x else v for i, v in enumerate(q)]
    return out
