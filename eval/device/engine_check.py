"""The engine section of ``make gpu-check`` (``--engine static|graphs``): the eager engine against the
chosen one on a random pair of a cost shape (:mod:`eval.device.cycle_shapes`: ``llama31_8b`` on a GPU,
``tiny32`` or a reduced shape in a CPU rehearsal).

* **per call**: the target's one-token call and a tree call (``tree_nodes`` nodes, padded to its
  bucket): median ms of interleaved calls, kernels and graph launches per call (torch.profiler,
  :func:`eval.device.profiled_cost.classify`), the largest logit difference, and the graphs Dynamo
  made over ``lengths`` calls at growing cache lengths after the first (0 when nothing recompiles);
* **per cycle**: AR, Top-K and Rheo m=1 at T = 0 on the paper tree: ms per target call, tau, whether
  the tokens are eager's, each cycle in AR-step equivalents (the cycle's ms over the same engine's AR
  step) and Rheo's cycle over Top-K's.

Failures: a logit difference over the dtype's tolerance, a recompile, or (fp32) tokens that differ.
The speed marks (a one-token call within 8 ms on the 8B shape, cycles within 2.0 AR steps, Rheo within
Top-K x 1.03) are reported, not failed: they are what the engine is for, measured where it runs.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from eval.device.cycle_shapes import CostPair
from eval.device.profiled_cost import classify, run_once
from rheo.models.base import DraftTree
from rheo.tree import ancestor_mask

#: largest logit difference allowed between the engine and eager, by dtype
LOGIT_TOL = {"float32": 1e-4, "bfloat16": 1.0, "float16": 0.5}
CYCLE_METHODS = (("AR", None), ("Top-K", {"method": "topk"}), ("Rheo m=1", {"method": "rheo", "m": 1}))


def random_tree(n: int, depth: int, vocab: int, device, seed: int = 0) -> DraftTree:
    """n nodes, each below a random earlier node of depth < ``depth`` (root first), with host lists."""
    g = torch.Generator().manual_seed(seed)
    parents, depths = [-1], [0]
    for i in range(1, n):
        open_ = [j for j in range(i) if depths[j] < depth]
        parents.append(open_[int(torch.randint(len(open_), (1,), generator=g))])
        depths.append(depths[parents[-1]] + 1)
    tokens = torch.randint(vocab, (n,), generator=g)
    p = torch.tensor(parents)
    return DraftTree(tokens=tokens.to(device), parents=p.to(device), depths=torch.tensor(depths, device=device),
                     ancestor_mask=ancestor_mask(p, depth).to(device), host=(parents, tokens.tolist()))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _call(session, tree: DraftTree, device) -> float:
    """ms of one scoring call (row 0 read, as a verifier reads it), then the tree dropped."""
    _sync(device)
    start = time.perf_counter()
    session.score_tree(tree).logits[0]
    _sync(device)
    ms = (time.perf_counter() - start) * 1e3
    session.discard()
    return ms


@torch.no_grad()
def per_call(pair: CostPair, engine: str, dtype: str, prompt_len: int = 64, tree_nodes: int = 61,
             lengths: int = 20, repeats: int = 5) -> list[dict]:
    """One row per case (module docstring)."""
    from rheo.engine import engine_target

    device = pair.target.device
    prompt = torch.randint(10, max(11, pair.vocab_size // 4), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    sessions = {"eager": pair.target.new_session(), engine: engine_target(pair.target, engine).new_session()}
    for s in sessions.values():
        s.prefill(prompt)
    rows = []
    for case, n in (("target call, 1 token", 1), (f"target call, tree of {tree_nodes}", tree_nodes)):
        tree = random_tree(n, 8, pair.vocab_size, device, seed=n)
        logits = {}
        for name, s in sessions.items():
            logits[name] = s.score_tree(tree).logits.materialize().float()
            s.discard()
        ms = {name: [] for name in sessions}
        for _ in range(repeats):  # interleaved: eager, engine, eager, ...
            for name, s in sessions.items():
                ms[name].append(_call(s, tree, device))
        launches = {name: _launches(s, tree, device) for name, s in sessions.items()}
        counters = torch._dynamo.utils.counters
        before = counters["stats"]["unique_graphs"]
        for _ in range(lengths):  # growing cache lengths: one token committed after each call (both, in step)
            for s in sessions.values():
                s.score_tree(tree)
                s.commit([0])
        rows.append({"case": case, "eager_ms": statistics.median(ms["eager"]), "ms": statistics.median(ms[engine]),
                     "speedup": statistics.median(ms["eager"]) / statistics.median(ms[engine]),
                     "eager_kernels": launches["eager"][0], "kernels": launches[engine][0],
                     "graph_launches": launches[engine][1],
                     "logit_diff": float((logits["eager"] - logits[engine]).abs().max()),
                     "new_graphs": counters["stats"]["unique_graphs"] - before})
        rows[-1]["ok"] = rows[-1]["logit_diff"] <= LOGIT_TOL.get(dtype, 1.0) and rows[-1]["new_graphs"] == 0
    return rows


def _launches(session, tree: DraftTree, device) -> tuple[int, int]:
    """(kernels, graph launches) of one scoring call."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    with profile(activities=activities) as prof:
        _call(session, tree, device)
    counts = classify(prof.events())
    return sum(counts["kernels"].values()), sum(counts["graphs"].values())


def per_cycle(pair: CostPair, engine: str, dtype: str, new_tokens: int = 32, prompt_len: int = 64,
              repeats: int = 1) -> list[dict]:
    """One row per (method, engine) at T = 0 on the paper tree (module docstring): the median ms of
    ``repeats`` timed runs after a warm-up run (``runs``; a single run has no spread to read), and the
    graphs compiled inside the timed runs (``compiles``, 0 after the warm-up)."""
    from rheo.engine import compile_count

    prompt = torch.randint(10, max(11, pair.vocab_size // 4), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    device = pair.target.device
    rows = []
    for label, fields in CYCLE_METHODS:
        tokens = {}
        for name in ("eager", engine):
            run_once(pair, fields, 0.0, name, prompt, new_tokens, None)  # warm: compiles, first builds
            times, compiled = [], compile_count()
            for _ in range(repeats):
                _sync(device)
                start = time.perf_counter()
                out = run_once(pair, fields, 0.0, name, prompt, new_tokens, None)
                _sync(device)
                times.append((time.perf_counter() - start) * 1e3 / max(1, out.target_calls))
            ms = statistics.median(times)
            tokens[name] = out.tokens
            rows.append({"method": label, "engine": name, "ms_per_call": ms, "tau": out.tau, "runs": repeats,
                         "ms_per_token": ms / out.tau, "same_tokens": out.tokens == tokens["eager"],
                         "compiles": compile_count() - compiled})
    for r in rows:
        ar = next(x for x in rows if x["method"] == "AR" and x["engine"] == r["engine"])
        topk = next(x for x in rows if x["method"] == "Top-K" and x["engine"] == r["engine"])
        r["ar_steps"] = r["ms_per_call"] / ar["ms_per_call"]
        r["vs_topk"] = r["ms_per_call"] / topk["ms_per_call"]
        r["ok"] = (r["same_tokens"] or dtype != "float32") and r["compiles"] == 0
    return rows


#: where the speed marks apply: the 8B shape on one GPU
MARKED_SHAPE = "llama31_8b"


def marks(calls: list[dict], cycles: list[dict], engine: str, shape: str = MARKED_SHAPE,
          device: str = "cuda") -> list[str]:
    """The speed marks (module docstring), each met or not, where they apply (the 8B shape on CUDA);
    elsewhere one line says why they are not read, and what the run does show."""
    if shape != MARKED_SHAPE or torch.device(device).type != "cuda":
        return [f"speed marks not evaluated: they are set for the {MARKED_SHAPE} shape on one GPU, and this run is "
                f"{shape} on {torch.device(device).type}; what it shows is exactness (logits, tokens), recompiles and "
                f"the kernel and graph-launch counts, not GPU speed"]
    one = calls[0]["ms"]
    out = [f"one-token target call {one:.2f} ms (mark: <= 8 ms on the 8B shape): {'met' if one <= 8 else 'not met'}"]
    for r in cycles:
        if r["engine"] == engine and r["method"] != "AR":
            out.append(f"{r['method']} cycle = {r['ar_steps']:.2f} AR steps (mark: <= 2.0): "
                       f"{'met' if r['ar_steps'] <= 2.0 else 'not met'}")
    rheo = next(r for r in cycles if r["engine"] == engine and r["method"] == "Rheo m=1")
    out.append(f"Rheo m=1 cycle = {rheo['vs_topk']:.3f}x Top-K's (mark: <= 1.03): "
               f"{'met' if rheo['vs_topk'] <= 1.03 else 'not met'}")
    return out


def engine_page(calls: list[dict], cycles: list[dict], parity: list[dict], *, engine: str, shape: str, dtype: str,
                device: str, repeats: int, model: str, late: bool, time_limit: float) -> str:
    """The engine section of ``make gpu-check ENGINE=...``: per call, per cycle (with how many timed runs each
    cell is), the marks, and the embedded pair's tau and tokens against eager (or why it was not run)."""
    from eval.device.devreport import md_table

    runs = (f"each cell the median of {repeats} timed runs after a warm-up run" if repeats > 1 else
            "each cell one timed run after a warm-up run: a single sample, with no spread measured, so its "
            "ratios (AR steps, vs Top-K) are not a comparison")
    return (f"## Engine {engine} against eager ({shape}, {dtype}; T = 0, paper tree)\n\n"
            + md_table(calls, ["case", "eager_ms", "ms", "speedup", "eager_kernels", "kernels", "graph_launches",
                               "logit_diff", "new_graphs", "ok"])
            + f"\n\nPer cycle: {runs}; compiles = graphs compiled inside the timed runs.\n\n"
            + md_table(cycles, ["method", "engine", "ms_per_call", "tau", "ms_per_token", "ar_steps",
                                "vs_topk", "same_tokens", "runs", "compiles"])
            + "\n\n" + "\n".join(f"- {m}" for m in marks(calls, cycles, engine, shape, device))
            + f"\n\n### Embedded pair ({model}, float32): tau and tokens against eager\n\n"
            + (f"not run: the time limit ({time_limit:.0f} s) had passed" if late else
               md_table(parity, ["method", "engine", "ms_per_call", "tau", "same_tokens", "compiles"])))
