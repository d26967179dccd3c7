"""The one place an eager (target, drafter) pair becomes the pair of an engine (``SpecConfig.engine``).

* ``eager`` - the pair as it is: the reference twin that committed rows and the exactness tests use.
* ``static`` - :class:`~rheo.models.static_target.StaticHFTarget` and
  :class:`~rheo.models.static_eagle3.StaticEagle3Drafter` run eagerly: static shapes (cache and
  tree buckets, 0-d lengths), the same tokens as ``eager`` (fp32: logits within 1e-5).
* ``graphs`` - the same functions under ``torch.compile(fullgraph=True, dynamic=False)``: on CUDA
  with ``mode="reduce-overhead"`` (Inductor and CUDA graphs; each call starts a new graph step and
  what is kept across calls is cloned), on a CPU plain Inductor (no CUDA graphs; a note says so once).

The static pair of an eager one is made once and kept on it, so that every generation of a pair
reuses its compiled graphs and its buffers. Only a transformers Llama target
(:class:`~rheo.models.hf_target.HFTarget` with a plain output layer and full attention) and an
EAGLE-3 drafter (:class:`~rheo.models.eagle3.Eagle3Drafter`) have static twins; any other model is
refused in one line. The autoregressive baseline uses the engine's target alone (:func:`with_engine`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch

from rheo.config import ENGINES

__all__ = ["engine_pair", "engine_target", "engine_drafter", "graphs_compiler", "with_engine"]

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
        compiled = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if cuda else None)
        if not cuda:
            return compiled

        def step(*args):
            if torch.compiler.is_compiling():  # traced inside a larger captured function (the draft-and-build
                return fn(*args)  # function traces the head's step): part of that graph, not a replay of its own
            torch.compiler.cudagraph_mark_step_begin()  # outputs kept across calls are clones
            return compiled(*args)
        return step
    return compile_one


def _twin(model: Any, engine: str, make: Callable[[Optional[Callable], bool], Any]) -> Any:
    twins = model.__dict__.setdefault(_TWINS, {})
    if engine not in twins:
        device = torch.device(getattr(model, "device", "cpu"))
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

    if type(target) is not HFTarget or not plain_lm_head(target.hf_model) or not full_attention(target.hf_model):
        raise ValueError(f"engine={engine!r} needs a transformers Llama target with full attention (rheo.models."
                         f"hf_target.HFTarget), got {type(target).__name__}: use engine='eager'")
    return _twin(target, engine, lambda compiler, keep: StaticHFTarget(target, compiler, keep_outputs=keep))


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
