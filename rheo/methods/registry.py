"""The one place a verification method is defined: name -> :class:`Method`.

A method is a pair of plug-ins plus what the rest of the project needs to know
about it:

* a **candidate rule** ``(dist, cfg, rng, layer) -> Candidates``: the children of
  the expanded nodes of one layer, from their truncated draft distribution
  (``dist``: :class:`rheo.probs.DraftDist`, ``[f, S]``);
* a **tree builder** ``(candidates, draft_fn, root_token, cfg, rng, draft_to_target,
  device) -> BuiltTree``: which nodes get expanded and which are kept (the dynamic
  EAGLE tree of :mod:`rheo.tree`, or a static product shape); it calls the
  candidate rule it is handed for every layer;
* a **verifier** ``(built, target_logits [n, V], cfg, rng) -> VerifyResult``: the
  accepted path and the bonus token (vLLM keeps one rejection sampler per
  module behind one signature in the same way);
* optionally its **path probabilities** ``(built, target_logits, cfg) -> [n]``: the
  probability, over the verifier's randomness, that each kept node lies on the
  accepted path (:mod:`rheo.expected`); their sum is the cycle's expected number of
  emitted tokens;
* the :class:`rheo.config.SpecConfig` **fields** it reads (validated, hashed into
  the harness's config hash, stored as row columns; the others are ignored),
  its **display name**, its row **label** and, optionally, its single-node
  acceptance in closed form (``rheo.theory``-style, used by the theory table).

A **reference** method drafts no tree: it has a ``generate`` entry instead of the
three plug-ins (the autoregressive baseline and ``transformers`` ``generate``,
registered by :mod:`baselines`), so a harness runs every method through one
function and names it through this registry.

A method module registers its methods when imported; the package
(``rheo/methods/__init__.py``) imports the built-in ones by name, and a new
method is one module plus one line there (see the README, "Adding a verification
method"). The decode loop looks a method up once per generation and hands its
plug-ins to the mechanisms (:mod:`rheo.tree`, :mod:`rheo.verify`,
:mod:`rheo.expected`), which know nothing of the registry. A method module must
import neither :mod:`rheo.decode` nor :mod:`rheo.config` (the configuration
validates itself against this registry), not even for annotations: plug-ins
annotate with the protocol :class:`rheo.spec.Spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence

import torch

from rheo.presets import PRESETS
from rheo.probs import draft_distribution

if TYPE_CHECKING:  # only for annotations: the registry imports no mechanism
    from rheo.candidates import Candidates
    from rheo.probs import DraftDist
    from rheo.random import RandomSource
    from rheo.spec import Spec
    from rheo.tree import BuiltTree, DraftFn
    from rheo.verify import VerifyResult

TREE_KINDS = ("dynamic", "static")
KINDS = TREE_KINDS + ("reference",)


class CandidateRule(Protocol):
    def __call__(self, dist: "DraftDist", cfg: "Spec", rng: "RandomSource", layer: int) -> "Candidates":
        """dist: [f, S] draft distribution of the f nodes expanded at ``layer`` (0 = the root's
        children) -> Candidates with [f, slots] children."""


class TreeBuilder(Protocol):
    def __call__(self, candidates: CandidateRule, draft_fn: "DraftFn", root_token: int, cfg: "Spec",
                 rng: "RandomSource", draft_to_target: Optional[torch.Tensor],
                 device: torch.device | str) -> "BuiltTree":
        """Draft one tree below ``root_token`` with the candidate rule ``candidates``;
        draft_to_target: [Vd] target ids or None."""


class Verifier(Protocol):
    def __call__(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec",
                 rng: "RandomSource") -> "VerifyResult":
        """target_logits: [n, V] untempered, one row per kept node of ``built``."""


class Generate(Protocol):
    def __call__(self, pair: Any, prompt: Sequence[int], max_new_tokens: int, temperature: float,
                 generator: torch.Generator, eos_token_id: Any, device: torch.device | str,
                 timer: Any) -> Any:
        """One generation of a reference method with ``pair`` (a rheo.models ModelPair) ->
        rheo.decode.GenerationOutput; ``timer``: a rheo.timing.PhaseTimer or None."""


class PathProbs(Protocol):
    def __call__(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec") -> torch.Tensor:
        """target_logits: [n, V] untempered (reads the rows of nodes with children only) ->
        [n] float64, the probability that the verifier's accepted path holds each node (root: 1)."""


def label_number(value: float) -> str:
    """A number in a label, one-to-one with its value: the short form (``0.1``, ``1e-05``) when it reads
    back as the same float, else the float's repr (``0.1000001``), so two keys never share a label."""
    value = float(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _no_checks(cfg: "Spec") -> None:
    return None


def _k(cfg: "Spec") -> int:
    return cfg.k


@dataclass(frozen=True)
class Method:
    """name:        SpecConfig.method, configs/method/<name>.yaml, the row's ``method`` column
    display:     name in tables and figures ("Top-K")
    kind:        "dynamic" (context-aware tree, pruned), "static" (fixed shape, no pruning) or
                 "reference" (no tree: ``generate`` instead of the three plug-ins)
    candidates:  the candidate rule (tree kinds)
    build:       the tree builder (rheo.tree.build_dynamic_tree for dynamic methods)
    verify:      the verifier
    generate:    a reference method's generation (module docstring); None for tree methods,
                 which run the speculative loop (rheo.decode)
    phases:      whether rheo.timing can time the method's phases (False: a library's own loop)
    fields:      SpecConfig fields the method reads (temperature aside, which every method reads)
    validate:    extra checks of a SpecConfig of this method (raise ValueError naming the field)
    max_children: the most children one node can get (checked against the draft vocabulary)
    label:       row (or SpecConfig) -> variant label, a stable key starting with ``name``
    pretty:      variant label -> display text
    rename:      a variant label as stored by an earlier version -> the label ``label`` gives today
                 (Rheo: the rule part named by its preset, 'rheo m=1 proxy=tempered' -> 'rheo_auto');
                 None: labels never changed
    acceptance:  (target_probs [V], draft_logits [V], cfg) -> probability that one node whose
                 children all survive accepts a child; None if there is no closed form
    path_probs:  the verifier's path probabilities (module docstring); None if it has none
                 (then ``record_expected`` is refused for this method)
    candidate_sets: (dist [1, S] of the root, cfg) -> [(token set, probability)], the
                 distribution of the root's candidate set (rheo.ot); None if unknown
    """

    name: str
    display: str
    kind: str
    candidates: Optional[CandidateRule] = None
    build: Optional[TreeBuilder] = None
    verify: Optional[Verifier] = None
    fields: tuple[str, ...] = ()
    generate: Optional[Generate] = None
    phases: bool = True
    validate: Callable[["Spec"], None] = _no_checks
    max_children: Callable[["Spec"], int] = _k
    label: Optional[Callable[[Any], str]] = None
    pretty: Optional[Callable[[str], str]] = None
    rename: Optional[Callable[[str], str]] = None
    acceptance: Optional[Callable[[torch.Tensor, torch.Tensor, "Spec"], float]] = None
    path_probs: Optional[PathProbs] = None
    candidate_sets: Optional[Callable[["DraftDist", "Spec"], Optional[list]]] = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"method name must be an identifier, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}, got {self.kind!r}")
        plugins = (self.candidates, self.build, self.verify)
        if self.is_reference and (self.generate is None or any(p is not None for p in plugins)):
            raise ValueError(f"reference method {self.name!r} needs generate and no tree plug-ins")
        if not self.is_reference and (self.generate is not None or any(p is None for p in plugins)):
            raise ValueError(f"{self.kind} method {self.name!r} needs candidates, build and verify, not generate")

    @property
    def is_reference(self) -> bool:
        """A reference method: no draft tree (the baselines)."""
        return self.kind == "reference"

    def build_tree(self, draft_fn: "DraftFn", root_token: int, cfg: "Spec", rng: "RandomSource",
                   draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> "BuiltTree":
        """Draft one tree: the method's builder with the method's candidate rule."""
        return self.build(self.candidates, draft_fn, root_token, cfg, rng, draft_to_target, device)

    def verify_tree(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec",
                    rng: "RandomSource") -> "VerifyResult":
        """target_logits: [n, V] (untempered) for the n kept nodes of ``built``."""
        _check_rows(built, target_logits)
        return self.verify(built, target_logits, cfg, rng)

    def expected_emitted(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec") -> float:
        """Expected tokens the verifier emits on ``built`` (accepted drafted tokens + the bonus),
        over its own randomness: the sum of the path probabilities."""
        return float(self.node_path_probs(built, target_logits, cfg).sum())

    def node_path_probs(self, built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec") -> torch.Tensor:
        """[n] float64, the probability that the accepted path holds each kept node."""
        if self.path_probs is None:
            raise ValueError(f"method {self.name!r} registers no path_probs: its expected acceptance is unknown")
        _check_rows(built, target_logits)
        return self.path_probs(built, target_logits, cfg)

    def select(self, draft_logits: torch.Tensor, cfg: "Spec", rng: "RandomSource",
               draft_to_target: Optional[torch.Tensor] = None, layer: int = 0) -> tuple["Candidates", torch.Tensor]:
        """draft_logits: [f, Vd] -> (Candidates of the candidate rule, support ids [f, S])."""
        dist = draft_distribution(draft_logits, cfg.sparse_top, draft_to_target)
        return self.candidates(dist, cfg, rng, layer), dist.ids

    def variant(self, row: Any) -> str:
        """The variant label of a row or SpecConfig of this method (tables group by it)."""
        return self.label(row) if self.label is not None else self.name

    def display_variant(self, variant: str) -> str:
        """'rheo m=1' -> 'Rheo m=1' unless the method says otherwise; a label named by a preset
        ('rheo_auto', 'rheo_auto probe_min=0.1') shows as it is."""
        if variant.split(" ", 1)[0] in PRESETS:
            return variant
        if self.pretty is not None:
            return self.pretty(variant)
        return self.display + variant[len(self.name):]


def _check_rows(built: "BuiltTree", target_logits: torch.Tensor) -> None:
    if target_logits.shape[0] != built.tree.num_nodes:
        raise ValueError(f"target logits have {target_logits.shape[0]} rows for {built.tree.num_nodes} nodes")


_REGISTRY: dict[str, Method] = {}
PLUGIN_ERRORS: list[str] = []  # why plug-in modules did not load (rheo.methods.plugins): get_method says it


def register(method: Method, replace: bool = False) -> Method:
    """Make ``method`` known by its name (``replace`` to overwrite an existing one)."""
    if method.name in _REGISTRY and _REGISTRY[method.name] is not method and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    """Forget a method (tests register throw-away methods)."""
    _REGISTRY.pop(name, None)


def get_method(name: str) -> Method:
    """The registered method ``name``; ValueError listing the choices otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        choices = ", ".join(f"{kind} trees {method_names(kind)}" for kind in TREE_KINDS)
        if method_names("reference"):
            choices += f", references {method_names('reference')}"
        failed = "".join(f" ({why})" for why in PLUGIN_ERRORS)
        raise ValueError(f"method must be a registered method: {choices}; got {name!r}{failed}") from None


def method_names(kind: Optional[str] = None) -> list[str]:
    """Registered method names (sorted) of one kind; None: the tree methods (dynamic and static)."""
    kinds = TREE_KINDS if kind is None else (kind,)
    return sorted(n for n, m in _REGISTRY.items() if m.kind in kinds)


def reads(name: str, field: str) -> bool:
    """Whether method ``name`` reads the SpecConfig ``field`` (its registered ``fields``): how code
    outside the methods tells, e.g., the rheostat m or a static shape apart, never by method name."""
    return field in get_method(name).fields


def registration_rank(name: str) -> int:
    """Position of a method in registration order (tables list methods in this order; an unknown one: last)."""
    return list(_REGISTRY).index(name) if name in _REGISTRY else len(_REGISTRY)


def method_of_variant(variant: str) -> Optional[Method]:
    """The method a variant label belongs to (labels start with the method name, or with the name of
    a preset of it: rheo.presets), or None."""
    first = variant.split(" ", 1)[0]
    return _REGISTRY.get(PRESETS[first]["method"] if first in PRESETS else first)


def current_label(variant: str) -> str:
    """A stored variant label (a same-state row's ``variant`` or ``driver``) as its method labels it
    today (the method's ``rename``); unknown labels as they are."""
    method = method_of_variant(variant)
    return method.rename(variant) if method is not None and method.rename is not None else variant


# ------------------------------------------------------------------ one-off lookups (tests, scripts)
def build_tree(draft_fn: "DraftFn", root_token: int, cfg: "Spec", rng: "RandomSource",
               draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> "BuiltTree":
    """The draft tree of ``cfg.method`` (a loop looks the method up once instead)."""
    return get_method(cfg.method).build_tree(draft_fn, root_token, cfg, rng, draft_to_target, device)


def verify_tree(built: "BuiltTree", target_logits: torch.Tensor, cfg: "Spec",
                rng: "RandomSource") -> "VerifyResult":
    """``cfg.method``'s verifier on ``built``; target_logits: [n, V] untempered."""
    return get_method(cfg.method).verify_tree(built, target_logits, cfg, rng)


def select_candidates(draft_logits: torch.Tensor, cfg: "Spec", rng: "RandomSource",
                      draft_to_target: Optional[torch.Tensor] = None,
                      layer: int = 0) -> tuple["Candidates", torch.Tensor]:
    """draft_logits: [f, Vd] -> (Candidates of ``cfg.method``'s rule, support ids [f, S])."""
    return get_method(cfg.method).select(draft_logits, cfg, rng, draft_to_target, layer)
