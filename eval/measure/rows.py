"""The stored row of one generation: its key columns, run metadata and metrics (eval/store/storage.py)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Optional

import torch

from eval.prompts.suites import Item
from eval.store import storage
from eval.store.code_version import code_version
from rheo.paths import git_sha
from rheo.timing import device_name

if TYPE_CHECKING:  # annotations only: gpu_check.py reads peak memory without Hydra's stack
    from omegaconf import DictConfig


def metrics(out, wall: float) -> dict:
    """The measured columns of a generation output ``out`` that took ``wall`` seconds."""
    new_tokens = len(out.tokens)
    calls = int(out.target_calls)
    if calls < 1 or sum(out.accept_lengths) != new_tokens:
        raise RuntimeError(f"inconsistent generation output: {new_tokens} tokens, accept_lengths "
                           f"sum {sum(out.accept_lengths)}, {calls} target calls")
    return {
        "new_tokens": new_tokens, "target_calls": calls, "tau": new_tokens / calls,
        "accept_lengths": [int(a) for a in out.accept_lengths],
        "drafted_nodes_mean": mean_or_none(getattr(out, "drafted_nodes", [])),
        "kept_nodes_mean": mean_or_none(getattr(out, "kept_nodes", [])),
        "samples_kept": int(sum(getattr(out, "sample_kept", []) or [])),
        "samples_accepted": int(sum(getattr(out, "sample_accepted", []) or [])),
        "m0_share": mean_or_none([m == 0 for m in getattr(out, "cycle_m", []) or []]),
        "root_accept": mean_or_none(getattr(out, "root_accept", []) or []),
        "wall_s": wall, "tokens_per_s": new_tokens / wall if wall > 0 else None,
        "output_tokens": [int(t) for t in out.tokens], "status": "ok", "error": None,
        **expected_columns(getattr(out, "expected_accept_lengths", None) or [],
                           getattr(out, "last_cycle_verified", None)),
    }


def reset_peak_memory(device: str) -> None:
    """Start a generation's peak-memory reading (:func:`peak_memory_mb`): CUDA's peak statistics are reset;
    a process's peak RSS cannot be, so on a CPU nothing is."""
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: str) -> float:
    """The row's ``peak_memory_mb`` (MiB): on a GPU the most memory torch allocated on it since
    :func:`reset_peak_memory` (``torch.cuda.max_memory_allocated``, the generation's own peak); on a CPU
    the process's peak resident set size so far (``resource.getrusage``: the models, every earlier
    generation of the process and this one; it never goes down)."""
    if str(device).startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def expected_columns(expected: list[float], last_verified: Optional[int] = None) -> dict:
    """``expected_accept_lengths`` (one per target call), their mean ``expected_tau`` and the last
    cycle's uncut length ``last_cycle_verified``; None when the generation did not record them."""
    if not expected:
        return {"expected_accept_lengths": None, "expected_tau": None, "last_cycle_verified": None}
    return {"expected_accept_lengths": [float(e) for e in expected], "expected_tau": sum(expected) / len(expected),
            "last_cycle_verified": None if last_verified is None else int(last_verified)}


def mean_or_none(xs) -> Optional[float]:
    return float(sum(xs)) / len(xs) if xs else None


def base_row(key: dict, meta: dict, chash: str, item: Item, turn: int, gen_seed: int) -> dict:
    """A row of the method config ``key`` (hash ``chash``) for one turn of ``item``, metrics still empty."""
    row = storage.key_row(key)
    row.update(meta, dataset=item.suite, item_id=item.item_id, turn=turn, category=item.category,
               turns_sha=item.turns_sha, gen_seed=gen_seed, config_hash=chash, accept_lengths=[], output_tokens=[])
    return row


def run_metadata(cfg: DictConfig, pair) -> dict:
    """The columns every row of one run shares (versions, the decoding code's included; device, threads; the
    run's own ``run_id``, which tells rows timed in one job from rows of separate jobs)."""
    import transformers

    model_dtype = getattr(getattr(pair, "hf_model", None), "dtype", None)
    return {
        "device": str(cfg.device),
        "dtype": str(model_dtype).replace("torch.", "") if model_dtype is not None else str(cfg.dtype),
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "rheo_version": _rheo_version(), "git_sha": git_sha(), "device_name": device_name(cfg.device),
        "num_threads": torch.get_num_threads(), "code_version": code_version(), "run_id": uuid.uuid4().hex[:12],
        "protocol": getattr(pair, "protocol", None) or "template",
    }


def _rheo_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rheo")
    except PackageNotFoundError:
        return "unknown"
