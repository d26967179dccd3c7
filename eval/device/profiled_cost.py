"""What one target call costs under an engine (``make cycle-cost ENGINE=static|graphs``), counted with
torch.profiler.

The op counter (:mod:`eval.device.op_counter`) is a dispatch mode, and Dynamo skips every frame while
one is active, so it cannot watch a compiled call. Here each phase of the timer is a profiler range and
one generation runs under ``torch.profiler``; every event is charged to the innermost phase around it:

* **kernels**: what the host launches. On a CPU: each Inductor kernel (``cpp_fused_*``) and each
  top-level aten op that does work (metadata ops - views, expands, allocations without a fill - and
  composites that only dispatch views are not counted; :data:`METADATA`, :data:`COMPOSITE`), which is
  how eager and extern calls (matmuls, attention) reach the device. On CUDA: the host's kernel
  launches (``cudaLaunchKernel``); a replayed CUDA graph launches its kernels on the device instead.
* **graph launches**: calls into a compiled region (``Torch-Compiled Region``) on a CPU, and
  ``cudaGraphLaunch`` on CUDA;
* **host syncs**: reads of a tensor by the host (``tolist``, ``numpy``, and the aten ops
  that wait for the device, as the op counter counts them);
* **ms**: per target call and phase, from a second, unprofiled generation.

Every engine is warmed by two generations first (compiles, tables made once, the captured builder's
first eager build, and the graph a new head session's first tree adds), so the counted generation is
the steady state. Phases: ``tree`` is the draft loop
and the build together (one captured function under static and graphs), then score, verify, commit
and other. On a CPU a count says how many calls the host makes: it predicts a GPU's launch-bound cost
under eager dispatch, not a CUDA graph's (there, one replay launches all of a graph's kernels).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Iterator, Optional

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from eval.device.cycle_shapes import CostPair
from eval.device.op_counter import METADATA_OPS, SYNC_OPS
from rheo.config import PAPER_TREE, SpecConfig
from rheo.timing import PhaseTimer

#: the phases of a table row (``tree`` = the draft loop and the build)
PHASES = ("tree", "score", "verify", "commit", "other")
MARK = "rheo phase/"
#: aten names (after ``aten::``) that change metadata only, from the op counter's list
METADATA = tuple(p[len("aten."):].rstrip(".") for p in METADATA_OPS)
#: composite aten ops counted only where something under them does work (a reshape may be a view)
COMPOSITE = ("to", "reshape", "contiguous", "type_as", "expand_as", "view_as", "flatten", "unflatten",
             "resolve_conj", "resolve_neg", "linear", "matmul", "einsum")
SYNCS = tuple(s.split(".")[1] for s in SYNC_OPS)
#: (label, method fields or None for AR), as eval.device.cycle_cost
METHODS = (("AR", None), ("Top-K", {"method": "topk"}), ("Rheo m=1", {"method": "rheo", "m": 1}),
           ("rheo_auto", {"method": "rheo", "m": 1, "proxy": "tempered"}))


class MarkTimer(PhaseTimer):
    """A PhaseTimer whose phases are also profiler ranges (nested: ``tree/draft``) and that counts the
    host's tensor reads per phase (``syncs``)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        self.stack: list[str] = []
        self.syncs: Counter = Counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        mark = name if not self.stack else f"{self.stack[0]}/{name}"
        self.stack.append(mark)
        try:
            with super().phase(name), record_function(MARK + mark):
                yield
        finally:
            self.stack.pop()

    @contextlib.contextmanager
    def reads_counted(self) -> Iterator[None]:
        saved = {m: getattr(torch.Tensor, m) for m in ("tolist", "numpy")}  # item: its aten op is an event

        def counted(method):
            def read(tensor, *args, **kwargs):
                self.syncs[self.stack[0] if self.stack else "other"] += 1
                return saved[method](tensor, *args, **kwargs)
            return read
        try:
            for m in saved:
                setattr(torch.Tensor, m, counted(m))
            yield
        finally:
            for m, original in saved.items():
                setattr(torch.Tensor, m, original)


def _phase_of(event) -> str:
    e = event
    while e is not None:
        if e.name.startswith(MARK):
            return e.name[len(MARK):].split("/")[0]
        e = e.cpu_parent
    return "other"


def _does_work(event) -> bool:
    """An aten event that launches something: not metadata, and a composite only with work under it."""
    name = event.name[len("aten::"):]
    if name.startswith(METADATA) and name not in ("t_", "select_scatter") or name in ("t", "select"):
        return False
    if name in COMPOSITE:
        return any(c.name.startswith("aten::") and _does_work(c) for c in event.cpu_children)
    return True


def _under(event, test) -> bool:
    """Some enclosing event passes ``test``."""
    e = event.cpu_parent
    while e is not None:
        if test(e):
            return True
        e = e.cpu_parent
    return False


def classify(events) -> dict[str, Counter]:
    """profiler events -> {"kernels", "graphs", "syncs"}: counts per phase (module docstring)."""
    out = {k: Counter() for k in ("kernels", "graphs", "syncs")}
    for e in events:
        name = e.name
        if name.startswith("cudaGraphLaunch") or name.startswith("Torch-Compiled Region"):
            out["graphs"][_phase_of(e)] += 1
        elif name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC") or "cpp_fused" in name:
            out["kernels"][_phase_of(e)] += 1
        elif name.startswith("aten::"):
            if name[len("aten::"):] in SYNCS and not _under(e, lambda a: a.name[len("aten::"):] in SYNCS):
                out["syncs"][_phase_of(e)] += 1
            if (not _under(e, lambda a: a.name.startswith("aten::") or "cpp_fused" in a.name) and _does_work(e)
                    and not _cuda_run(e)):
                out["kernels"][_phase_of(e)] += 1
    return out


def _cuda_run(event) -> bool:
    """On CUDA the launches are counted, not the aten ops that make them."""
    return any(getattr(k, "device_type", None) == torch.autograd.DeviceType.CUDA for k in event.kernels)


def engine_pair(pair: CostPair, engine: str):
    """(AR's target, the speculative target and drafter) for ``engine``: speculative_generate takes the
    eager pair and applies the config's engine itself."""
    from rheo.engine import engine_target
    return engine_target(pair.target, engine), pair.target, pair.drafter


def run_once(pair: CostPair, fields: Optional[dict], temperature: float, engine: str, prompt: list[int],
             new_tokens: int, timer, seed: int = 1):
    from baselines.autoregressive import autoregressive_generate
    from rheo.decode import speculative_generate

    device = getattr(pair.drafter, "device", "cpu")
    generator = torch.Generator(device=device).manual_seed(seed)
    ar_target, target, drafter = engine_pair(pair, engine)
    if fields is None:
        return autoregressive_generate(ar_target, prompt, new_tokens, temperature=temperature, generator=generator,
                                       device=device, timer=timer)
    spec = SpecConfig(**{**dict(PAPER_TREE), **fields, "temperature": temperature, "engine": engine})
    return speculative_generate(target, drafter, prompt, new_tokens, spec, generator=generator, timer=timer)


def profile_row(pair: CostPair, label: str, fields: Optional[dict], temperature: float, engine: str,
                prompt: list[int], new_tokens: int) -> dict:
    """One (method, T, engine): kernels, graph launches and syncs per target call by phase, ms."""
    device = torch.device(getattr(pair.drafter, "device", "cpu"))
    start = time.perf_counter()
    for _ in range(2):  # warm: compiles, first builds, and a new session's first tree (its own guard)
        run_once(pair, fields, temperature, engine, prompt, new_tokens, None)
    warm_s = time.perf_counter() - start
    timer = MarkTimer(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with timer.reads_counted(), profile(activities=activities) as prof:
        out = run_once(pair, fields, temperature, engine, prompt, new_tokens, timer)
    counts = classify(prof.events())
    counts["syncs"].update(timer.syncs)
    calls = max(1, out.target_calls)
    row = {"shape": pair.name, "method": label, "temperature": temperature, "engine": engine,
           "target_calls": out.target_calls, "warm_s": warm_s}
    for kind, c in counts.items():
        c.pop("prefill", None)
        for p in PHASES:
            row[f"{kind}_{p}"] = c.get(p, 0) / calls
        row[kind] = sum(c.values()) / calls
    row.update(_ms(pair, fields, temperature, engine, prompt, new_tokens, device))
    return row


def _ms(pair, fields, temperature, engine, prompt, new_tokens, device) -> dict:
    timer = PhaseTimer(device)
    start = time.perf_counter()
    out = run_once(pair, fields, temperature, engine, prompt, new_tokens, timer)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = (time.perf_counter() - start) * 1e3
    s = timer.summary(out.target_calls, wall)
    ms = {"ms_tree": (s["phase_draft_ms"] or 0.0) + (s["phase_build_ms"] or 0.0)}
    ms.update({f"ms_{p}": s[f"phase_{p}_ms"] or 0.0 for p in ("score", "verify", "commit", "other")})
    ms["ms"] = (wall - (s["phase_prefill_ms"] or 0.0)) / max(1, out.target_calls)
    return ms


def profile_rows(pair: CostPair, engines: tuple[str, ...], new_tokens: int = 8, prompt_len: int = 64,
                 methods=METHODS, temperatures=(0.0, 1.0), progress=None) -> list[dict]:
    prompt = torch.randint(10, max(11, pair.vocab_size // 4), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    if "graphs" in engines:  # Inductor's C++ kernels show in the profiler only when compiled with this
        import torch._inductor.config as inductor

        inductor.cpp.enable_kernel_profile = True
    rows = []
    for engine in engines:
        for temperature in temperatures:
            for label, fields in methods:
                rows.append(profile_row(pair, label, fields, temperature, engine, prompt, new_tokens))
                if progress is not None:
                    progress(rows[-1])
    return rows


def rheo_within(rows: list[dict], factor: float = 1.05) -> list[tuple[str, float, str, float, bool]]:
    """(engine, T, method, kernels / Top-K's, within ``factor``) for every Rheo row."""
    out = []
    topk = {(r["engine"], r["temperature"]): r["kernels"] for r in rows if r["method"] == "Top-K"}
    for r in rows:
        ref = topk.get((r["engine"], r["temperature"]))
        if r["method"] not in ("AR", "Top-K") and ref:
            ratio = r["kernels"] / ref
            out.append((r["engine"], r["temperature"], r["method"], ratio, ratio <= factor))
    return out


def profile_tables(rows: list[dict]) -> str:
    """Markdown: per T, a row per (method, engine) with kernels, graph launches and syncs per target
    call by phase, and ms; then the Rheo / Top-K kernel ratios."""
    from eval.report.markdown import markdown_table

    parts = []
    for temperature in dict.fromkeys(r["temperature"] for r in rows):
        sub = sorted((r for r in rows if r["temperature"] == temperature), key=lambda r: (r["method"], r["engine"]))
        table = markdown_table(
            ["method", "engine", "calls"] + [f"kernels {p}" for p in PHASES]
            + ["kernels", "graph launches", "syncs", "ms tree", "ms score", "ms", "warm-up s"],
            [[r["method"], r["engine"], r["target_calls"]] + [f"{r[f'kernels_{p}']:,.1f}" for p in PHASES]
             + [f"{r['kernels']:,.1f}", f"{r['graphs']:.1f}", f"{r['syncs']:.1f}", f"{r['ms_tree']:.2f}",
                f"{r['ms_score']:.2f}", f"{r['ms']:.2f}", f"{r['warm_s']:.0f}"] for r in sub])
        parts.append(f"### T = {temperature:g}, per target call\n\n{table}\n")
    checks = [f"- {e}, T = {t:g}: {m} launches {ratio:.3f}x Top-K's kernels ({'within' if ok else 'OVER'} 1.05x)"
              for e, t, m, ratio, ok in rheo_within(rows)]
    return "\n".join(parts) + "\n### Rheo's kernels against Top-K's\n\n" + "\n".join(checks) + "\n"
