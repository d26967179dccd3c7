"""What one target call costs, by phase: aten ops, host syncs and milliseconds (``make cycle-cost``).

For AR, Top-K, Rheo m=1 and rheo_auto (Rheo m=1, proxy=tempered) at T = 0 and 1 on the paper
tree, on a pair of :mod:`eval.device.cycle_shapes`, one generation each after a fixed random
prompt: the ops and syncs of :mod:`eval.device.op_counter` per target call and per phase (draft,
build, score, verify, commit, other; prefill excluded), then the milliseconds per target call and
phase of a second and third generation without the counter (the third is reported; the second
warms caches), on the device at hand.

Predicted speedup at a given tau (each speculative call emits tau tokens; an AR call emits one):

* ``speedup_ms``  = tau x AR ms per call / the method's ms per call (this device);
* ``speedup_ops`` = tau x AR ops per call / the method's ops per call: the speedup on a device where
  every op costs the same launch time, as eager PyTorch on a GPU with a small batch (one H200
  measured about 21 us per op on an 8B-shaped pair's loop, target forward included), so that
  ``gpu_ms`` = ops x :data:`US_PER_OP` / 1000 is that device's predicted ms per call.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from eval.device.cycle_shapes import CostPair
from eval.device.op_counter import CountingTimer, OpCounter, per_phase
from rheo.config import PAPER_TREE, SpecConfig
from rheo.timing import PHASES, PhaseTimer

#: host microseconds per dispatched op on a GPU in eager mode (measured on an H200, 8B-shaped pair)
US_PER_OP = 21.0
#: (label, method fields or None for AR)
METHODS = (("AR", None), ("Top-K", {"method": "topk"}), ("Rheo m=1", {"method": "rheo", "m": 1}),
           ("rheo_auto", {"method": "rheo", "m": 1, "proxy": "tempered"}))
TEMPERATURES = (0.0, 1.0)
COUNTED = ("draft", "build", "score", "verify", "commit", "other")


def spec_for(fields: dict, temperature: float) -> SpecConfig:
    """The paper tree's SpecConfig of a method at ``temperature``."""
    return SpecConfig(**{**dict(PAPER_TREE), **fields, "temperature": temperature})


def generate_once(pair: CostPair, fields: Optional[dict | SpecConfig], temperature: float, prompt: list[int],
                  new_tokens: int, timer, seed: int = 1):
    """One generation of ``new_tokens`` after ``prompt`` with ``timer``; returns the GenerationOutput.
    ``fields``: None (AR), a method's fields on the paper tree, or a whole SpecConfig."""
    from baselines.autoregressive import autoregressive_generate
    from rheo.decode import speculative_generate

    device = getattr(pair.drafter, "device", "cpu")
    generator = torch.Generator(device=device).manual_seed(seed)
    if fields is None:
        return autoregressive_generate(pair.target, prompt, new_tokens, temperature=temperature, generator=generator,
                                       device=device, timer=timer)
    spec = fields if isinstance(fields, SpecConfig) else spec_for(fields, temperature)
    return speculative_generate(pair.target, pair.drafter, prompt, new_tokens, spec,
                                generator=generator, timer=timer)


def count_run(pair: CostPair, fields: Optional[dict | SpecConfig], temperature: float, prompt: list[int],
              new_tokens: int) -> tuple[dict, dict, int, OpCounter]:
    """(ops by phase, syncs by phase, target calls, the counter) of one generation, prefill excluded."""
    counter = OpCounter()
    with counter:
        out = generate_once(pair, fields, temperature, prompt, new_tokens, CountingTimer(counter))
    ops, syncs = per_phase(counter.ops), per_phase(counter.syncs)
    ops.pop("prefill", None)
    syncs.pop("prefill", None)
    return ops, syncs, out.target_calls, counter


def time_run(pair: CostPair, fields: Optional[dict], temperature: float, prompt: list[int],
             new_tokens: int, repeats: int = 2) -> dict:
    """ms per target call by phase (and ``total``) of the last of ``repeats`` uncounted generations."""
    device = torch.device(getattr(pair.drafter, "device", "cpu"))
    for _ in range(repeats):
        timer = PhaseTimer(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = generate_once(pair, fields, temperature, prompt, new_tokens, timer)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = (time.perf_counter() - start) * 1e3
    summary = timer.summary(out.target_calls, wall)
    ms = {p: summary[f"phase_{p}_ms"] or 0.0 for p in PHASES}
    ms["total"] = (wall - (summary["phase_prefill_ms"] or 0.0)) / max(1, out.target_calls)
    return ms


def cost_rows(pair: CostPair, new_tokens: int = 24, prompt_len: int = 64, timed: bool = True,
              methods=METHODS, temperatures=TEMPERATURES, progress=None) -> list[dict]:
    """One tidy row per (method, T): ops, syncs and ms per target call, by phase and in total."""
    prompt = torch.randint(10, max(11, pair.vocab_size // 4), (prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    rows = []
    for temperature in temperatures:
        for label, fields in methods:
            ops, syncs, calls, _ = count_run(pair, fields, temperature, prompt, new_tokens)
            row = {"shape": pair.name, "method": label, "temperature": temperature, "new_tokens": new_tokens,
                   "prompt_len": prompt_len, "target_calls": calls}
            for p in COUNTED:
                row[f"ops_{p}"] = ops.get(p, 0) / calls
                row[f"syncs_{p}"] = syncs.get(p, 0) / calls
            row["ops"] = sum(ops.values()) / calls
            row["syncs"] = sum(syncs.values()) / calls
            if timed:
                ms = time_run(pair, fields, temperature, prompt, new_tokens)
                row.update({f"ms_{p}": ms[p] for p in COUNTED})
                row["ms"] = ms["total"]
            rows.append(row)
            if progress is not None:
                progress(row)
    return add_predictions(rows)


def add_predictions(rows: list[dict], tau: float = 1.0) -> list[dict]:
    """Each row plus ``beyond_forward`` (ops beyond AR's one-token forward, same T), ``gpu_ms``
    (ops x US_PER_OP) and the rows' AR reference columns (module docstring)."""
    ar = {(r["shape"], r["temperature"]): r for r in rows if r["method"] == "AR"}
    for r in rows:
        ref = ar.get((r["shape"], r["temperature"]))
        r["gpu_ms"] = r["ops"] * US_PER_OP / 1e3
        r["beyond_forward"] = None if ref is None else r["ops"] - ref["ops_score"]
        r["ar_ops"] = None if ref is None else ref["ops"]
        r["ar_ms"] = None if ref is None or "ms" not in ref else ref["ms"]
    return rows


def predicted_speedups(row: dict, tau: float) -> tuple[Optional[float], Optional[float]]:
    """(speedup_ms, speedup_ops) of a row at ``tau`` tokens per call (module docstring); AR rows: tau = 1."""
    tau = 1.0 if row["method"] == "AR" else tau
    by_ms = None if row.get("ar_ms") is None or not row.get("ms") else tau * row["ar_ms"] / row["ms"]
    by_ops = None if row.get("ar_ops") is None else tau * row["ar_ops"] / row["ops"]
    return by_ms, by_ops


def _cell(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def cost_tables(rows: list[dict], tau: float) -> str:
    """Markdown: per shape and temperature, ops and syncs per target call by phase, then ms by phase
    and the predicted speedups at ``tau`` (module docstring)."""
    from eval.report.markdown import markdown_table

    parts = []
    for shape, temperature in dict.fromkeys((r["shape"], r["temperature"]) for r in rows):
        sub = [r for r in rows if (r["shape"], r["temperature"]) == (shape, temperature)]
        ops = markdown_table(
            ["method", "calls"] + [f"ops {p}" for p in COUNTED] + ["ops", "beyond forward", "syncs",
                                                                  "syncs d/b/s/v/c/o"],
            [[r["method"], r["target_calls"]] + [_cell(r[f"ops_{p}"]) for p in COUNTED]
             + [_cell(r["ops"]), _cell(r["beyond_forward"]), _cell(r["syncs"]),
                "/".join(_cell(r[f"syncs_{p}"]) for p in COUNTED)] for r in sub])
        timed = [r for r in sub if "ms" in r]
        header = ["method"] + [f"ms {p}" for p in COUNTED] + ["ms", f"speedup @tau={tau:g} (ms)", "GPU ms (ops)",
                                                             f"speedup @tau={tau:g} (ops)"]
        times = markdown_table(header, [
            [r["method"]] + [_cell(r[f"ms_{p}"], 2) for p in COUNTED]
            + [_cell(r["ms"], 2), _cell(predicted_speedups(r, tau)[0], 2), _cell(r["gpu_ms"], 1),
               _cell(predicted_speedups(r, tau)[1], 2)] for r in timed]) if timed else ""
        parts.append(f"### {shape}, T = {temperature:g}\n\n{ops}\n" + (f"\n{times}\n" if times else ""))
    return "\n".join(parts)
