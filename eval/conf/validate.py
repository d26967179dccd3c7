"""Checks of a run configuration beyond its types, in two stages.

* :func:`check_config`, before anything is loaded or created: keys that are not
  fields of the typed schema (Hydra's ``+key=value`` adds them to a structured
  config without a word), and values that type-check but cannot be used or
  stored (a seed beyond int64, ``num_threads`` < 1 or above the cores, a device this torch build
  does not have).
* :func:`check_against_pair`, once the model pair is loaded and before the
  first generation: what only the models know (the method's most children per
  node, ``SpecConfig.max_children``, against the draft vocabulary, prompt + ``max_new_tokens`` against the target's context length).

Every error names the config key and what is wanted.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from rheo.config import SpecConfig
from rheo.methods import get_method
from rheo.placement import as_device

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Dotted keys of ``cfg`` that are not fields of the dataclass its node was typed with."""
    found: list[str] = []
    node_type = OmegaConf.get_type(cfg)
    fields = {f.name for f in dataclasses.fields(node_type)} if dataclasses.is_dataclass(node_type) else None
    for key in cfg.keys():
        name = f"{prefix}{key}"
        if fields is not None and key not in fields:
            found.append(name)
            continue
        value = cfg._get_node(key)
        if isinstance(value, DictConfig) and not value._is_missing() and not value._is_none():
            found += unknown_keys(value, f"{name}.")
    return found


def check_config(cfg: DictConfig) -> None:
    """Raise ValueError for a key that is not in the schema or a value that cannot be used."""
    extra = unknown_keys(cfg)
    if extra:
        raise ValueError(f"unknown config key(s) {extra}: not fields of the run schema (eval/conf/schema.py). "
                         f"A '+key=value' override adds a key that nothing reads; check the spelling "
                         f"(e.g. max_new_tokens, method.k)")
    seed = cfg.seed
    if not INT64_MIN <= seed <= INT64_MAX:
        raise ValueError(f"seed must fit in a signed 64-bit integer [{INT64_MIN}, {INT64_MAX}] (it is stored "
                         f"as int64), got {seed}")
    if cfg.num_threads is not None and cfg.num_threads < 1:
        raise ValueError(f"num_threads must be null (torch's default) or an int >= 1, got {cfg.num_threads}")
    cores = os.cpu_count() or 1
    if cfg.num_threads is not None and cfg.num_threads > cores:
        raise ValueError(f"num_threads={cfg.num_threads} exceeds the {cores} cores of this machine (more threads "
                         f"than cores only wait on each other): choose num_threads <= {cores}")
    if cfg.max_consecutive_failures < 1:
        raise ValueError(f"max_consecutive_failures must be >= 1, got {cfg.max_consecutive_failures}")
    as_device(cfg.device, "device")


def check_against_pair(cfg: DictConfig, spec, pair, prompts: Sequence[Sequence[int]]) -> None:
    """After the load, before the first generation: children per node vs the draft vocabulary, prompt + new tokens
    vs the target's context length (``prompts``: the first-turn prompts of the pending rows)."""
    if not get_method(spec.method).is_reference:
        vocab = int(pair.drafter.vocab_size)
        if spec.max_children > vocab:
            raise ValueError(f"{_children_key(spec)}={spec.max_children} exceeds the draft vocabulary of model "
                             f"{cfg.model.name!r} ({vocab} tokens): choose {_children_key(spec)} <= {vocab}")
    context = context_length(pair)
    if context is None:
        return
    if context < 1:
        raise ValueError(f"model {cfg.model.name!r} has a context length of {context}: its config.json "
                         f"max_position_embeddings must be >= 1 (fix the model's config.json)")
    max_new = int(cfg.max_new_tokens)
    if max_new >= context:
        raise ValueError(f"max_new_tokens={max_new} >= the context length of model {cfg.model.name!r} "
                         f"({context} positions): choose max_new_tokens < {context}")
    longest = max((len(p) for p in prompts), default=0)
    if longest + max_new > context:
        fix = (f"choose max_new_tokens <= {context - longest}" if longest < context else
               f"shorten or leave out that prompt (no max_new_tokens fits: the prompt alone fills the context)")
        raise ValueError(f"max_new_tokens={max_new} plus the longest prompt ({longest} tokens) exceeds the "
                         f"context length of model {cfg.model.name!r} ({context} positions): {fix}")


def _children_key(spec: SpecConfig) -> str:
    """The method parameter that sets ``spec.max_children`` (the most children one node gets), as
    the config names it."""
    if spec.max_children == spec.k and "k" in get_method(spec.method).fields:
        return "method.k"
    if spec.branching is not None and spec.max_children == max(spec.branching):
        return "max(method.branching)"
    return f"method {spec.method}'s children per node"


def context_length(pair) -> Optional[int]:
    """The target's context length (positions), or None when it does not say."""
    value = getattr(pair.target, "context_length", None)
    return int(value) if value is not None else None
