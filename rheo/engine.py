"""The one place an eager (target, drafter) pair becomes the pair of an engine (``SpecConfig.engine``).

* ``eager`` - the pair as it is: the reference twin that committed rows and the exactness tests use.
* ``static`` - :class:`~rheo.models.static_target.StaticHFTarget` and
  :class:`~rheo.models.static_eagle3.StaticEagle3Drafter` run eagerly: static shapes (cache and
  tree buckets, 0-d lengths), the same tokens as ``eager`` (fp32: logits within 1e-5).
* ``graphs`` - the same functions under ``torch.compile(fullgraph=True, dynamic=False)``: on CUDA
  with ``mode="reduce-overhead"`` (Inductor and CUDA graphs; each call starts a new graph step and
  what is kept across calls is cloned), on a CPU plain Inductor (no CUDA graphs; a note says so once).

The static pair of an eager one is made once and kept on it (the target's on its transformers model, which
every ``HFTarget`` of it shares), so that every generation of a pair reuses its compiled graphs and its
buffers. Only a transformers Llama target (:class:`~rheo.models.hf_target.HFTarget` with a plain output
layer and full attention) and an EAGLE-3 drafter (:class:`~rheo.models.eagle3.Eagle3Drafter`) have static
twins; a :class:`~rheo.models.processed.ProcessedTarget` over such a target runs its processors on the
twin's rows; any other model is
refused in one line. The autoregressive baseline uses the engine's target alone (:func:`with_engine`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch

from rheo.config import ENGINES

__all__ = ["engine_pair", "engine_target", "engine_drafter", "graphs_compiler", "with_engine", "compile_count"]

#: the attribute of an eager model that keeps its engine twins (engine -> model)
_TWINS = "_rheo_engine_twins"
#: graphs per compiled function Dynamo may make (buckets of cache capacity x tree size) before it
#: would silently run eagerly: raised to this
RECOMPILE_LIMIT = 64
_NOTED: set[str] = set()


def _check(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")


def graphs_compiler(device: torch.device | str) -> Callable[[Callable], Callable]:
    """The compiler of the ``graphs`` engine on ``device``: Inductor with CUDA graphs on CUDA, plain
    Inductor elsewhere (noted once on stderr)."""
    device = torch.device(device)
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    cuda = device.type == "cuda"
    if not cuda and device.type not in _NOTED:
        _NOTED.add(device.type)
        print(f"engine=graphs on {device.type}: Inductor without CUDA graphs (a {device.type} has none to replay)",
              file=sys.stderr, flush=True)

    def compile_one(fn: Callable) -> Callable:
        compiled = checked_cache(torch.compile(fn, fullgraph=True, dynamic=False,
                                               mode="reduce-overhead" if cuda else None))
        if not cuda:
            return compiled

        def step(*args):
            if torch.compiler.is_compiling():  # traced inside a larger captured function (the draft-and-build
                return fn(*args)  # function traces the head's step): part of that graph, not a replay of its own
            torch.compiler.cudagraph_mark_step_begin()  # outputs kept across calls are clones
            return compiled(*args)
        return step
    return compile_one


def compile_count() -> int:
    """Graphs Dynamo has compiled in this process so far (0 where nothing was ever compiled): the difference
    over a generation is the number of compiles inside it (a compiled call that is not a replay)."""
    dynamo = sys.modules.get("torch._dynamo")
    return 0 if dynamo is None else int(dynamo.utils.counters["stats"]["unique_graphs"])


#: what loading a truncated compiled kernel says (an Inductor compile interrupted while writing its cache)
TRUNCATED = ("file too short", "invalid ELF header")


def checked_cache(compiled: Callable) -> Callable:
    """``compiled`` whose failure on a truncated kernel in Inductor's on-disk cache (left by an interrupted
    compile, e.g. Ctrl-C) removes the empty kernel files and says so in one line, with what to do."""
    def call(*args):
        if torch.compiler.is_compiling():  # traced inside a larger compiled function: part of its graph
            return compiled(*args)
        try:
            return compiled(*args)
        except Exception as e:
            if not any(t in str(e) for t in TRUNCATED):
                raise
            where, removed = clear_truncated_kernels()
            raise RuntimeError(f"Inductor's cache ({where}) held a truncated compiled kernel, left by an interrupted "
                               f"compile: removed {removed} empty kernel file(s); run again (or delete {where} "
                               f"to recompile everything)") from e
    return call


def clear_truncated_kernels() -> tuple[str, int]:
    """(Inductor's cache folder, how many empty kernel files in it were removed)."""
    from pathlib import Path

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root, removed = Path(cache_dir()), 0
    for path in root.rglob("*.so") if root.is_dir() else ():
        if path.is_file() and not path.is_symlink() and path.stat().st_size == 0:
            path.unlink()
            removed += 1
    return str(root), removed


def _twin(model: Any, engine: str, make: Callable[[Optional[Callable], bool], Any]) -> Any:
    twins = model.__dict__.setdefault(_TWINS, {})
    if engine not in twins:
        device = torch.device(getattr(model, "device", None) or "cpu")
        graphs = engine == "graphs"
        twins[engine] = make(graphs_compiler(device) if graphs else None, graphs and device.type == "cuda")
    return twins[engine]


def engine_target(target: Any, engine: str) -> Any:
    """``target`` as ``engine`` runs it (the same object for ``eager``); ValueError for a target
    without a static twin."""
    _check(engine)
    if engine == "eager":
        return target
    from rheo.models.hf_target import HFTarget, plain_lm_head
    from rheo.models.static_target import StaticHFTarget
    from rheo.models.static_forward import full_attention

    from rheo.models.processed import ProcessedTarget

    if type(target) is ProcessedTarget:  # the request's processors run on the engine's rows, node by node
        return ProcessedTarget(engine_target(target.target, engine), target.pre, target.post, target.temperature,
                               target.lead)
    if type(target) is not HFTarget:
        raise ValueError(f"engine={engine!r} needs a transformers Llama target (rheo.models.hf_target.HFTarget), got "
                         f"{type(target).__name__}: use engine='eager'")
    hf = target.hf_model
    wrong = (f"its model is a {type(hf).__name__}, not a LlamaForCausalLM" if type(hf).__name__ != "LlamaForCausalLM"
             else "its output layer is not a plain linear layer (a bias, scaled or soft-capped logits)"
             if not plain_lm_head(hf) else None if full_attention(hf)
             else "its layers attend through a sliding window, not to the whole past")
    if wrong is not None:
        raise ValueError(f"engine={engine!r} runs a transformers LlamaForCausalLM with a plain output layer and full "
                         f"attention; this HFTarget does not: {wrong}. Use engine='eager'")
    # kept on the transformers model: every HFTarget of it (one per generate request) shares the graphs and buffers
    return _twin(hf, engine, lambda compiler, keep: StaticHFTarget(target, compiler, keep_outputs=keep))


def engine_drafter(drafter: Any, engine: str) -> Any:
    """``drafter`` as ``engine`` runs it (the same object for ``eager``); ValueError for a drafter
    that is not an EAGLE-3 head."""
    _check(engine)
    if engine == "eager":
        return drafter
    from rheo.models.eagle3 import Eagle3Drafter
    from rheo.models.static_eagle3 import StaticEagle3Drafter

    if type(drafter) is not Eagle3Drafter:
        raise ValueError(f"engine={engine!r} drafts with an EAGLE-3 head (rheo.models.eagle3.Eagle3Drafter), got "
                         f"{type(drafter).__name__}: use engine='eager'")
    return _twin(drafter, engine, lambda compiler, keep: StaticEagle3Drafter(drafter, compiler, keep_outputs=keep))


def engine_pair(target: Any, drafter: Any, engine: str) -> tuple[Any, Any]:
    """(target, drafter) as ``engine`` runs them (module docstring)."""
    return engine_target(target, engine), engine_drafter(drafter, engine)


class _EnginePair:
    """A model pair whose target and drafter are the engine's (made when first read: the
    autoregressive baseline reads the target only); every other attribute is the pair's."""

    def __init__(self, pair: Any, engine: str) -> None:
        self._pair, self._engine = pair, engine

    @property
    def target(self) -> Any:
        return engine_target(self._pair.target, self._engine)

    @property
    def drafter(self) -> Any:
        return engine_drafter(self._pair.drafter, self._engine)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pair, name)


def with_engine(pair: Any, engine: str) -> Any:
    """A model pair (rheo.models.ModelPair or alike) as ``engine`` runs it (the pair itself for ``eager``)."""
    _check(engine)
    return pair if engine == "eager" else _EnginePair(pair, engine)
