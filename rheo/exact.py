"""Exact output distributions, by enumerating every random choice of the decoder.

:class:`ScriptedRandom` is a :class:`~rheo.random.RandomSource` that replays a script
of choices and, at the first choice past the script, stops the run and reports the
options with their probabilities. :func:`enumerate_outcomes` explores every script
depth-first, so for small vocabularies and trees it yields the *exact* distribution
of whatever a run returns. The cycle-level variant recurses over decoding cycles
with memoisation, which keeps multi-token distributions cheap.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable, Optional, Sequence

import torch

from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.models.base import DraftModel, TargetModel
from rheo.probs import target_probs


class _Branch(Exception):
    def __init__(self, options: list[tuple[Hashable, float]]) -> None:
        super().__init__("choice past the script")
        self.options = options


class ScriptedRandom:
    def __init__(self, script: Sequence[Hashable]) -> None:
        self.script = list(script)
        self.pos = 0
        self.prob = 1.0

    def _decide(self, options: list[tuple[Hashable, float]]) -> Hashable:
        if self.pos == len(self.script):
            raise _Branch(options)
        value = self.script[self.pos]
        self.pos += 1
        self.prob *= dict(options)[value]
        return value

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        rows = probs.to(torch.float64)
        rows = rows / rows.sum(-1, keepdim=True)
        picks = [self._decide([(i, float(row[i])) for i in torch.nonzero(row > 0).flatten().tolist()])
                 for row in rows]
        return torch.tensor(picks, dtype=torch.long, device=probs.device)

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:
        out = []
        for p in probs.to(torch.float64).clamp(0, 1).tolist():
            out.append(self._decide([(v, w) for v, w in ((True, p), (False, 1.0 - p)) if w > 0]))
        return torch.tensor(out, dtype=torch.bool, device=probs.device)


def enumerate_runs(run: Callable[[ScriptedRandom], object], max_runs: int = 200_000):
    """Yield (result, probability) for every complete script of ``run``."""
    stack: list[tuple] = [()]
    runs = 0
    while stack:
        script = stack.pop()
        rng = ScriptedRandom(script)
        runs += 1
        if runs > max_runs:
            raise RuntimeError(f"more than {max_runs} runs: state space too large to enumerate")
        try:
            result = run(rng)
        except _Branch as branch:
            stack.extend(script + (value,) for value, w in branch.options if w > 0)
            continue
        yield result, rng.prob


def enumerate_outcomes(run: Callable[[ScriptedRandom], Hashable], max_runs: int = 200_000) -> dict:
    """Exact distribution of ``run(rng)`` over all scripts: {outcome: probability}."""
    dist: dict = defaultdict(float)
    for outcome, w in enumerate_runs(run, max_runs):
        dist[outcome] += w
    return dict(dist)


def cycle_distribution(target: TargetModel, drafter: DraftModel, context: Sequence[int],
                       config: SpecConfig) -> dict[tuple[int, ...], float]:
    """Exact distribution of the tokens one cycle emits after ``context`` (root last).

    Two levels: every random tree (the samples drawn while drafting), then, for
    each tree, every outcome of verification on it.
    """
    if getattr(config, "adapt", "none") != "none":
        raise ValueError(f"adapt={config.adapt!r} chooses each cycle's setting from earlier cycles, so one cycle "
                         "has no distribution of its own: enumerate the whole loop (enumerate_outcomes over "
                         "rheo.decode.generate_with_source)")
    ids = list(context)
    method = get_method(config.method)
    t_sess, d_sess = target.new_session(), drafter.new_session()
    d_sess.prefill(ids, t_sess.prefill(ids[:-1]))

    def draft(rng: ScriptedRandom):
        return method.build_tree(d_sess.draft, ids[-1], config, rng, drafter.draft_to_target)

    out: dict = defaultdict(float)
    for built, w_tree in enumerate_runs(draft):
        logits = t_sess.score_tree(built.tree).logits
        for emitted, w in enumerate_runs(lambda rng: tuple(method.verify_tree(built, logits, config, rng).tokens)):
            out[emitted] += w_tree * w
    return dict(out)


def verifier_path_probs(verify: Callable, built, target_logits: torch.Tensor, config: SpecConfig) -> list[float]:
    """Exact probability that ``verify`` (a registered verifier) puts each kept node of ``built`` on
    its accepted path, by enumerating the verifier's random choices on this one tree. Their sum is
    the expected number of emitted tokens (accepted drafted tokens + the bonus)."""
    reach = [0.0] * built.tree.num_nodes
    for path, w in enumerate_runs(lambda rng: tuple(verify(built, target_logits, config, rng).path)):
        for node in path:
            reach[node] += w
    return reach


def decoder_distribution(target: TargetModel, drafter: DraftModel, prompt: Sequence[int],
                         n_tokens: int, config: SpecConfig) -> dict[tuple[int, ...], float]:
    """Exact distribution of the decoder's first ``n_tokens`` tokens after ``prompt``."""
    memo: dict[tuple[int, ...], dict] = {}

    def rec(context: tuple[int, ...], need: int) -> dict:
        if need == 0:
            return {(): 1.0}
        if (context, need) not in memo:
            out: dict = defaultdict(float)
            for emitted, w in cycle_distribution(target, drafter, context, config).items():
                head = emitted[:need]
                for tail, v in rec(context + head, need - len(head)).items():
                    out[head + tail] += w * v
            memo[(context, need)] = dict(out)
        return memo[(context, need)]

    return rec(tuple(int(t) for t in prompt), n_tokens)


def target_distribution(logits_fn: Callable[[tuple[int, ...]], torch.Tensor], prompt: Sequence[int],
                        n_tokens: int, temperature: float,
                        min_prob: float = 0.0) -> dict[tuple[int, ...], float]:
    """The target's own distribution over its next ``n_tokens`` tokens (ancestral sampling)."""
    out: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(n_tokens):
        nxt: dict[tuple[int, ...], float] = {}
        for seq, w in out.items():
            p = target_probs(torch.as_tensor(logits_fn(tuple(prompt) + seq)), temperature)
            for tok, pt in enumerate(p.tolist()):
                if w * pt > min_prob:
                    nxt[seq + (tok,)] = w * pt
        out = nxt
    return out


def total_variation(a: dict, b: dict, keys: Optional[set] = None) -> float:
    keys = keys if keys is not None else set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)
