"""Typed run configuration of the benchmark harness (the single source of truth).

The dataclasses below are registered with Hydra's ConfigStore as the schema of
``configs/config.yaml``: every YAML file of the ``model``, ``dataset`` and
``method`` groups is merged into a typed node, so an unknown key or a value of
the wrong type fails at start-up, before anything is loaded.

The ``method`` node is derived from :class:`rheo.config.SpecConfig`
(:func:`method_conf_type`). Derived values (the SpecConfig of a run, the config
hash that names its results directory, the per-(item, turn) generation seed) are
computed in one place each: :func:`spec_config` here, the rest in the Hydra-free
:mod:`eval.store.keys`. :func:`run_plan` derives, once, every method configuration a run
will use with its key (a :class:`CheckedRun`), after eval.conf.validate.check_run has checked
the fields.
"""

from __future__ import annotations

import logging
import typing
import warnings
import dataclasses
from dataclasses import dataclass, field, make_dataclass
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from baselines import AR
from eval.conf.resolvers import register_resolvers
from eval.store import keys
from eval.store.keys import SUITE_FILES, config_hash
from rheo.config import SpecConfig, method_parameters, unread_settings
from rheo.methods import get_method, method_names, plugin_methods
from rheo.models.catalog import MODELS as REGISTRY
from eval.conf.run_choices import run_dtype, run_protocol  # noqa: F401  (re-exported)
from rheo.placement import DTYPE_NAMES

#: model names of rheo.models.load_model_pair (defined once, in its registry), plus the harness-only test pair
log = logging.getLogger(__name__)
PAPER_MODELS = tuple(REGISTRY)
TEST_MODELS = ("tiny_random",)
MODELS = PAPER_MODELS + TEST_MODELS
#: the model config of a pair of your own (configs/model/local.yaml): any other name, with both folders
LOCAL_MODEL = "local"
SUITES = tuple(SUITE_FILES)
DTYPES = DTYPE_NAMES


@dataclass
class ModelConf:
    name: str = MISSING
    target_path: Optional[str] = None  # local weights of the target (None = model default)
    head_path: Optional[str] = None  # local weights of the draft head (None = model default)
    chat_format: Optional[str] = None  # "template" | "vicuna_v1.1" (None: the catalog's; "template" for your own)
    eos_tokens: Optional[List[str]] = None  # token strings that end a turn (None: the catalog's; the tokenizer's eos)


@dataclass
class DatasetConf:
    """The six suites of data_dir (``path`` and ``hub`` unset), or a user's prompt set read with
    ``datasets`` (eval/prompts/sources.py; docs/datasets.md). None of it enters the config hash: rows
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


def method_conf_type(spec_type: type = SpecConfig) -> type:
    """The typed node of the ``method`` group: ``name`` (a registered method) plus every method
    parameter of ``spec_type`` (rheo.config.method_parameters) with its type and default."""
    hints = typing.get_type_hints(spec_type)
    fields = [("name", str, field(default=MISSING))]
    fields += [(f.name, _node_type(hints[f.name]), field(default=f.default)) for f in method_parameters(spec_type)]
    node = make_dataclass("MethodConf", fields)
    node.__module__ = __name__
    return node


def _node_type(annotation):
    """A SpecConfig annotation as omegaconf types it: a variable-length tuple is a List."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return Optional[_node_type(inner[0])] if len(inner) == 1 else annotation
    if typing.get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return List[args[0]]
    return annotation


MethodConf = method_conf_type()


@dataclass
class RunConf:
    model: ModelConf = MISSING
    dataset: DatasetConf = MISSING
    method: MethodConf = MISSING
    temperature: float = 1.0
    engine: str = "eager"  # how the models run (rheo.engine): eager | static | graphs; in the key when not eager
    seed: int = 0
    max_new_tokens: int = 256
    limit: Optional[int] = None  # first `limit` items of each suite (None = all)
    item_ids: Optional[List[int]] = None  # explicit question_ids (applied before limit)
    device: str = "cpu"
    dtype: Optional[str] = "auto"  # auto: by CPU capability (run_dtype); None = the model's default
    protocol: Optional[str] = None  # template | eagle3 (rheo.models.protocol); None: the model's own; keyed unless template
    out_root: str = "outputs"  # the output root (config.yaml: $RHEO_OUT, else outputs); not in the config hash
    paths: Dict[str, str] = field(default_factory=dict)  # the project's folders (configs/paths/)
    output_dir: str = MISSING  # config.yaml: ${paths.runs}
    data_dir: str = MISSING  # config.yaml: ${paths.data}
    baseline: bool = True  # also run the AR baseline of the same target, T and seed
    # false: one AR row per (target, T, seed, item, turn), shared by every method config (cheap; fine
    # on a dedicated machine). true: an AR row per method config, timed item by item next to it, so
    # the speedup of each config compares two timings taken under the same machine load.
    paired_baseline: bool = False
    # other methods run on each item next to the run's own, item by item, the order alternating from
    # item to item (a speed comparison that a slow drift of the machine's speed falls on evenly); each
    # reads the parameters of the method node that it shares (e.g. the tree of method=rheo for topk)
    # and stores its rows under its own config hash, the same as when run alone
    alongside: List[str] = field(default_factory=list)
    warmup: bool = True  # one untimed generation before the first timed one
    progress: bool = True
    num_threads: Optional[int] = 1  # torch intra-op threads (None = torch's default); not in the config hash
    max_consecutive_failures: int = 3  # abort (loudly) if the first N generations all fail
    profile_phases: bool = True  # per-phase ms per cycle in every row (rheo.timing); false: no clock reads
    # also the exact expected emitted tokens of every cycle (rheo.expected): it draws no random number and
    # changes no token, so it is not in the config hash; a stored row without them is recomputed
    record_expected: bool = False
    # resume: a stored row made by another version of the decoding code (eval.store.code_version) is
    # recomputed; true keeps it (its numbers are the older code's); not in the config hash
    keep_stale_rows: bool = False
    experiment: Optional[str] = None  # name of the experiment preset (for logs; rows are shared across
    # experiments, e.g. the Top-K rows of the main table and the m ablation, so it is not a row column)
    # what a unit of work measures (eval.measure.loop): "realized" (the method's own decoding: tokens, tau,
    # timings; eval.measure.realized) or "same_state" (``method`` is the driver; every ``compare`` entry builds,
    # scores and evaluates its own tree at each of the driver's states; eval.measure.same_states)
    measure: str = "realized"
    compare: List[MethodConf] = field(default_factory=list)  # same_state: the compared method configs
    calibration: bool = True  # same_state: the draft-calibration columns
    ot_bound: bool = True  # same_state: the root's closed-form acceptance and optimal-transport bound (scipy)
    restore_from: Optional[str] = None  # same_state: an archive (X.parquet) whose rows seed output_dir first
    draft_mix: Optional[float] = None  # same_state: the draft-quality dial a in [0, 1]; None: the head
    draft_temp: Optional[float] = None  # same_state: the head's draft temperature tau > 0; None: as trained
    # the commands that draw this study's tables and figures from its rows (scripts/report.py); a run
    # reads none of it
    report: List[str] = field(default_factory=list)


MEASURES = ("realized", "same_state")


def register_configs() -> None:
    """Make ``base_config`` (configs/config.yaml's schema) and each plug-in's ``method=<name>`` known to Hydra. The
    output root is on Hydra's search path (tuned presets); a first run has none yet: no reason for a warning."""
    warnings.filterwarnings("ignore", message=r"provider=hydra\.searchpath in main, path=.* is not available")
    ConfigStore.instance().store(name="base_config", node=RunConf)
    for name in plugin_methods():  # rheo.methods.plugins: a method from outside the checkout, no YAML file
        ConfigStore.instance().store(group="method", name=name, node={"name": name})
    register_resolvers()  # ${rheo_out:}


def spec_config(cfg: DictConfig, method: Optional[str] = None, typed: Optional[set[str]] = None) -> SpecConfig:
    """The decoding configuration of the run's method, or of ``method`` run next to it (the AR
    baseline, which reads none of the method node's parameters, or an ``alongside`` method, which
    reads those it shares).

    A method parameter the method does not read (``m`` for Top-K), set away from its default, is
    refused when the user typed it for this one run (``typed``: default :func:`typed_method_fields`),
    as :class:`rheo.config.SpecConfig` refuses it; set by a file or a sweep shared by several methods
    (an experiment's ``method.branching``, ``method=topk,rheo method.m=0,1``), it is dropped with a
    note: the job runs, and is keyed, without it."""
    fields = {f: v for f, v in to_plain(cfg.method).items() if f != "name" and f in SpecConfig.__dataclass_fields__}
    if method is not None and method != cfg.method.name:  # only the parameters it reads (AR: none)
        return SpecConfig.for_method(method=method, temperature=float(cfg.temperature), engine=_engine(cfg), **fields)
    name = cfg.method.name
    unread = unread_settings(fields, get_method(name).fields)
    typed = typed_method_fields() if typed is None else typed
    if unread and not set(unread) & typed:  # typed ones are left to SpecConfig, which refuses them by name
        log.info("method=%s does not read %s: this job runs and is keyed without %s", name,
                 ", ".join(f"{f}={v!r}" for f, v in unread.items()), "it" if len(unread) == 1 else "them")
        fields = {f: v for f, v in fields.items() if f not in unread}
    return SpecConfig(method=name, temperature=float(cfg.temperature), engine=_engine(cfg), **fields)


def _engine(cfg: DictConfig) -> str:
    """The run's engine (a config composed before the field existed: eager)."""
    return str(cfg.get("engine") or "eager")


def typed_method_fields() -> set[str]:
    """The method parameters a user typed on the command line of a single run (``method.m=3`` ->
    {"m"}); empty in a multirun (a sweep's values are shared by its methods) and outside Hydra."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.RUN:
        return set()
    typed = HydraConfig.get().overrides.task
    return {o.lstrip("+~").split("=", 1)[0].split(".", 1)[1] for o in typed
            if o.lstrip("+~").startswith("method.") and "=" in o}


def method_key(cfg: DictConfig, method: Optional[str] = None) -> dict:
    """The key of the run's method (or of ``method`` run next to it) hashed into config_hash
    (eval.store.keys.method_key); the AR baseline of ``paired_baseline=true`` is keyed by the config it was
    timed next to."""
    return _key(cfg, spec_config(cfg, method))


def _key(cfg: DictConfig, spec: SpecConfig, own: Optional[dict] = None) -> dict:
    """``own``: the key of the run's method, when known (the AR baseline's ``paired_with``)."""
    paired = None
    if spec.method == AR.name and cfg.method.name != AR.name and cfg.paired_baseline:
        paired = config_hash(method_key(cfg) if own is None else own)
    return keys.method_key(spec, model=cfg.model.name, device=cfg.device, dtype=run_dtype(cfg).dtype, seed=cfg.seed,
                           max_new_tokens=cfg.max_new_tokens, target_path=cfg.model.target_path,
                           head_path=cfg.model.head_path, paired_with=paired, draft_mix=cfg.get("draft_mix"),
                           draft_temp=cfg.get("draft_temp"),
                           chat_format=cfg.model.get("chat_format"), eos_tokens=cfg.model.get("eos_tokens"),
                           protocol=run_protocol(cfg))


@dataclass(frozen=True)
class CheckedRun:
    """Every method configuration of a checked run, as (SpecConfig, method key) pairs: ``method`` (a
    same-state run's driver); for a realized run the methods run next to it (``alongside``, then the
    AR baseline unless ``baseline=false``); for a same-state run every ``compare`` entry."""

    spec: SpecConfig
    key: dict
    alongside: tuple = ()
    compared: tuple = ()


def run_plan(cfg: DictConfig, typed: Optional[set[str]] = None) -> CheckedRun:
    """The :class:`CheckedRun` of a config whose fields are checked (a SpecConfig that cannot be
    built raises ValueError naming the entry). ``typed``: as for :func:`spec_config` (the run's own
    method; a ``compare`` entry's values are the user's, written for that entry, and refused when unread)."""
    same_state = cfg.measure == "same_state"
    if same_state:
        entries = [(cfg, None, "")] + [(one, None, f"compare[{i}]: ") for i, one in enumerate(compare_configs(cfg))]
    else:
        names = list(cfg.alongside) + ([AR.name] if cfg.baseline and cfg.method.name != AR.name else [])
        entries = [(cfg, None, "")] + [(cfg, name, f"alongside {name}: ") for name in names]
    keyed = []
    for one, method, where in entries:
        try:
            spec = spec_config(one, method, typed if not where else set(one.method))
            if method is not None and spec.engine != "eager" and not get_method(method).phases:
                spec = dataclasses.replace(spec, engine="eager")  # its own loop: no engine applies, its key says so
            keyed.append((spec, _key(one, spec, keyed[0][1] if keyed else None)))
        except ValueError as e:
            if not where:
                raise
            raise ValueError(f"{where}{e}") from None
    (spec, key), others = keyed[0], tuple(keyed[1:])
    if same_state:
        _refuse_repeats([config_hash(k) for _, k in others])
    return CheckedRun(spec, key, compared=others) if same_state else CheckedRun(spec, key, alongside=others)


def _refuse_repeats(hashes: list[str]) -> None:
    """Two ``compare`` entries that are one method configuration (once defaults are filled) would be
    stored and tabled as one: refused, naming both."""
    first: dict[str, int] = {}
    for i, chash in enumerate(hashes):
        if chash in first:
            raise ValueError(f"compare[{i}] is compare[{first[chash]}] again (the same method configuration, "
                             f"config_hash {chash}): drop one, or give them different parameters")
        first[chash] = i


def compare_configs(cfg: DictConfig) -> list[DictConfig]:
    """A copy of the run config per ``compare`` entry of a same-state run, with the entry as ``method``."""
    out = []
    for entry in cfg.compare:
        one = cfg.copy()
        with open_dict(one):
            one.method = entry
        out.append(one)
    return out


def methods() -> list[str]:
    """Values of method.name: the reference methods (``baselines``: AR, transformers generate) and the
    registered tree methods."""
    return method_names("reference") + method_names()


def to_plain(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
