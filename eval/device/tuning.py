"""Tune the draft tree for the running machine: measured costs, measured tau, expected tokens/s.

The speed of speculative decoding is tau / (time per cycle), and the time per
cycle of a tree shape (K, depth, R) on a machine is, per dtype,

    cycle(K, depth, R) = target(R + 1) + (depth - 1) * head(K) + core(K, depth, R) + commit

* ``target(n)`` - the target scoring n nodes (root + R drafted) on top of a cache;
* ``head(f)``   - one drafted layer of the head over a frontier of f = K nodes (layer 0
  reuses the root logits of the last commit, so a tree costs depth - 1 head layers);
* ``core``      - candidate selection, tree build, pruning, mask and verification
  (measured from the tau runs' phase timings: ``build + verify + other``);
* ``commit``    - target KV compaction + the head's pass over ~tau accepted tokens.

Tau depends on the drafter, the tree shape, the method and T, not on the hardware:
it is measured by real generations on held-out *training-style* prompts (never the
benchmark's, see :func:`tuning_prompts`). Expected tokens/s = 1000 * tau / cycle
(ms); expected speedup = that over AR's measured tokens/s in the same dtype.
Generations of the tau runs are timed too, which gives the measured speedup of the
dtype they ran in. This is Sequoia's idea (size the tree by measured hardware cost)
for dynamic trees.
"""

from __future__ import annotations

import bisect
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from eval.measure.generation import generate
from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.models.base import DraftTree, TreeView
from rheo.timing import PhaseTimer
from rheo.tree import ancestor_mask

Shape = tuple[int, int, int]  # (k, depth, tree_size)
#: the tuned methods: (name, the fields they are tuned with besides the tree shape)
METHODS = (("topk", {}), ("rheo", {"m": 1}))


def label(method: str, fields: dict) -> str:
    """The variant label of a tuned method ("rheo m=1"), as the report and the tables name it."""
    return get_method(method).variant(SpecConfig.for_method(method=method, **fields))


def tuning_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` held-out training-style prompts (rheo.training.prompts' held-out split; no benchmark text)."""
    from rheo.training.prompts import build_prompts, split_prompts

    _, held_out = split_prompts(build_prompts(seed))
    if len(held_out) < n:
        raise ValueError(f"asked for {n} tuning prompts, the held-out split has {len(held_out)}")
    return list(held_out[:n])


def synthetic_tree(n: int, root: int, vocab: int, generator: torch.Generator, device="cpu") -> DraftTree:
    """A tree of n nodes (root + n - 1), each node the child of node (i - 1) // 3: [n] tensors."""
    parents = torch.tensor([-1] + [(i - 1) // 3 for i in range(1, n)], dtype=torch.long)
    depths = torch.zeros(n, dtype=torch.long)
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
    tokens = torch.randint(0, vocab, (n,), generator=generator)
    tokens[0] = root
    return DraftTree(tokens=tokens.to(device), parents=parents.to(device), depths=depths.to(device),
                     ancestor_mask=ancestor_mask(parents, n).to(device))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], object], reps: int, device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


@torch.inference_mode()
def measure_costs(pair, context: Sequence[int], nodes: Sequence[int], widths: Sequence[int], reps: int,
                  device="cpu", seed: int = 0) -> dict:
    """target_ms[n], head_ms[f] (one drafted layer at depth 1) and commit_ms (3 accepted tokens)."""
    g = torch.Generator().manual_seed(seed)
    ids = [int(t) for t in context]
    t_sess, d_sess = pair.target.new_session(), pair.drafter.new_session()
    d_sess.prefill(ids, t_sess.prefill(ids[:-1]))
    vocab = int(pair.target.vocab_size)
    target_ms = {}
    for n in nodes:
        tree = synthetic_tree(int(n), ids[-1], vocab, g, device)
        zero = torch.zeros(1, dtype=torch.long, device=device)

        def score_and_drop():
            t_sess.score_tree(tree)
            t_sess.commit(zero)  # keeps the root: the cache grows by one position per call
        target_ms[int(n)] = _median_ms(score_and_drop, reps, device)
    head_ms = {}
    for f in widths:
        f = int(f)
        tokens = torch.randint(0, vocab, (f + 1,), generator=g).to(device)
        parents = torch.tensor([-1] + [0] * f, dtype=torch.long, device=device)
        depths = torch.tensor([0] + [1] * f, dtype=torch.long, device=device)
        view = TreeView(tokens, parents, depths)
        d_sess.draft(view, torch.zeros(1, dtype=torch.long, device=device))  # layer 0: root hidden
        frontier = torch.arange(1, f + 1, device=device)
        head_ms[f] = _median_ms(lambda: d_sess.draft(view, frontier), reps, device)
    chain = synthetic_tree(8, ids[-1], vocab, g, device)
    path = torch.tensor([0, 1, 4], dtype=torch.long, device=device)  # a root-first chain: 1's child is 4

    def score_commit():
        out = t_sess.score_tree(chain)
        t_sess.commit(path)
        d_sess.commit(chain.tokens[path], out.features[path] if out.features is not None else None)
    both = _median_ms(score_commit, reps, device)
    commit_ms = max(0.0, both - _interp(target_ms, 8))
    return {"target_ms": target_ms, "head_ms": head_ms, "commit_ms": commit_ms}


def _interp(table: dict, x: float) -> float:
    """Linear interpolation in {x: y} (clamped at the ends)."""
    xs = sorted(table)
    if x <= xs[0]:
        return table[xs[0]]
    if x >= xs[-1]:
        return table[xs[-1]] * x / xs[-1] if xs[-1] > 0 else table[xs[-1]]
    i = bisect.bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return table[x0] + (table[x1] - table[x0]) * (x - x0) / (x1 - x0)


@dataclass
class TauRun:
    spec: SpecConfig  # the method, its tree and T
    new_tokens: int
    target_calls: int
    wall_s: float
    phases_ms: dict  # total ms per phase name over the runs (rheo.timing names)

    @property
    def method(self) -> str:
        """The variant label ('ar', 'topk', 'rheo m=1')."""
        return get_method(self.spec.method).variant(self.spec)

    @property
    def shape(self) -> Optional[Shape]:
        return None if get_method(self.spec.method).is_reference else (self.spec.k, self.spec.depth,
                                                                       self.spec.tree_size)

    @property
    def temperature(self) -> float:
        return self.spec.temperature

    @property
    def tau(self) -> float:
        return self.new_tokens / max(1, self.target_calls)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def core_ms(self) -> float:
        """Per cycle: build + verify + other (the non-model work)."""
        p = self.phases_ms
        model = p.get("draft", 0.0) + p.get("score", 0.0) + p.get("commit", 0.0) + p.get("prefill", 0.0)
        return (self.wall_s * 1e3 - model) / max(1, self.target_calls)


@torch.inference_mode()
def run_tau(pair, prompts: Sequence[Sequence[int]], spec: SpecConfig, max_new: int, seed: int,
            device="cpu") -> TauRun:
    """Generate from every prompt with one config (eval.measure.generation.generate); totals over the prompts."""
    eos = list(pair.eos_token_ids) or None
    new = calls = 0
    wall = 0.0
    phases: dict = {}
    for i, prompt in enumerate(prompts):
        gen = torch.Generator(device=torch.device(device).type).manual_seed(seed + i)
        tm = PhaseTimer(device)
        _sync(device)
        t0 = time.perf_counter()
        out = generate(pair, spec, prompt, max_new, gen, eos, device, timer=tm)
        _sync(device)
        wall += time.perf_counter() - t0
        new += len(out.tokens)
        calls += out.target_calls
        for name, ms in tm.totals_ms().items():
            phases[name] = phases.get(name, 0.0) + ms
    return TauRun(spec, new, calls, wall, phases)


def tree_spec(method: str, shape: Shape, temperature: float, **fields) -> SpecConfig:
    """``method`` on the tree ``shape`` = (k, depth, tree_size) at ``temperature``."""
    k, depth, size = shape
    return SpecConfig.for_method(method=method, k=k, depth=depth, tree_size=size, temperature=temperature, **fields)


def expected(costs: dict, run: TauRun) -> dict:
    """Expected ms per cycle and tokens/s of a tau run's config under ``costs`` (one dtype)."""
    k, depth, size = run.shape
    cycle = (_interp(costs["target_ms"], size + 1) + (depth - 1) * _interp(costs["head_ms"], k)
             + run.core_ms + costs["commit_ms"])
    return {"cycle_ms": cycle, "tokens_per_s": 1e3 * run.tau / cycle}


def pick_best(rows: list[dict], method: str) -> Optional[dict]:
    """The (shape, dtype) of ``method`` with the best expected tokens/s averaged over temperatures."""
    groups: dict = {}
    for r in rows:
        if r["method"] == method:
            groups.setdefault((tuple(r["shape"]), r["dtype"]), []).append(r["expected_tokens_per_s"])
    if not groups:
        return None
    (shape, dtype), vals = max(groups.items(), key=lambda kv: statistics.mean(kv[1]))
    return {"method": method, "shape": shape, "dtype": dtype, "expected_tokens_per_s": statistics.mean(vals)}
