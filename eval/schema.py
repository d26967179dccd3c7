"""Typed run configuration of the benchmark harness (the single source of truth).

The dataclasses below are registered with Hydra's ConfigStore as the schema of
``configs/config.yaml``: every YAML file of the ``model``, ``dataset`` and
``method`` groups is merged into a typed node, so an unknown key or a value of
the wrong type fails at start-up, before anything is loaded.

Derived values (the :class:`rheo.config.SpecConfig` of a run, the config hash
that names its results directory, the per-(item, turn) generation seed) are
computed in one place each: :func:`spec_config`, :func:`method_key`,
:func:`generation_seed`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from rheo.config import SpecConfig
from rheo.methods import get_method, method_names
from rheo.models.catalog import MODELS as REGISTRY
from rheo.models.locate import head_fingerprint
from rheo.placement import DTYPE_NAMES

#: columns of the config hash that predate the method registry: present (None when unused) in every
#: key, so the hashes of existing results stay the same; a method's other fields enter only its own key
LEGACY_KEY_FIELDS = ("k", "m", "depth", "tree_size", "sparse_top", "verify_order", "proxy")
#: model names of rheo.models.load_model_pair (defined once, in its registry), plus the harness-only test pair
PAPER_MODELS = tuple(REGISTRY)
TEST_MODELS = ("tiny_random",)
MODELS = PAPER_MODELS + TEST_MODELS
#: harness suite name -> file under data_dir (file names as in the EAGLE repository)
SUITE_FILES = {
    "alpaca": "alpaca.jsonl",
    "gsm8k": "gsm8k.jsonl",
    "humaneval": "humaneval.jsonl",
    "mt_bench": "mt_bench.jsonl",
    "nq": "qa.jsonl",
    "cnn_dm": "sum.jsonl",
}
SUITES = tuple(SUITE_FILES)
DTYPES = DTYPE_NAMES


@dataclass
class ModelConf:
    name: str = MISSING
    target_path: Optional[str] = None  # local weights of the target (None = model default)
    head_path: Optional[str] = None  # local weights of the draft head (None = model default)


@dataclass
class DatasetConf:
    """The six suites of data_dir (``path`` and ``hub`` unset), or a user's prompt set read with
    ``datasets`` (eval/prompt_sources.py; docs/datasets.md). None of it enters the config hash: rows
    are keyed by suite name, item id and turn, and carry the hash of their item's turns."""

    name: str = MISSING  # label of the prompt set in logs ("all" runs every suite)
    suites: List[str] = MISSING  # built-in suite names; a user set's one suite, or the suite_field values to keep
    path: Optional[str] = None  # a local .jsonl / .parquet / .arrow file, or a save_to_disk or hub-layout folder
    hub: Optional[str] = None  # a hub dataset name (load_dataset); with path: where to download the copy from
    hub_config: Optional[str] = None  # the dataset's config name (SPEED-Bench: qualitative)
    split: Optional[str] = None  # the split to read (None: the only one)
    turns_field: str = "turns"  # a list of user messages, or one string (one turn)
    id_field: Optional[str] = "question_id"  # None, or ids not all integers: the record's position in its suite
    category_field: Optional[str] = "category"  # stored in the rows' category column
    suite_field: Optional[str] = None  # split the records into suites by this field's value
    suite_prefix: str = ""  # prepended to suite_field values


_SPEC_DEFAULTS = SpecConfig()  # the method defaults live in one place: rheo.config.SpecConfig


@dataclass
class MethodConf:
    name: str = MISSING  # ar, or a registered method (rheo.methods): topk | rheo | static | chain
    k: int = _SPEC_DEFAULTS.k
    m: int = _SPEC_DEFAULTS.m
    depth: int = _SPEC_DEFAULTS.depth
    tree_size: int = _SPEC_DEFAULTS.tree_size
    sparse_top: Optional[int] = _SPEC_DEFAULTS.sparse_top
    verify_order: str = _SPEC_DEFAULTS.verify_order
    proxy: str = _SPEC_DEFAULTS.proxy
    branching: Optional[List[int]] = None  # static trees: children per node at each depth
    replacement: bool = _SPEC_DEFAULTS.replacement  # static trees: SpecInfer (true) or RSD (false)


@dataclass
class RunConf:
    model: ModelConf = MISSING
    dataset: DatasetConf = MISSING
    method: MethodConf = MISSING
    temperature: float = 1.0
    seed: int = 0
    max_new_tokens: int = 256
    limit: Optional[int] = None  # first `limit` items of each suite (None = all)
    item_ids: Optional[List[int]] = None  # explicit question_ids (applied before limit)
    device: str = "cpu"
    dtype: Optional[str] = None  # None = the model's default
    output_dir: str = "results/runs"
    data_dir: str = "data/benchmarks"
    baseline: bool = True  # also run the AR baseline of the same target, T and seed
    # false: one AR row per (target, T, seed, item, turn), shared by every method config (cheap; fine
    # on a dedicated machine). true: an AR row per method config, timed item by item next to it, so
    # the speedup of each config compares two timings taken under the same machine load.
    paired_baseline: bool = False
    warmup: bool = True  # one untimed generation before the first timed one
    progress: bool = True
    num_threads: Optional[int] = 1  # torch intra-op threads (None = torch's default); not in the config hash
    max_consecutive_failures: int = 3  # abort (loudly) if the first N generations all fail
    profile_phases: bool = True  # per-phase ms per cycle in every row (rheo.timing); false: no clock reads
    experiment: Optional[str] = None  # name of the experiment preset (for logs; rows are shared across
    # experiments, e.g. the Top-K rows of the main table and the m ablation, so it is not a row column)


@dataclass
class SameStateConf(RunConf):
    """``python -m eval.same_state``: ``method`` is the driver; every ``compare`` entry builds its
    own tree at each of the driver's states (eval/same_state.py)."""

    compare: List[MethodConf] = field(default_factory=list)
    calibration: bool = True  # the draft-calibration columns
    ot_bound: bool = True  # the root's closed-form acceptance and optimal-transport bound (scipy)


def register_configs() -> None:
    """Make ``base_config`` (the schema of configs/config.yaml) and ``base_same_state`` (that of
    configs/same_state.yaml) known to Hydra."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RunConf)
    cs.store(name="base_same_state", node=SameStateConf)


def validate(cfg: DictConfig) -> SpecConfig | None:
    """Check everything that can be checked without a model; return the SpecConfig.

    Raises ValueError with the allowed choices. Returns None for method ``ar``.
    """
    from eval.validate import check_config

    check_config(cfg)
    _choice("model.name", cfg.model.name, MODELS)
    _choice("method.name", cfg.method.name, methods())
    _check_dataset(cfg)
    if cfg.dtype is not None:
        _choice("dtype", cfg.dtype, DTYPES)
    if cfg.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {cfg.max_new_tokens}")
    if cfg.limit is not None and cfg.limit < 1:
        raise ValueError(f"limit must be None or >= 1, got {cfg.limit}")
    t = cfg.temperature
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
    return spec_config(cfg)


def _check_dataset(cfg: DictConfig) -> None:
    from eval.prompt_sources import check_dataset, is_builtin

    if not is_builtin(cfg.dataset):
        from eval.runner import resolve_path

        return check_dataset(cfg.dataset, lambda p: resolve_path(p, must_exist=True))
    if not cfg.dataset.suites:
        raise ValueError("dataset.suites is empty; choose from " + str(list(SUITES)))
    for suite in cfg.dataset.suites:
        _choice("dataset suite", suite, SUITES)


def spec_config(cfg: DictConfig) -> SpecConfig | None:
    """The decoder configuration of a run (None for the autoregressive baselines)."""
    if cfg.method.name in ("ar", "hf_generate"):
        return None
    fields = {f: v for f, v in to_plain(cfg.method).items() if f != "name" and f in SpecConfig.__dataclass_fields__}
    return SpecConfig(method=cfg.method.name, temperature=float(cfg.temperature), **fields)


def method_key(cfg: DictConfig, method: str | None = None) -> dict:
    """Everything that determines the rows of one method: hashed into config_hash.

    A drafting method's key also holds ``head_sha``, the fingerprint of the head's weight files
    (``rheo.models.locate.head_fingerprint``): rows of a replaced head are never resumed.
    Parameters a method does not use are None (Top-K has no m, AR has no tree),
    so e.g. a sweep over m reuses the Top-K and AR rows instead of recomputing them.
    The parameters a method uses are its registered ``fields`` (rheo.methods).
    """
    method = method or cfg.method.name
    key = {
        "model": cfg.model.name, "target_path": cfg.model.target_path, "head_path": cfg.model.head_path,
        "device": cfg.device, "dtype": cfg.dtype, "method": method,
        "temperature": float(cfg.temperature), "seed": int(cfg.seed),
        "max_new_tokens": int(cfg.max_new_tokens), **dict.fromkeys(LEGACY_KEY_FIELDS),
    }
    key["paired_with"] = None
    if method in ("ar", "hf_generate"):
        key.update(head_path=None)  # AR never uses the drafter
        if method == "ar" and cfg.paired_baseline and cfg.method.name != "ar":
            key["paired_with"] = config_hash(method_key(cfg))
    else:
        plain = to_plain(cfg.method)
        key.update({f: plain[f] for f in get_method(method).fields})
        if cfg.model.name in REGISTRY:  # the head's weights, not only its path (a retrained default)
            key["head_sha"] = head_fingerprint(cfg.model.name, cfg.model.head_path)
    return key


def methods() -> list[str]:
    """Values of method.name: "ar", "hf_generate" (transformers generate, a speed reference) and the
    registered methods."""
    return ["ar", "hf_generate"] + method_names()


def config_hash(key: dict) -> str:
    blob = json.dumps(key, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def generation_seed(suite: str, item_id: int, turn: int, seed: int) -> int:
    """Seed of the torch.Generator for one (suite, item, turn, seed): same for every method."""
    blob = f"{suite}/{item_id}/{turn}/{seed}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:7], "little")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose from {list(allowed)}")


def to_plain(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
