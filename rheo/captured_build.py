"""The draft loop and the tree build of a dynamic tree (Top-K, Rheo and its presets) as one capturable function.

:func:`draft_and_build` runs every draft call, every layer's candidate rule, Rheo's deferred q~, the
ranking, the kept set and its ancestor mask with fixed shapes and no host read; its randomness is an
input (a :class:`rheo.random.RandomSource`; under capture a :class:`rheo.random.PredrawnRandom` over
uniforms drawn before the call), and the root token is a tensor. It is the eager builder's own code
(:func:`rheo.tree.grow_tree`, :func:`rheo.tree.rank_nodes`, :func:`rheo.tree.select_kept`) in one
function, so ``torch.compile(fullgraph=True, dynamic=False)`` makes one graph of it per configuration
when the drafter's ``draft`` is capturable (no host read, lengths held in 0-d tensors).

:func:`finish` is the host's side, after the graph: the build's one read (the drafted count, the NaN
flag and the kept tree's lists), and, in the rare cycle where fewer slots were drafted than
``tree_size``, the eager prune from the graph's ranking. :class:`CapturedBuilder` ties both to a
method: the first build of a configuration runs the function eagerly on the cycle's own generator and
counts its uniforms; later builds draw that many at once before the call. On a CPU that one draw equals
the separate draws the eager builder makes, so the trees are the eager engine's, seed for seed (CUDA's
generator does not split a draw that way: there the trees are equal in distribution only).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

import torch

from rheo.candidates import LEAD
from rheo.models.base import DraftTree
from rheo.random import CountingRandom, PredrawnRandom, RandomSource, TorchRandom
from rheo import engine as engines
from rheo.tree import (BuiltTree, CandidateFn, DraftFn, Grown, ancestor_mask, build_dynamic_tree, built_tree,
                       check_read, grow_tree, node_capacity, prune, rank_nodes, residuals, select_kept)

if TYPE_CHECKING:
    from rheo.methods.registry import Method
    from rheo.spec import Spec

#: parent, depth and kind of the root's row (its token comes in as a tensor)
_ROOT_REST = torch.tensor([[-1, 0, LEAD]], dtype=torch.long)


class Captured(NamedTuple):
    """What :func:`draft_and_build` returns (n = kept nodes with the root, fixed by the configuration
    unless fewer slots were drafted: then :func:`finish` prunes again from ``grown``).

    read:        [2 + 4n] long, what the host reads (:func:`rheo.tree.select_kept`)
    tokens, parents, depths, kind, exp_row: [n] long, the kept tree
    mask:        [n, n] bool ancestor mask
    sample_prob: [n] float, q~ of a kept SAMPLE node, 0 elsewhere
    resid_ids, resid_probs: [E, S] of every expansion, or None (Top-K)
    root_row:    [Vd] the root's draft logits
    grown, ranked, finite, exp_row_all: the unpruned tree, for the eager retry
    """

    read: torch.Tensor
    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    kind: torch.Tensor
    exp_row: torch.Tensor
    mask: torch.Tensor
    sample_prob: torch.Tensor
    resid_ids: Optional[torch.Tensor]
    resid_probs: Optional[torch.Tensor]
    root_row: torch.Tensor
    grown: Grown
    ranked: torch.Tensor
    finite: torch.Tensor
    exp_row_all: torch.Tensor


def draft_and_build(candidates: CandidateFn, draft_fn: DraftFn, root: torch.Tensor, cfg: "Spec",
                    rng: RandomSource, draft_to_target: Optional[torch.Tensor] = None,
                    device: torch.device | str = "cpu") -> Captured:
    """root: [1] long, the root token on ``device``. The eager builder's tree (same nodes, scores and
    draws for the same random numbers) up to its host read."""
    head = torch.cat([root.view(1, 1), _ROOT_REST.to(device)], dim=1)  # [1, 4]
    nodes = torch.cat([head, torch.empty(node_capacity(cfg), 4, dtype=torch.long, device=device)])  # [N, 4]
    grown = grow_tree(candidates, draft_fn, nodes, cfg, rng, draft_to_target, device)
    ranked, finite, exp_row_all = rank_nodes(grown, cfg)
    keep, kept, kept_parents, exp_row, read = select_kept(grown.nodes, ranked, exp_row_all, finite, grown.bad)
    resid_ids, resid_probs = residuals(grown)
    return Captured(read, kept[0], kept_parents, kept[2], kept[3], exp_row, ancestor_mask(kept_parents, cfg.depth),
                    grown.sample_p[keep], resid_ids, resid_probs, grown.root_row, grown, ranked, finite, exp_row_all)


def finish(captured: Captured, cfg: "Spec") -> BuiltTree:
    """The host's side of a captured build: one read (NonFiniteLogitsError on a NaN draft row), and
    the eager prune from the graph's ranking when fewer slots than ``tree_size`` were drafted."""
    read = check_read(captured.read.tolist())
    if read[0] < captured.ranked.shape[0]:  # rare: empty slots would be kept; prune again, eagerly
        built = prune(captured.grown, captured.ranked[:read[0]], captured.finite, captured.exp_row_all, cfg)
    else:
        tree = DraftTree(tokens=captured.tokens, parents=captured.parents, depths=captured.depths,
                         ancestor_mask=captured.mask)
        built = built_tree(tree, captured.kind, captured.sample_prob, captured.exp_row, captured.resid_ids,
                           captured.resid_probs, read)
    return dataclasses.replace(built, root_row=captured.root_row)


def root_tensor(root_token: int | torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """[1] long on ``device``."""
    if isinstance(root_token, torch.Tensor):
        return root_token.reshape(1).to(device=device, dtype=torch.long)
    return torch.tensor([int(root_token)], dtype=torch.long, device=device)


def build_captured(candidates: CandidateFn, draft_fn: DraftFn, root_token: int, cfg: "Spec", rng: RandomSource,
                   draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> BuiltTree:
    """A tree builder (the registry's ``TreeBuilder``) through :func:`draft_and_build` and
    :func:`finish`, uncompiled, with any random source (exact enumeration runs it)."""
    captured = draft_and_build(candidates, draft_fn, root_tensor(root_token, device), cfg, rng, draft_to_target,
                               device)
    return finish(captured, cfg)


def predrawn_build(candidates: CandidateFn, cfg: "Spec", draft_to_target: Optional[torch.Tensor],
                   device: torch.device | str) -> Callable[[DraftFn, torch.Tensor, torch.Tensor], Captured]:
    """The function to capture for one configuration: (draft_fn, root [1] long, uniforms [N] float64)
    -> Captured, its draws read from ``uniforms`` in order."""
    def draft_and_build_predrawn(draft_fn: DraftFn, root: torch.Tensor, uniforms: torch.Tensor) -> Captured:
        return draft_and_build(candidates, draft_fn, root, cfg, PredrawnRandom(uniforms), draft_to_target, device)
    return draft_and_build_predrawn


Compiler = Callable[[Callable], Callable]


class CapturedBuilder:
    """A method's builds through :func:`draft_and_build`, one compiled function per configuration.

    ``compiler``: fn -> fn (None: run it as it is, the static engine run eagerly; else e.g.
    ``torch.compile(fullgraph=True, dynamic=False)``). ``clone``: copy the outputs a later call
    would overwrite (CUDA graphs replay into the same buffers)."""

    def __init__(self, method: "Method", compiler: Optional[Compiler] = None, clone: bool = False) -> None:
        if method.build is not None and method.kind != "dynamic":
            raise ValueError(f"a captured build is the dynamic tree's; method {method.name!r} is {method.kind}")
        self.method = method
        self.compiler = compiler
        self.clone = clone
        self.runs: dict[tuple, tuple[int, Callable]] = {}  # (cfg, map, device) -> (uniforms, function)

    def build(self, draft_fn: DraftFn, root_token: int | torch.Tensor, cfg: "Spec", rng: RandomSource,
              draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> BuiltTree:
        """Method.build_tree's signature. A source other than :class:`TorchRandom` (enumeration,
        common random numbers) runs the same function uncompiled, drawing as it goes."""
        root = root_tensor(root_token, device)
        if not isinstance(rng, TorchRandom):
            return finish(draft_and_build(self.method.candidates, draft_fn, root, cfg, rng, draft_to_target,
                                          device), cfg)
        key = (cfg, id(draft_to_target), str(device))
        if key not in self.runs:  # first build: eager, on the cycle's generator, counting its uniforms
            counting = CountingRandom(rng)
            captured = draft_and_build(self.method.candidates, draft_fn, root, cfg, counting, draft_to_target, device)
            fn = predrawn_build(self.method.candidates, cfg, draft_to_target, device)
            self.runs[key] = (counting.used, fn if self.compiler is None else self.compiler(fn))
            return finish(captured, cfg)
        n, fn = self.runs[key]
        uniforms = (rng._uniform(n, torch.device(device)) if n
                    else torch.empty(0, dtype=torch.float64, device=device))  # [n]: one draw, in the build's order
        captured = fn(draft_fn, root, uniforms)
        if self.clone:
            captured = torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                                                    captured)
        return finish(captured, cfg)


#: the attribute of an engine's drafter that keeps its captured builders (method name -> builder)
_BUILDERS = "_rheo_captured_builders"


def engine_builder(drafter: object, method: "Method", engine: str) -> Optional[CapturedBuilder]:
    """The captured builder the decode loop uses for ``method`` under ``engine`` with the engine's
    ``drafter`` (kept on it, so its compiled graphs serve every generation); None where the tree is
    built eagerly: engine "eager", and methods whose tree is not the dynamic one (static trees)."""
    if engine == "eager" or method.kind != "dynamic" or method.build is not build_dynamic_tree:
        return None
    builders = drafter.__dict__.setdefault(_BUILDERS, {})
    if method.name not in builders:
        device = torch.device(getattr(drafter, "device", None) or "cpu")
        compiler = engines.graphs_compiler(device) if engine == "graphs" else None
        builders[method.name] = CapturedBuilder(method, compiler, clone=engine == "graphs" and device.type == "cuda")
    return builders[method.name]


def cycle_builder(method: "Method", drafter: object, session: object, engine: str) -> Callable[..., BuiltTree]:
    """The decode loop's tree builder for one generation: ``method.build_tree`` (its draft calls go
    through the callable it is handed, timed or watched), or under a static engine the captured build
    (the root's draft row comes back as ``BuiltTree.root_row``): over the handed callable under
    ``static``, over ``session.draft`` under ``graphs`` (one compiled function: the handed callable is
    not called, and the draft phase is not timed apart from the build)."""
    builder = engine_builder(drafter, method, engine)
    if builder is None:
        return method.build_tree

    reserve = getattr(session, "reserve", None)  # a static head session sizes its buffers outside the graph

    def build(draft_fn: DraftFn, root_token: int, cfg: "Spec", rng: RandomSource,
              draft_to_target: Optional[torch.Tensor] = None, device: torch.device | str = "cpu") -> BuiltTree:
        if reserve is not None:
            reserve(node_capacity(cfg) + 1, cfg.depth)
        # run eagerly (static), the build calls the handed draft function (timed as the draft phase); compiled,
        # the session's own draft is traced into the graph, where no timer can see it
        fn = draft_fn if builder.compiler is None else session.draft
        return builder.build(fn, root_token, cfg, rng, draft_to_target, device)
    return build
