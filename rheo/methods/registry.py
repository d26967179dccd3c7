"""The one place a verification method is defined: name -> :class:`Method`.

A method is a pair of plug-ins plus what the rest of the project needs to know
about it:

* a **candidate rule** ``(dist, cfg, rng, layer) -> Candidates``: the children of
  the expanded nodes of one layer, from their truncated draft distribution
  (``dist``: :class:`rheo.probs.DraftDist`, ``[f, S]``);
* a **tree builder** ``(draft_fn, root_token, cfg, rng, draft_to_target, device)
  -> BuiltTree``: which nodes get expanded and which are kept (the dynamic
  EAGLE tree of :mod:`rheo.tree`, or a static product shape); it asks the
  candidate rule for every layer;
* a **verifier** ``(built, target_logits [n, V], cfg, rng) -> VerifyResult``: the
  accepted path and the bonus token (vLLM keeps one rejection sampler per
  module behind one signature in the same way);
* the :class:`rheo.config.SpecConfig` **fields** it reads (validated, hashed into
  the harness's config hash, stored as row columns; the others are ignored),
  its **display name**, its row **label** and, optionally, its single-node
  acceptance in closed form (``rheo.theory``-style, used by the theory table).

Modules of the :mod:`rheo.methods` package register their methods when imported;
every module of the package is imported on the first lookup, so adding a method
is adding one module (see the README, "Adding a verification method"). A method
module must not import :mod:`rheo.decode` (the decode loop looks methods up).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import torch

if TYPE_CHECKING:  # only for annotations: these modules look methods up themselves
    from rheo.candidates import Candidates
    from rheo.config import SpecConfig
    from rheo.probs import DraftDist
    from rheo.random import RandomSource
    from rheo.tree import BuiltTree, DraftFn
    from rheo.verify import VerifyResult

KINDS = ("dynamic", "static")


class CandidateRule(Protocol):
    def __call__(self, dist: "DraftDist", cfg: "SpecConfig", rng: "RandomSource", layer: int) -> "Candidates":
        """dist: [f, S] draft distribution of the f nodes expanded at ``layer`` (0 = the root's
        children) -> Candidates with [f, slots] children."""


class TreeBuilder(Protocol):
    def __call__(self, draft_fn: "DraftFn", root_token: int, cfg: "SpecConfig", rng: "RandomSource",
                 draft_to_target: Optional[torch.Tensor], device: torch.device | str) -> "BuiltTree":
        """Draft one tree below ``root_token``; draft_to_target: [Vd] target ids or None."""


class Verifier(Protocol):
    def __call__(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "SpecConfig",
                 rng: "RandomSource") -> "VerifyResult":
        """target_logits: [n, V] untempered, one row per kept node of ``built``."""


def _no_checks(cfg: "SpecConfig") -> None:
    return None


def _k(cfg: "SpecConfig") -> int:
    return cfg.k


@dataclass(frozen=True)
class Method:
    """name:        SpecConfig.method, configs/method/<name>.yaml, the row's ``method`` column
    display:     name in tables and figures ("Top-K")
    kind:        "dynamic" (context-aware tree, pruned) or "static" (fixed shape, no pruning)
    candidates:  the candidate rule
    build:       the tree builder (rheo.tree.build_dynamic_tree for dynamic methods)
    verify:      the verifier
    fields:      SpecConfig fields the method reads (temperature aside, which every method reads)
    validate:    extra checks of a SpecConfig of this method (raise ValueError naming the field)
    max_children: the most children one node can get (checked against the draft vocabulary)
    label:       row (or SpecConfig) -> variant label, a stable key starting with ``name``
    pretty:      variant label -> display text
    acceptance:  (target_probs [V], draft_logits [V], cfg) -> probability that one node whose
                 children all survive accepts a child; None if there is no closed form
    """

    name: str
    display: str
    kind: str
    candidates: CandidateRule
    build: TreeBuilder
    verify: Verifier
    fields: tuple[str, ...]
    validate: Callable[["SpecConfig"], None] = _no_checks
    max_children: Callable[["SpecConfig"], int] = _k
    label: Optional[Callable[[Any], str]] = None
    pretty: Optional[Callable[[str], str]] = None
    acceptance: Optional[Callable[[torch.Tensor, torch.Tensor, "SpecConfig"], float]] = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name == "ar":
            raise ValueError(f"method name must be an identifier other than 'ar', got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}, got {self.kind!r}")

    def variant(self, row: Any) -> str:
        """The variant label of a row or SpecConfig of this method (tables group by it)."""
        return self.label(row) if self.label is not None else self.name

    def display_variant(self, variant: str) -> str:
        """'rheo m=1' -> 'Rheo m=1' unless the method says otherwise."""
        if self.pretty is not None:
            return self.pretty(variant)
        return self.display + variant[len(self.name):]


_REGISTRY: dict[str, Method] = {}
_DISCOVERED = False


def register(method: Method, replace: bool = False) -> Method:
    """Make ``method`` known by its name (``replace`` to overwrite an existing one)."""
    if method.name in _REGISTRY and _REGISTRY[method.name] is not method and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    """Forget a method (tests register throw-away methods)."""
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every module of the rheo.methods package once (each registers its methods)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("rheo.methods")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"rheo.methods.{info.name}")


def get_method(name: str) -> Method:
    """The registered method ``name``; ValueError listing the choices otherwise."""
    _discover()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        choices = ", ".join(f"{kind} trees {method_names(kind)}" for kind in KINDS)
        raise ValueError(f"method must be a registered method: {choices}; got {name!r}") from None


def method_names(kind: Optional[str] = None) -> list[str]:
    """Registered method names (sorted), optionally of one kind."""
    _discover()
    return sorted(n for n, m in _REGISTRY.items() if kind is None or m.kind == kind)


def registration_rank(name: str) -> int:
    """Position of a method in registration order (tables list methods in this order)."""
    _discover()
    return list(_REGISTRY).index(name)


def method_of_variant(variant: str) -> Optional[Method]:
    """The method a variant label belongs to (labels start with the method name), or None."""
    _discover()
    return _REGISTRY.get(variant.split(" ", 1)[0])
