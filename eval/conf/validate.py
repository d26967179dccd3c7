"""Checks of a run configuration beyond its types, before anything is loaded or created
(:func:`check_run`; :func:`validate` returns the SpecConfig alone).

In this order: the values this module can judge alone (:func:`check_values`: keys that are not
fields of the typed schema, which Hydra's ``+key=value`` adds to a structured config without a
word; values that type-check but cannot be used or stored: a seed beyond int64, ``num_threads`` < 1,
an unknown name, a same-state run's ``compare`` entries), then the machine's own (:func:`check_hardware`:
a device this torch build sees, ``num_threads`` within the cores; skipped where the checking process is
not the machine that runs the job: a sweep submitted to SLURM from a login node checks them in each job,
:mod:`eval.conf.sweep`), a pair of your own (its folders and whether its head fits its target,
:mod:`eval.conf.local_pair`), the prompt set (:func:`eval.prompts.sources.check_dataset`), and
last every method's parameters (SpecConfig) with its method key (:func:`eval.conf.schema.run_plan`).
What only the loaded models know is checked by the run loop (eval.measure.loop.check_against_pair).

Every error names the config key and what is wanted.
"""

from __future__ import annotations

import dataclasses
import math
import os

from omegaconf import DictConfig, OmegaConf

from baselines import AR
from eval.conf.local_pair import check_local_pair
from eval.conf.schema import DTYPES, LOCAL_MODEL, MEASURES, MODELS, TEST_MODELS, CheckedRun, methods, run_plan
from eval.prompts.sources import check_dataset
from rheo.config import ENGINES, SpecConfig
from rheo.methods import get_method, method_names
from rheo.models.catalog import CHAT_FORMATS
from rheo.paths import resolve_path
from rheo.placement import as_device

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def validate(cfg: DictConfig, hardware: bool = True) -> SpecConfig:
    """Check everything that can be checked without a model; return the SpecConfig of ``method``
    (the driver of a same-state run, whose ``compare`` entries are checked too).

    Raises ValueError with the allowed choices.
    """
    return check_run(cfg, hardware).spec


def check_hardware(cfg: DictConfig) -> None:
    """What only the machine that runs the job can say: ``device`` is one its torch sees, and
    ``num_threads`` does not exceed its cores."""
    as_device(cfg.device, "device")
    cores = os.cpu_count() or 1
    if cfg.num_threads is not None and cfg.num_threads > cores:
        raise ValueError(f"num_threads={cfg.num_threads} exceeds the {cores} cores of this machine (more threads "
                         f"than cores only wait on each other): choose num_threads <= {cores}")


def check_run(cfg: DictConfig, hardware: bool = True) -> CheckedRun:
    """:func:`validate`, keeping what the checks derived: every method configuration of the run.
    ``hardware=False``: the device and thread count are left to the machine that runs the job."""
    check_values(cfg)
    if hardware:
        check_hardware(cfg)
    model = cfg.model
    if model.name not in MODELS:
        check_local_pair(model.name, model.target_path, model.head_path, model.chat_format,
                         None if model.eos_tokens is None else tuple(model.eos_tokens))
    check_dataset(cfg.dataset, lambda p: resolve_path(p, must_exist=True))
    return run_plan(cfg)


def check_values(cfg: DictConfig) -> None:
    """The checks that need nothing but the config (ValueError naming the key)."""
    check_config(cfg)
    _choice("measure", cfg.measure, MEASURES)
    _check_model(cfg)
    _choice("method.name", cfg.method.name, methods())
    mix = cfg.get("draft_mix")
    if mix is not None and not (isinstance(mix, (int, float)) and not isinstance(mix, bool) and 0 <= mix <= 1):
        raise ValueError(f"draft_mix must be null (the head) or a number in [0, 1], got {mix!r}")
    tau = cfg.get("draft_temp")
    if tau is not None and not (isinstance(tau, (int, float)) and not isinstance(tau, bool) and math.isfinite(tau)
                                and tau > 0):
        raise ValueError(f"draft_temp must be null (the head as trained) or a number > 0, e.g. draft_temp=1.2, got {tau!r}")
    if cfg.dtype not in (None, "auto"):
        _choice("dtype", cfg.dtype, ("auto", *DTYPES))
    if cfg.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.limit is not None and cfg.limit < 1:
        raise ValueError(f"limit must be None or >= 1, got {cfg.limit}")
    if cfg.item_ids is not None and len(cfg.item_ids) == 0:
        raise ValueError("item_ids is empty (item_ids=[]): no prompt would run; give the question_ids to run, "
                         "e.g. item_ids=[0,3], or leave it null for every item")
    t = cfg.temperature
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
    _check_alongside(cfg)
    _check_engine(cfg)
    if cfg.measure == "same_state":
        _check_same_state(cfg)
        return
    if cfg.compare:
        raise ValueError("compare lists the methods of a same-state run: add measure=same_state (or leave "
                         "compare empty)")
    for name in ("draft_mix", "draft_temp", "restore_from"):
        if cfg.get(name) is not None:
            raise ValueError(f"{name} is read by measure=same_state only; leave it null for measure=realized")


def _check_engine(cfg: DictConfig) -> None:
    """engine (rheo.engine): one of ENGINES; other than eager, a realized run of the tree methods and AR
    on an EAGLE-3 pair."""
    engine = cfg.get("engine") or "eager"
    _choice("engine", engine, ENGINES)
    if engine == "eager":
        return
    if cfg.measure == "same_state":
        raise ValueError(f"engine={engine} runs measure=realized only: leave engine=eager for a same-state run")
    if cfg.model.name in TEST_MODELS:
        raise ValueError(f"engine={engine} needs an EAGLE-3 pair; model {cfg.model.name!r} drafts with a toy model: "
                         f"use engine=eager")
    # a library's loop listed in ``alongside`` runs eagerly next to the engine's methods (schema.run_plan)
    if not get_method(cfg.method.name).phases:  # the registry's mark of a library's own loop
        raise ValueError(f"method {cfg.method.name!r} runs a library's own loop, which engine={engine} cannot change: "
                         f"use engine=eager")


def _check_same_state(cfg: DictConfig) -> None:
    """The driver and the ``compare`` entries' keys and names (their parameters: schema.run_plan)."""
    if cfg.alongside:
        raise ValueError("alongside is read by measure=realized only: list the methods in compare")
    references = method_names("reference")
    if cfg.method.name in references:
        raise ValueError(f"method (the driver) must be a registered method, got {cfg.method.name!r}")
    if not cfg.compare:
        raise ValueError("compare is empty: give the methods to evaluate at the driver's states, e.g. "
                         "'compare=[{name:topk},{name:rheo,m:1}]'")
    for i, entry in enumerate(cfg.compare):
        _refuse_unknown(unknown_keys(entry, f"compare[{i}]."))
        if entry.name in references:
            raise ValueError(f"compare[{i}].name must be a registered method (a tree), got {entry.name!r}")
        _choice(f"compare[{i}].name", entry.name, tuple(method_names()))


def _check_model(cfg: DictConfig) -> None:
    """A catalog name, or a pair of your own with both folders given (the folders and whether the
    head fits: eval.conf.local_pair.check_local_pair, called by check_run)."""
    model = cfg.model
    if model.chat_format is not None:
        _choice("model.chat_format", model.chat_format, CHAT_FORMATS)
    if model.name in TEST_MODELS and (model.target_path or model.head_path):
        raise ValueError(f"model.name {model.name!r} is the built-in test pair (built in-process, no folders): it "
                         f"would run instead of the folders given and file its rows under their paths; give a pair "
                         f"of your own another name (model={LOCAL_MODEL} model.name=my-pair model.target_path=DIR "
                         f"model.head_path=DIR)")
    if model.name not in MODELS and not (model.target_path and model.head_path):
        raise ValueError(f"unknown model.name {model.name!r}: choose from {list(MODELS)}, or run a pair of your own "
                         f"with model={LOCAL_MODEL} model.name=NAME model.target_path=DIR model.head_path=DIR "
                         f"(docs/harness.md)")


def _check_alongside(cfg: DictConfig) -> None:
    """Names only; their parameters are checked with the run's (schema.run_plan)."""
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
    if cfg.max_consecutive_failures < 1:
        raise ValueError(f"max_consecutive_failures must be >= 1, got {cfg.max_consecutive_failures}")


def _refuse_unknown(extra: list[str]) -> None:
    if extra:
        raise ValueError(f"unknown config key(s) {extra}: not fields of the run schema (eval/conf/schema.py). "
                         f"A '+key=value' override adds a key that nothing reads; check the spelling "
                         f"(e.g. max_new_tokens, method.k)")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose from {list(allowed)}")
