"""Checks of a run configuration beyond its types, in two stages.

* :func:`check_run` (:func:`validate`), before anything is loaded or created: every field, the
  method's parameters (SpecConfig), a same-state run's ``compare`` entries (each as a method), a
  pair of your own and a prompt set of your own; with :func:`check_config`: keys that are not
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
from dataclasses import dataclass
import math
import os
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from baselines import AR
from eval.conf.schema import DTYPES, LOCAL_MODEL, MEASURES, MODELS, SUITES, method_key, methods, spec_config
from rheo.config import SpecConfig
from rheo.methods import get_method, method_names
from rheo.models.catalog import CHAT_FORMATS
from rheo.paths import resolve_path
from rheo.placement import as_device

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class CheckedRun:
    """What the start-up checks hand a run: the SpecConfig of ``method`` (the driver of a same-state
    run) and, for a same-state run, (SpecConfig, method key) of every ``compare`` entry."""

    spec: SpecConfig
    compared: tuple = ()


def validate(cfg: DictConfig) -> SpecConfig:
    """Check everything that can be checked without a model; return the SpecConfig of ``method``
    (the driver of a same-state run, whose ``compare`` entries are checked too).

    Raises ValueError with the allowed choices.
    """
    return check_run(cfg).spec


def check_run(cfg: DictConfig) -> CheckedRun:
    """:func:`validate`, keeping what the checks derived (the compared configs of a same-state run)."""
    spec = _validate_run(cfg)
    _choice("measure", cfg.measure, MEASURES)
    if cfg.measure == "realized":
        if cfg.compare:
            raise ValueError("compare lists the methods of a same-state run: add measure=same_state (or leave "
                             "compare empty)")
        for name in ("draft_mix", "restore_from"):
            if cfg.get(name) is not None:
                raise ValueError(f"{name} is read by measure=same_state only; leave it null for measure=realized")
        return CheckedRun(spec)
    if cfg.alongside:
        raise ValueError("alongside is read by measure=realized only: list the methods in compare")
    if get_method(spec.method).is_reference:
        raise ValueError(f"method (the driver) must be a registered method, got {cfg.method.name!r}")
    return CheckedRun(spec, tuple(compared_configs(cfg)))


def compared_configs(cfg: DictConfig) -> list[tuple[SpecConfig, dict]]:
    """(SpecConfig, method key) of every ``compare`` entry of a same-state run, each validated like a
    run's ``method``."""
    if not cfg.compare:
        raise ValueError("compare is empty: give the methods to evaluate at the driver's states, e.g. "
                         "'compare=[{name:topk},{name:rheo,m:1}]'")
    out = []
    for i, entry in enumerate(cfg.compare):
        one = cfg.copy()
        with open_dict(one):
            one.method = entry
        if entry.name in method_names("reference"):
            raise ValueError(f"compare[{i}].name must be a registered method (a tree), got {entry.name!r}")
        try:
            out.append((_check_compared(one), method_key(one)))
        except ValueError as e:
            raise ValueError(f"compare[{i}]: {e}") from None
    return out


def _validate_run(cfg: DictConfig) -> SpecConfig:
    check_config(cfg)
    _check_model(cfg)
    _choice("method.name", cfg.method.name, methods())
    _check_dataset(cfg)
    mix = cfg.get("draft_mix")
    if mix is not None and not (isinstance(mix, (int, float)) and not isinstance(mix, bool) and 0 <= mix <= 1):
        raise ValueError(f"draft_mix must be null (the head) or a number in [0, 1], got {mix!r}")
    if cfg.dtype is not None:
        _choice("dtype", cfg.dtype, DTYPES)
    if cfg.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.limit is not None and cfg.limit < 1:
        raise ValueError(f"limit must be None or >= 1, got {cfg.limit}")
    t = cfg.temperature
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
    _check_alongside(cfg)
    return spec_config(cfg)


def _check_compared(cfg: DictConfig) -> SpecConfig:
    """A ``compare`` entry, set as ``cfg.method`` in a copy of a config whose other fields
    :func:`_validate_run` has checked: its keys, its name and its parameters (SpecConfig)."""
    _refuse_unknown(unknown_keys(cfg.method, "method."))
    _choice("method.name", cfg.method.name, methods())
    return spec_config(cfg)


def _check_model(cfg: DictConfig) -> None:
    """A catalog name, or a pair of your own whose folders exist and whose head fits its target
    (eval.conf.local_pair.check_local_pair: config files and weight headers, nothing loaded or created)."""
    from eval.conf.local_pair import check_local_pair

    model = cfg.model
    if model.chat_format is not None:
        _choice("model.chat_format", model.chat_format, CHAT_FORMATS)
    if model.name in MODELS:
        return
    if not (model.target_path and model.head_path):
        raise ValueError(f"unknown model.name {model.name!r}: choose from {list(MODELS)}, or run a pair of your own "
                         f"with model={LOCAL_MODEL} model.name=NAME model.target_path=DIR model.head_path=DIR "
                         f"(docs/harness.md)")
    check_local_pair(model.name, model.target_path, model.head_path, model.chat_format,
                     None if model.eos_tokens is None else tuple(model.eos_tokens))


def _check_alongside(cfg: DictConfig) -> None:
    names = list(cfg.alongside)
    for name in names:
        _choice("alongside method", name, methods())
    if cfg.method.name in names:
        raise ValueError(f"alongside={names} holds the run's own method {cfg.method.name!r}: list other methods")
    if len(set(names)) < len(names):
        raise ValueError(f"alongside={names} names a method twice")
    if AR.name in names and cfg.baseline:
        raise ValueError(f"alongside={names} holds {AR.name!r}, which baseline=true already runs next to every "
                         f"item: drop it from alongside")
    for name in names:
        spec_config(cfg, name)  # its parameters are valid for it (SpecConfig checks them)


def _check_dataset(cfg: DictConfig) -> None:
    from eval.prompts.sources import check_dataset, is_builtin

    if not is_builtin(cfg.dataset):
        return check_dataset(cfg.dataset, lambda p: resolve_path(p, must_exist=True))
    if not cfg.dataset.suites:
        raise ValueError("dataset.suites is empty; choose from " + str(list(SUITES)))
    for suite in cfg.dataset.suites:
        _choice("dataset suite", suite, SUITES)


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
    _refuse_unknown(unknown_keys(cfg))
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


def _refuse_unknown(extra: list[str]) -> None:
    if extra:
        raise ValueError(f"unknown config key(s) {extra}: not fields of the run schema (eval/conf/schema.py). "
                         f"A '+key=value' override adds a key that nothing reads; check the spelling "
                         f"(e.g. max_new_tokens, method.k)")


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


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose from {list(allowed)}")
