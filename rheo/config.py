"""SpecConfig: the one typed description of a decoding method, and the one list of its parameters.

A harness derives everything else from the fields below (:func:`method_parameters`):
the typed Hydra node of ``configs/method/*.yaml``, the method columns of a result row
and the config-hash key (a method's key holds the fields it registers as ``fields``,
rheo.methods). A new parameter is one field here, plus its default in the YAML of the
methods that read it and its name in their ``fields``.
"""

from __future__ import annotations

import math
import numbers
import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, Optional

from rheo.adaptive import ADAPT_RULES
from rheo.methods.registry import get_method
from rheo.presets import PRESETS, preset_fields

#: the paper's tree (K=10, depth 8, R=60 kept nodes, top-128 sparse draft): SpecConfig's defaults, and
#: through them the method configs' (configs/method/*.yaml) and every script's; written only here
PAPER_TREE = MappingProxyType({"k": 10, "depth": 8, "tree_size": 60, "sparse_top": 128})
PROXIES = ("rheo", "tempered", "fixed")
RANKS = ("q", "q_T")
VERIFY_ORDERS = ("stochastic_first", "deterministic_first")
#: how the models run (rheo.engine): "eager" (the reference: committed rows, exactness tests), "static"
#: (static-shape sessions run eagerly, the twin of the compiled path) or "graphs" (those compiled)
ENGINES = ("eager", "static", "graphs")
ADAPTS = ("none", *ADAPT_RULES)
#: field metadata: held (None where unused) by the harness key of every method, whatever it reads, so
#: the config hashes of rows stay what they were; other fields enter only the keys of methods that read
#: them. Marking another field so changes every config hash.
IN_EVERY_KEY = {"in_every_key": True}
#: field metadata: in the key of the methods that read it only when set to something other than its
#: default, so that adding the parameter leaves the config hashes of every earlier row as they were
KEY_WHEN_SET = {"key_when_set": True}
#: field metadata: a library setting only, no harness parameter (no config key, no row column)
LIBRARY_ONLY = {"harness": False}
#: fields a harness takes from the run rather than from the method node
RUN_FIELDS = ("method", "temperature", "engine")


@dataclass(frozen=True)
class SpecConfig:
    """Tree shape, candidate rule and verification rule of one decoder.

    method:       a registered method (rheo.methods): "rheo" (m leads + 1 sample + fills),
                  "topk" (EAGLE-2/3 rule), "static" (static stochastic tree), "chain"
                  (chain speculative sampling), or a reference method without a tree that
                  a harness registers (its baselines); each reads only some of the fields below
    k:            candidate slots per expanded node, and frontier width per layer
    m:            lead slots (rheo only), 0 <= m <= k-1
    depth:        drafted layers below the root
    tree_size:    drafted nodes kept after global re-ranking (root excluded)
    temperature:  0 = greedy; enters sampling and verification only
    sparse_top:   keep this many top draft logits before the softmax (None = all)
    proxy:        "rheo" (min(q(x_m), z); q(x_1)+eps for m=0), "tempered" (max(q(x_{m+1}) + eps,
                  min(q(x_m), z_T)), z_T the non-lead mass of the draft at temperature T) or
                  "fixed" (lossy ablation); q is the ranking distribution (``rank``)
    rank:         what path scores are made of (Top-K and Rheo): "q" (the untempered draft, the
                  EAGLE-2/3 and paper rule) or "q_T" (the draft at the sampling temperature; at
                  T = 0 its limit, the logit gaps to the node's best draft logit)
    probe_min:    Rheo: a node draws its sample only where the draft's non-lead mass at temperature
                  T (z_T) is at least this; elsewhere it is a Top-K node. 0 = always (the paper)
    adapt:        Rheo: "none" (these settings at every cycle) or "root": per request, each cycle uses
                  Rheo m=0 while the roots of the earlier cycles say the sampled child is accepted
                  more often than the draft's top token, else these settings; or "level": Rheo
                  m=0 while the mean acceptance of a sampled child at those roots is at least
                  rheo.adaptive.LEVEL, else these settings (rheo.adaptive)
    proxy_value:  the constant of proxy="fixed"
    verify_order: "stochastic_first" (lossless) or "deterministic_first" (lossy ablation)
    proxy_eps:    the eps of the m=0 proxy
    branching:    static trees: children per node at each depth, (b1, ..., bd); depth = d
    replacement:  static trees: siblings drawn i.i.d. (True, SpecInfer) or without
                  replacement (False, RSD)
    verifier:     static trees and chains: "rrs" (recursive rejection sampling, token by token from
                  the root) or "traversal" (Traversal Verification, sequence-level acceptance from the
                  leaves up; chains and i.i.d. trees only: rheo.methods.traversal)
    engine:       how the target and the drafter run, whatever the method (rheo.engine): "eager"
                  (the reference), "static" (static-shape sessions, eagerly) or "graphs" (the
                  same compiled to graphs); a run's setting like temperature, in a row's key only
                  when not "eager" (rows of two engines never pool)
    """

    method: str = "rheo"
    k: int = field(default=PAPER_TREE["k"], metadata=IN_EVERY_KEY)
    m: int = field(default=1, metadata=IN_EVERY_KEY)
    depth: int = field(default=PAPER_TREE["depth"], metadata=IN_EVERY_KEY)
    tree_size: int = field(default=PAPER_TREE["tree_size"], metadata=IN_EVERY_KEY)
    temperature: float = 1.0
    sparse_top: Optional[int] = field(default=PAPER_TREE["sparse_top"], metadata=IN_EVERY_KEY)
    proxy: str = field(default="rheo", metadata=IN_EVERY_KEY)
    proxy_value: float = field(default=0.25, metadata=LIBRARY_ONLY)
    verify_order: str = field(default="stochastic_first", metadata=IN_EVERY_KEY)
    proxy_eps: float = field(default=1e-6, metadata=LIBRARY_ONLY)
    branching: Optional[tuple[int, ...]] = None
    replacement: bool = False
    rank: str = field(default="q", metadata=KEY_WHEN_SET)
    probe_min: float = field(default=0.0, metadata=KEY_WHEN_SET)
    adapt: str = field(default="none", metadata=KEY_WHEN_SET)
    verifier: str = field(default="rrs", metadata=KEY_WHEN_SET)
    engine: str = "eager"

    def __post_init__(self) -> None:
        for name in ("k", "m", "depth", "tree_size", "sparse_top"):  # np.int64(3) -> 3
            _as_int(self, name)
        for name in ("temperature", "proxy_value", "proxy_eps", "probe_min"):  # np.float32(0.5) -> 0.5
            _as_float(self, name)
        if self.method in PRESETS:  # a name of rheo.presets is a bundle of fields, not a method
            raise ValueError(f"{self.method!r} is a preset, not a method: use SpecConfig.preset({self.method!r}, "
                             f"temperature=...) (rheo.presets)")
        method = get_method(self.method)  # ValueError listing the registered methods
        _choice("proxy", self.proxy, PROXIES)
        _choice("verify_order", self.verify_order, VERIFY_ORDERS)
        _choice("rank", self.rank, RANKS)
        _choice("adapt", self.adapt, ADAPTS)
        _choice("engine", self.engine, ENGINES)
        if not (type(self.probe_min) is float and 0.0 <= self.probe_min <= 1.0):
            raise ValueError(f"probe_min must be a number in [0, 1], got {_show(self.probe_min)}")
        unread = unread_settings({f: getattr(self, f) for f in self.__dataclass_fields__}, method.fields, type(self))
        if "verifier" in unread:  # a verifier choice on a tree it is not proven for: say why
            raise ValueError(f"verifier={self.verifier!r} needs a tree whose children are drawn from the draft "
                             f"(method='static' or 'chain'); method={self.method!r} chooses its children by rank, "
                             "and sequence-level acceptance is proven lossless only for drawn children")
        if unread:
            shown = ", ".join(f"{name}={value!r}" for name, value in unread.items())
            raise ValueError(f"method={self.method!r} does not read {shown}: drop {'it' if len(unread) == 1 else 'them'} "
                             f"(it reads {', '.join(method.fields) or 'none of the tree parameters'} and temperature)")
        _int_at_least("k", self.k, 1)
        _int_at_least("depth", self.depth, 1)
        _int_at_least("tree_size", self.tree_size, 1)
        if not _is_int(self.m):
            raise ValueError(f"m must be an integer in [0, k-1] = [0, {self.k - 1}], got {_show(self.m)}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, float) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {_show(t)}")
        if self.sparse_top is not None:
            if not _is_int(self.sparse_top):
                raise ValueError(f"sparse_top must be None or an integer >= k={self.k}, got {_show(self.sparse_top)}")
        if self.proxy == "fixed" and not (type(self.proxy_value) is float and 0.0 < self.proxy_value <= 1.0):
            raise ValueError(f"proxy_value must be a number in (0, 1], got {_show(self.proxy_value)}")
        if not (type(self.proxy_eps) is float and 0.0 < self.proxy_eps < 1e-2):
            raise ValueError(f"proxy_eps must be a number in (0, 0.01), got {_show(self.proxy_eps)}")
        if self.branching is not None:
            b = self.branching
            if isinstance(b, (tuple, list)):  # integral numbers (np.int64) as plain ints, as for k
                b = [int(x) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else x for x in b]
            if (not isinstance(b, (tuple, list)) or not b
                    or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in b)):
                raise ValueError(f"branching must be None or a non-empty sequence of ints >= 1, got {b!r}")
            object.__setattr__(self, "branching", tuple(b))  # frozen: normalise a list once
        if not isinstance(self.replacement, bool):
            raise ValueError(f"replacement must be a bool, got {self.replacement!r}")
        method.validate(self)

    @classmethod
    def preset(cls, name: str, **overrides) -> "SpecConfig":
        """The named preset of rheo.presets (e.g. "rheo_auto") with ``overrides`` (temperature, tree) on top."""
        return cls(**preset_fields(name, **overrides))

    @classmethod
    def for_method(cls, method: str, **params) -> "SpecConfig":
        """``method``'s configuration from parameters shared by several methods (a loop over methods with
        one k and m): those ``method`` does not read are dropped, where the constructor refuses them."""
        reads = set(get_method(method).fields)
        harness = {f.name for f in method_parameters(cls)}
        return cls(method=method, **{f: v for f, v in params.items() if f in reads or f not in harness})

    @property
    def max_children(self) -> int:
        """The most children one drafted node can get under this method."""
        return get_method(self.method).max_children(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def method_parameters(spec_type: type = SpecConfig) -> tuple[dataclasses.Field, ...]:
    """The fields of ``spec_type`` (SpecConfig or an extension of it) that a harness exposes as
    method parameters, in declaration order: all but the run's own and the library-only ones."""
    return tuple(f for f in dataclasses.fields(spec_type)
                 if f.name not in RUN_FIELDS and f.metadata.get("harness", True))


def unread_settings(values: Mapping[str, object], reads: Iterable[str],
                    spec_type: type = SpecConfig) -> dict[str, object]:
    """The method parameters among ``values`` that a method reading ``reads`` ignores but that are set
    away from their defaults (``topk`` with ``m=3``): a value that would mean nothing, refused by
    SpecConfig and dropped, with a note, from the jobs of a harness sweep over it."""
    reads = set(reads)
    return {f.name: values[f.name] for f in method_parameters(spec_type)
            if f.name in values and f.name not in reads and values[f.name] != f.default}


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def _int_at_least(name: str, value: object, low: int) -> None:
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {_show(value)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is not a count


def _as_int(cfg: SpecConfig, name: str) -> None:
    """Store an integral number (int, numpy/torch integer) as a plain int; anything else
    (floats, bools, strings) is left for the checks to reject."""
    value = getattr(cfg, name)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        object.__setattr__(cfg, name, int(value))


def _as_float(cfg: SpecConfig, name: str) -> None:
    """Store a real number (int, float, numpy float) as a plain float; bools stay (and are rejected)."""
    value = getattr(cfg, name)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        object.__setattr__(cfg, name, float(value))


def _show(value: object) -> str:
    """'3.5 (float)': the value and its type, so that "must be an integer, got 3" cannot happen."""
    return f"{value!r} ({type(value).__name__})"
