"""Same-state paired evaluation: every compared method drafts a tree at each state the driver visits.

A *driver* decodes as usual (:func:`rheo.decode.generate_with_source`). At each of its
cycle starts - a *state*: the same prefix, the same committed target cache and drafter
state - every compared method builds its own tree, the target scores it, and the exact
expected number of tokens its verifier would emit (:mod:`rheo.expected`) is recorded
with the mechanism columns of :mod:`rheo.mechanism`. The compared trees are scored in one
target call, as their union (:mod:`rheo.tree_union`), and then discarded
(``TargetSession.discard``); only the driver's tree is verified and
committed, so the driver's output is token for token what it is without the compared
methods (same generator).

Randomness: the driver draws from its own generator. The compared trees at state ``s`` of key
``key`` share common random numbers coupled node by node (:class:`rheo.random.PathRandom`,
keyed by :func:`stream_key`): the ``j``-th draw at the node reached by a token path uses the same
random numbers in every compared tree. Each tree is distributed exactly as with a generator of its own,
two methods that expand the same node draw alike there, and paired differences lose the noise of
independent draws (at ``T = 1`` the tempered proxy builds the paper's tree, draw for draw). The
random numbers depend on the key, the state and the path only: not on the driver's stream nor on which
other methods are compared, so a resumed run recomputes identical rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from rheo.adaptive import RootRow, cycle_policy
from rheo.config import SpecConfig
from rheo.decode import CycleState, EosSpec, GenerationOutput, generate_with_source
from rheo.mechanism import DraftRecorder, calibration_columns, root_columns, tree_columns
from rheo.methods import get_method, reads
from rheo.models.base import DraftModel, TargetModel
from rheo.random import PathRandom, TorchRandom, check_generator
from rheo.tree_union import tree_rows, union_tree


@dataclass(frozen=True)
class ComparedTree:
    """One compared method's tree at one state: ``method`` indexes the compared configs, ``draw`` the
    independent draws of the trees at the state (0 unless ``draws`` > 1)."""

    state: int
    method: int
    columns: dict  # rheo.mechanism columns (expected_emitted, depth_accept, ...)
    draw: int = 0


@dataclass
class SameStateOutput:
    """The driver's own output (its ``expected_accept_lengths`` filled) and the compared trees."""

    output: GenerationOutput
    trees: list[ComparedTree] = field(default_factory=list)


def stream_key(key: str, state: int) -> str:
    """The name of the common random numbers of the compared trees at ``state`` of ``key``."""
    return f"{key}/{state}"


def draw_key(key: str, draw: int) -> str:
    """The key of the ``draw``-th independent draw of the compared trees: draw 0 is ``key`` itself."""
    return key if draw == 0 else f"{key}#draw{draw}"


def layers(config: SpecConfig) -> int:
    """Drafted layers of a method's trees: len(branching) for a method with a static shape, else depth."""
    return len(config.branching) if reads(config.method, "branching") else config.depth


@torch.no_grad()
def same_state_generate(target: TargetModel, drafter: DraftModel, prompt: Sequence[int], max_new_tokens: int,
                        driver: SpecConfig, compared: Sequence[SpecConfig],
                        generator: Optional[torch.Generator] = None, key: str = "0",
                        eos_token_id: EosSpec = None, calibration: bool = True,
                        ot_bound: bool = True, draws: int = 1) -> SameStateOutput:
    """Decode with ``driver``; at each state, score every tree of ``compared`` (module docstring).

    ``key`` names the generation (e.g. suite/item/turn/seed) for the compared streams;
    ``calibration``: also fill the calibration columns (reads the target rows of every
    expanded node, which the expectation reads anyway); ``ot_bound``: the root's closed-form
    acceptance and optimal-transport bound (``root_acceptance``, ``root_ot_bound``; needs scipy).
    ``draws``: score ``draws`` independent draws of every compared tree at each state (draw ``d``
    uses the streams of key :func:`draw_key` ``(key, d)``; draw 0 is the single draw), all of them
    in the one target call; for an average over the drafts at the driver's own states.
    """
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    bad = next((c for c in compared if not isinstance(c, SpecConfig)), None)
    if bad is not None or not isinstance(driver, SpecConfig):
        raise TypeError(f"driver and every compared entry must be a rheo.config.SpecConfig, got "
                        f"{type(driver if bad is None else bad).__name__}: build them with SpecConfig(...)")
    check_generator(generator)
    methods = [get_method(c.method) for c in compared]
    for cfg, method in zip(compared, methods):
        if method.path_probs is None:
            raise ValueError(f"compared method {cfg.method!r} registers no path_probs (no expected acceptance)")
        if cfg.max_children > drafter.vocab_size:
            raise ValueError(f"compared method {cfg.method!r}: {cfg.max_children} children per node exceed the "
                             f"draft vocabulary size {drafter.vocab_size}")
    result = SameStateOutput(output=GenerationOutput(tokens=[], accept_lengths=[]))
    # adapt entries ("root", "level"): a policy each, fed by the driver's states, which are this request's cycle
    # roots (rheo.adaptive); the other entries use their own configuration at every state
    policies = [cycle_policy(c) for c in compared]

    def on_state(state: CycleState) -> None:
        session = state.target_session
        if not hasattr(session, "discard"):
            raise ValueError(f"{type(session).__name__} has no discard(): same-state evaluation needs a target "
                             "session that can drop a scored tree")
        chosen = [cfg if policy is None else policy.config() for cfg, policy in zip(compared, policies)]
        built_trees, drawn = [], []  # drawn[j] = (draw, index into compared) of built_trees[j]
        for draw in range(draws):
            shared = {}
            for i, (cfg, method, policy) in enumerate(zip(chosen, methods, policies)):
                # configs that differ only in the verifier draw the same tree (same random numbers): build it once
                tree_key = dataclasses.replace(cfg, verifier="rrs") if reads(cfg.method, "verifier") else None
                if tree_key is None or tree_key not in shared:
                    rng = PathRandom(stream_key(draw_key(key, draw), state.index))  # common random numbers
                    recorder = DraftRecorder(state.draft_fn if policy is None else RootRow(state.draft_fn),
                                             on_frontier=rng.at)
                    built = (method.build_tree(recorder, state.root, cfg, rng, state.draft_to_target, state.device),
                             recorder)
                    if tree_key is not None:
                        shared[tree_key] = built
                built_trees.append(built if tree_key is None else shared[tree_key])
                drawn.append((draw, i))
        # One target call for all of them: the union of the trees (rheo.tree_union).
        union, maps = union_tree([built.tree for built, _ in built_trees])
        union_logits = session.score_tree(union).logits
        try:
            for j, ((draw, i), (built, recorder)) in enumerate(zip(drawn, built_trees)):
                cfg, method = chosen[i], methods[i]
                logits = tree_rows(union_logits, maps[j])
                if policies[i] is not None and draw == 0:
                    policies[i].observe(recorder.draft_fn.row, logits[0], state.draft_to_target)
                reach = method.node_path_probs(built, logits, cfg)
                columns = tree_columns(built, reach, layers(cfg))
                if calibration:
                    columns.update(calibration_columns(built, logits, recorder, cfg, state.draft_to_target))
                if ot_bound:
                    columns.update(root_columns(method, cfg, recorder, state.root, logits, state.draft_to_target))
                result.trees.append(ComparedTree(state=state.index, method=i, columns=columns, draw=draw))
        finally:
            session.discard()

    result.output = generate_with_source(target, drafter, prompt, max_new_tokens, driver, TorchRandom(generator),
                                         eos_token_id, record_expected=True, on_state=on_state)
    return result
