"""The cost model of a plan: milliseconds per target call on a GPU kind, and bytes per stored row.

Per target call (batch 1, eager PyTorch), the larger of two times:

* **host**: the ops the call launches x :data:`eval.device.cycle_cost.US_PER_OP` (21 us, measured on one
  H200 on an 8B-shaped pair's loop). The ops per call and method come from the committed cycle-cost
  table (:data:`CYCLE_COST`, ``make cycle-cost``: a tiny pair with Llama-3.1-8B's 32 layers, the
  paper tree); the target's forward (the ``score`` phase) is scaled by the target's layers / 32.
  Launch time is a property of the host and of PyTorch, so it is taken to be the same on every kind;
* **device**: reading the target's weights once, and the head's once per draft step, at the kind's
  memory bandwidth, plus 2 x parameters x scored tokens at its dense bf16 peak.

Under ``engine=graphs`` (:func:`graphs_launches`, the graphs rows of :data:`CYCLE_COST_GRAPHS`) the host
launches each graph once and, one by one, the kernels of the phases that launch no graph (the verifier's
walk, what is left eager), at the same cost per launch; the device adds :data:`US_PER_GRAPH_KERNEL` per
kernel inside a graph. Those counts were taken with Inductor on a CPU, where nothing is replayed: they say
how many launches the host makes and which phases stay eager, not what CUDA's kernels are or cost.

Everything else is left out: prefill, warm-up, model loading, sampling on the host, host slowdowns
(the H200 run of results/gpu/ saw windows 2x slower), and tokens past an early end of turn (every
generation is counted at max_new_tokens, an upper bound).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from rheo.methods import kind_of, reads
from rheo.models.catalog import BUILTIN_SMOLLM2, MODELS
from rheo.paths import REPO_ROOT

#: ops per target call by method and temperature (``make cycle-cost``, the tiny 32-layer pair)
CYCLE_COST = REPO_ROOT / "results" / "tables" / "cycle_cost_tiny32_cpu.parquet"
CYCLE_COST_LAYERS = 32
#: kernels and graph launches per target call and phase under engine=graphs (``make cycle-cost ENGINE=graphs``:
#: the same tiny 32-layer pair, Inductor on a CPU, eager rows beside)
CYCLE_COST_GRAPHS = REPO_ROOT / "results" / "tables" / "cycle_cost_tiny32_cpu_graphs.parquet"
#: the table each engine's host cost reads
COST_TABLES = {"eager": CYCLE_COST, "graphs": CYCLE_COST_GRAPHS}
PHASES = ("tree", "score", "verify", "commit", "other")
#: device time per kernel inside a replayed CUDA graph beyond its reads and arithmetic (an assumption:
#: the gap between back-to-back kernels of a graph is a few microseconds; not measured here)
US_PER_GRAPH_KERNEL = 3.0
#: tokens per target call assumed for every tree method (the paper's mean acceptance lengths are
#: 5.04 for Top-K and 5.25 for Rheo on its 8B and 13B pairs; `make cycle-cost` predicts at 5 too)
DEFAULT_TAU = 5.0


@dataclass(frozen=True)
class GPUKind:
    """A GPU's public datasheet figures (the SXM parts): memory, HBM bandwidth, dense bf16 peak."""

    name: str
    memory_gb: float
    bandwidth_tbs: float
    bf16_tflops: float


GPUS = {g.name: g for g in (GPUKind("A100", 80, 2.039, 312), GPUKind("H100", 80, 3.35, 989),
                            GPUKind("H200", 141, 4.8, 989))}


@dataclass(frozen=True)
class Shape:
    """What the cost model reads of a pair: parameters (target; head, read at each draft step) and layers."""

    target_params: float
    head_params: float
    layers: int
    bytes_per_param: int = 2


#: shapes by the catalog's target (public model cards; an EAGLE-3 head is one decoder layer, the fusion
#: layer and a 32k-token draft head: about 0.4B parameters at 8B widths, 0.6B at 13B widths)
TARGET_SHAPES = {"meta-llama/Llama-3.1-8B-Instruct": Shape(8.03e9, 0.40e9, 32),
                 "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": Shape(8.03e9, 0.40e9, 32),
                 "lmsys/vicuna-13b-v1.3": Shape(13.0e9, 0.60e9, 40),
                 BUILTIN_SMOLLM2: Shape(0.135e9, 0.03e9, 30)}


def shape_of(model: str) -> Optional[Shape]:
    """The shape of a catalog model's target (None for a pair of your own or a test pair)."""
    entry = MODELS.get(model)
    return None if entry is None else TARGET_SHAPES.get(entry.target)


def cost_label(method: str, proxy: Optional[str]) -> str:
    """The cycle-cost table's row that stands for a method: reference methods are AR; Rheo with the
    tempered proxy is rheo_auto; other Rheo settings are Rheo m=1; every other tree method Top-K's."""
    if kind_of(method) == "reference":  # (the registry's kind; baselines registers them)
        return "AR"
    if method == "rheo_auto":
        return "rheo_auto"
    if reads(method, "m"):  # Rheo: the one tree method with leads
        return "rheo_auto" if proxy == "tempered" else "Rheo m=1"
    return "Top-K"


@lru_cache(maxsize=1)
def _ops_table() -> dict:
    import pandas as pd

    rows = pd.read_parquet(CYCLE_COST)
    return {(r.method, float(r.temperature)): (float(r.ops), float(r.ops_score)) for r in rows.itertuples()}


def ops_per_call(label: str, temperature: float, layers: int) -> float:
    """Ops one target call launches (T > 0 reads the T = 1 counts), the forward scaled to ``layers``."""
    ops, score = _ops_table()[(label, 0.0 if temperature == 0 else 1.0)]
    return ops - score + score * layers / CYCLE_COST_LAYERS


@lru_cache(maxsize=1)
def _graphs_table() -> dict:
    import pandas as pd

    rows = pd.read_parquet(CYCLE_COST_GRAPHS)
    counts = [f"{what}_{phase}" for what in ("graphs", "kernels") for phase in PHASES]
    return {(r["method"], float(r["temperature"])): {k: float(r[k]) for k in counts}
            for _, r in rows[rows["engine"] == "graphs"].iterrows()}


def graphs_launches(label: str, temperature: float, layers: int) -> tuple[float, float]:
    """(host launches, kernels inside graphs) of one target call under engine=graphs (T > 0 reads T = 1):
    a phase that launches a graph counts its graph launches on the host and its kernels inside; a phase
    that launches none counts its kernels on the host. The target's forward (score) scaled to ``layers``."""
    row = _graphs_table()[(label, 0.0 if temperature == 0 else 1.0)]
    host = inside = 0.0
    for phase in PHASES:
        kernels = row[f"kernels_{phase}"] * (layers / CYCLE_COST_LAYERS if phase == "score" else 1)
        if row[f"graphs_{phase}"] > 0:
            host, inside = host + row[f"graphs_{phase}"], inside + kernels
        else:
            host += kernels
    return host, inside


def ms_per_call(label: str, temperature: float, shape: Shape, gpu: GPUKind, nodes: int,
                draft_steps: int, engine: str = "eager") -> tuple[float, float]:
    """(host, device) milliseconds of one target call, its launches and its reads + arithmetic (+ the gaps
    between a graph's kernels under engine=graphs); the call costs the larger. ``nodes``: scored tokens;
    ``draft_steps``: head steps (0 for AR)."""
    from eval.device.cycle_cost import US_PER_OP

    if engine not in COST_TABLES:
        raise ValueError(f"the plan has no cycle-cost table for engine={engine}: it prices "
                         f"{' and '.join(f'engine={e}' for e in COST_TABLES)}")
    read = (shape.target_params + draft_steps * shape.head_params) * shape.bytes_per_param
    flops = 2 * (shape.target_params * nodes + shape.head_params * draft_steps)
    device = (read / (gpu.bandwidth_tbs * 1e12) + flops / (gpu.bf16_tflops * 1e12)) * 1e3
    if engine == "graphs":
        launches, inside = graphs_launches(label, temperature, shape.layers)
        return launches * US_PER_OP / 1e3, device + inside * US_PER_GRAPH_KERNEL / 1e3
    return ops_per_call(label, temperature, shape.layers) * US_PER_OP / 1e3, device


def calls_per_generation(max_new_tokens: int, tau: float) -> int:
    return math.ceil(max_new_tokens / tau)


@lru_cache(maxsize=64)
def row_bytes(new_tokens: int, calls: int, expected: bool) -> int:
    """Bytes of one stored row with ``new_tokens`` tokens and ``calls`` target calls, written here with the
    row schema and writer of eval.store.storage (seeded random tokens; the other columns empty)."""
    import numpy as np
    import pyarrow as pa

    from eval.store.storage import ROW_SCHEMA, write_table

    rng = np.random.default_rng(0)
    row = {f.name: None for f in ROW_SCHEMA}
    row.update(output_tokens=rng.integers(0, 128_256, new_tokens).tolist(),
               accept_lengths=rng.integers(1, 9, calls).tolist(),
               expected_accept_lengths=rng.random(calls).tolist() if expected else None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "row.parquet"
        write_table(path, pa.Table.from_pylist([row], schema=ROW_SCHEMA))
        return path.stat().st_size
