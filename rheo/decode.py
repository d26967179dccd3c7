"""The speculative decoding loop (one screen): draft a tree, score it, verify, commit.

Works over the model protocol of :mod:`rheo.models.base`, so the same loop runs toy
probability tables and KV-cached ``transformers`` models. Every emitted token comes
out of a verification cycle: ``accept_lengths[i]`` counts the tokens emitted by the
i-th target call, the bonus included, so ``tau = len(tokens) / target_calls``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence, Union

import torch

from rheo.adaptive import RootRow, cycle_policy
from rheo.candidates import SAMPLE
from rheo.captured_build import cycle_builder
from rheo.config import SpecConfig
from rheo.engine import engine_pair
from rheo.methods import get_method
from rheo.models.base import DraftModel, TargetModel
from rheo.random import RandomSource, TorchRandom
from rheo.timing import NULL_TIMER

__all__ = ["SpecConfig", "GenerationOutput", "speculative_generate", "generate_with_source"]

EosSpec = Union[None, int, Iterable[int]]


@dataclass(frozen=True)
class CycleState:
    """Where a cycle starts: ``index`` cycles done, ``root`` the last committed token, the
    target session (nothing scored), the drafter's ``draft`` callable on its committed state,
    its id map [Vd] (or None) and the device trees live on."""

    index: int
    root: int
    target_session: object
    draft_fn: Callable
    draft_to_target: Optional[torch.Tensor]
    device: torch.device


@dataclass
class GenerationOutput:
    """tokens: the new tokens; the per-cycle lists have one entry per target call."""

    tokens: list[int]
    accept_lengths: list[int]  # tokens emitted per target call, bonus included
    drafted_nodes: list[int] = field(default_factory=list)  # before pruning, root excluded
    kept_nodes: list[int] = field(default_factory=list)  # after pruning, root excluded
    sample_kept: list[int] = field(default_factory=list)  # sampled nodes kept in the tree
    sample_accepted: list[int] = field(default_factory=list)  # sampled nodes on the accepted path
    #: with record_expected: the expected tokens each cycle emits over the verifier's randomness
    #: (its tree and target logits given; truncation by max_new_tokens / EOS ignored)
    expected_accept_lengths: list[float] = field(default_factory=list)
    #: adapt set (rheo_adaptive, rheo_level): the m each cycle was drafted with (0: Rheo m=0); empty otherwise
    cycle_m: list[int] = field(default_factory=list)
    #: adapt set: at each observed root, the acceptance of a child sampled from the draft, sum_x
    #: min(p_T(x), q_T(x)) (one minus total variation; its mean reads the drafter's quality); empty otherwise
    root_accept: list[float] = field(default_factory=list)
    #: tokens the last cycle's verification produced before max_new_tokens / EOS cut them (the
    #: realized count its expectation is about; equal to accept_lengths[-1] when nothing was cut)
    last_cycle_verified: int = 0

    @property
    def target_calls(self) -> int:
        return len(self.accept_lengths)

    @property
    def tau(self) -> float:
        return len(self.tokens) / max(1, self.target_calls)


def eos_set(eos_token_id: EosSpec) -> frozenset[int]:
    """The stop ids: None, one integer id, or integer ids (numpy / 0-d and 1-D integer tensors too);
    text, bools and floats are refused with TypeError (``"01"`` would be read as the ids 0 and 1)."""
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, torch.Tensor) and not (eos_token_id.dtype.is_floating_point
                                                       or eos_token_id.dtype == torch.bool):
        eos_token_id = eos_token_id.tolist()
    if _is_token_id(eos_token_id):
        return frozenset([int(eos_token_id)])
    items = None if isinstance(eos_token_id, (str, bytes, torch.Tensor)) else _as_list(eos_token_id)
    if items is None or not all(_is_token_id(t) for t in items):
        raise TypeError(f"eos_token_id must be None, an integer token id or integer ids, got "
                        f"{type(eos_token_id).__name__} {eos_token_id!r}")
    return frozenset(int(t) for t in items)


def _is_token_id(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _as_list(x) -> Optional[list]:
    try:
        return list(x)
    except TypeError:
        return None


def check_prompt(prompt: Sequence[int], max_new_tokens: int, vocab_size: int,
                 context_length: Optional[int] = None) -> list[int]:
    """The prompt as a list of token ids, after checking it and ``max_new_tokens``.

    prompt: token ids, as a sequence of integers or a 1-D integer tensor / array. Text,
    floats and bools are refused with TypeError (they would otherwise be read as ids).
    ``context_length``: the target's positions; prompt + new tokens must fit in it.
    """
    ids = _token_ids(prompt)
    if not ids:
        raise ValueError("prompt must hold at least one token id")
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise ValueError(f"prompt token ids must lie in [0, {vocab_size}), got {int(min(ids))}..{int(max(ids))}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise TypeError(f"max_new_tokens must be an integer >= 0, got {type(max_new_tokens).__name__} "
                        f"{max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if context_length is not None and context_length < 1:
        raise ValueError(f"the target's context length is {context_length}: its config's max_position_embeddings "
                         f"must be >= 1 (the context check would be off)")
    if context_length and len(ids) + max_new_tokens > context_length:
        fix = (f"max_new_tokens <= {context_length - len(ids)}" if len(ids) < context_length
               else "a shorter prompt (it alone fills the context)")
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the target's "
                         f"context length ({context_length} positions): choose {fix}")
    return ids


def _token_ids(prompt) -> list[int]:
    if isinstance(prompt, (set, frozenset, Mapping)):
        raise TypeError(f"prompt must be an ordered sequence of token ids, got a {type(prompt).__name__} (no "
                        f"defined order): pass a list or a 1-D tensor")
    if isinstance(prompt, (str, bytes)):
        raise TypeError(f"prompt must be token ids (a sequence of ints), got {type(prompt).__name__} "
                        f"{prompt[:40]!r}: encode text with the tokenizer first")
    if isinstance(prompt, torch.Tensor):
        if prompt.dim() != 1 or prompt.dtype.is_floating_point or prompt.dtype.is_complex or prompt.dtype == torch.bool:
            raise TypeError(f"prompt tensor must be 1-D with an integer dtype, got shape {tuple(prompt.shape)} "
                            f"dtype {prompt.dtype}")
        return [int(t) for t in prompt.tolist()]
    try:
        items = list(prompt)
    except TypeError:
        raise TypeError(f"prompt must be a sequence of token ids, got {type(prompt).__name__}") from None
    bad = next((t for t in items if isinstance(t, bool) or not isinstance(t, numbers.Integral)), None)
    if bad is not None:
        raise TypeError(f"prompt must hold integer token ids, got {type(bad).__name__} {bad!r}")
    return [int(t) for t in items]


def speculative_generate(target: TargetModel, drafter: DraftModel, prompt: Sequence[int],
                         max_new_tokens: int, config: SpecConfig = SpecConfig(),
                         generator: Optional[torch.Generator] = None,
                         eos_token_id: EosSpec = None, timer=None, record_expected: bool = False,
                         on_tokens: Optional[Callable[[list[int]], None]] = None,
                         stop_when: Optional[Callable[[list[int]], bool]] = None) -> GenerationOutput:
    """Generate up to ``max_new_tokens`` tokens after ``prompt`` (token ids).

    The output has exactly the distribution of sampling ``target`` at
    ``config.temperature`` (greedy decoding of ``target`` at 0) for every lossless
    setting. ``generator`` drives every random choice (same seed, same tokens); without
    one, torch's default generator does (``torch.manual_seed`` seeds it, as in ``transformers``);
    with ``eos_token_id`` generation stops after the first EOS, which is returned.
    ``timer``: a :class:`rheo.timing.PhaseTimer` recording time per phase (None = off).
    ``record_expected``: fill ``expected_accept_lengths`` (:mod:`rheo.expected`); it draws no
    random numbers, so the tokens are the same, and costs nothing when off.
    ``on_tokens``: called after every cycle with the tokens it emitted (streaming).
    ``stop_when(new_tokens) -> bool``: asked after each emitted token with all new tokens so far;
    True ends generation after that token (a stop rule that is a function of the sequence, like
    EOS, so the output is the target's sequence cut where the rule first holds).
    ``config.engine``: the pair runs as that engine's twin (rheo.engine; "eager": as it is).
    """
    return generate_with_source(target, drafter, prompt, max_new_tokens, config, TorchRandom(generator),
                                eos_token_id, timer, record_expected, on_tokens=on_tokens, stop_when=stop_when)


@torch.no_grad()
def generate_with_source(target: TargetModel, drafter: DraftModel, prompt: Sequence[int],
                         max_new_tokens: int, config: SpecConfig, rng: RandomSource,
                         eos_token_id: EosSpec = None, timer=None, record_expected: bool = False,
                         on_state: Optional[Callable[[CycleState], None]] = None,
                         on_tokens: Optional[Callable[[list[int]], None]] = None,
                         stop_when: Optional[Callable[[list[int]], bool]] = None) -> GenerationOutput:
    """speculative_generate with an explicit :class:`RandomSource` (tests enumerate it).

    ``on_state``: called at every cycle start, before the tree is drafted, with the
    :class:`CycleState` (same-state evaluation drafts other trees there; it must leave
    both sessions as it found them)."""
    if not isinstance(config, SpecConfig):
        raise TypeError(f"config must be a rheo.config.SpecConfig, got {type(config).__name__}")
    target, drafter = engine_pair(target, drafter, config.engine)  # the pair itself for engine="eager"
    ids = check_prompt(prompt, max_new_tokens, target.vocab_size, getattr(target, "context_length", None))
    if config.max_children > drafter.vocab_size:
        raise ValueError(f"{config.max_children} children per node (k, or max(branching) of a static tree) "
                         f"exceed the draft vocabulary size {drafter.vocab_size}")
    method = get_method(config.method)  # looked up once: its plug-ins drive every cycle
    if method.is_reference:
        raise ValueError(f"method {config.method!r} is a reference method without a draft tree: run it "
                         f"through its registered generate (rheo.methods.get_method({config.method!r}).generate)")
    if record_expected and method.path_probs is None:
        raise ValueError(f"record_expected needs the method's path_probs; {config.method!r} registers none")
    if drafter.draft_to_target is None and drafter.vocab_size > target.vocab_size:
        raise ValueError(f"the drafter's vocabulary ({drafter.vocab_size} tokens) is larger than the target's "
                         f"({target.vocab_size}) and it has no draft_to_target map: give the drafter a map "
                         f"[draft_vocab] -> target ids, or pair models that share a vocabulary")
    stop = eos_set(eos_token_id)
    policy = cycle_policy(config)  # adapt set: the cycle's setting from earlier roots (rheo.adaptive)
    out = GenerationOutput(tokens=[], accept_lengths=[], cycle_m=[] if policy is None else policy.chosen,
                           root_accept=[] if policy is None else policy.accepts)
    if max_new_tokens == 0:
        return out
    tm = timer or NULL_TIMER
    t_sess, d_sess = target.new_session(), drafter.new_session()
    with tm.phase("prefill"):
        d_sess.prefill(ids, t_sess.prefill(ids[:-1]))
    root = ids[-1]
    d2t, draft_fn = drafter.draft_to_target, tm.wrap("draft", d_sess.draft)
    build = cycle_builder(method, drafter, d_sess, config.engine)  # method.build_tree, or the captured build
    counts: list[torch.Tensor] = []  # per cycle [2]: sampled nodes kept, and accepted
    while True:
        if on_state is not None:
            on_state(CycleState(len(out.accept_lengths), root, t_sess, draft_fn, d2t, _device_of(drafter)))
        cfg = config if policy is None else policy.config()
        cycle_draft = draft_fn if policy is None else RootRow(draft_fn)
        with tm.phase("tree"):
            built = build(cycle_draft, root, cfg, rng, d2t, device=_device_of(drafter))
        with tm.phase("score"):
            scored = t_sess.score_tree(built.tree)
        if policy is not None:
            policy.observe(cycle_draft.row if built.root_row is None else built.root_row, scored.logits[0], d2t)
        if record_expected:  # before verifying: the rows of the expanded nodes in one batch
            out.expected_accept_lengths.append(method.expected_emitted(built, scored.logits, cfg))
        with tm.phase("verify"):
            result = method.verify_tree(built, scored.logits, cfg, rng)
        room = max_new_tokens - len(out.tokens)
        emitted = result.tokens[:room]
        hit = next((i for i, t in enumerate(emitted) if t in stop
                    or (stop_when is not None and stop_when(out.tokens + emitted[:i + 1]))), None)
        if hit is not None:
            emitted = emitted[: hit + 1]
        out.tokens.extend(emitted)
        out.accept_lengths.append(len(emitted))
        if on_tokens is not None:
            on_tokens(list(emitted))
        out.last_cycle_verified = len(result.tokens)
        out.drafted_nodes.append(built.drafted)
        out.kept_nodes.append(built.tree.num_nodes - 1)
        counts.append(torch.stack([(built.kind == SAMPLE).sum(), (built.kind[result.path] == SAMPLE).sum()]))
        if hit is not None or len(out.tokens) >= max_new_tokens:
            out.sample_kept, out.sample_accepted = (list(c) for c in zip(*torch.stack(counts).tolist()))
            return out  # the sample counts of every cycle read in one transfer
        with tm.phase("commit"):
            t_sess.commit(result.path)  # a list: the session needs no read of its own
            feats = None if scored.features is None else scored.features[result.path]
            d_sess.commit(torch.tensor(result.tokens, dtype=torch.long, device=built.tree.tokens.device), feats)
        root = result.tokens[-1]


def _device_of(drafter: DraftModel) -> torch.device:
    """Where the tree lives: the drafter's ``device`` attribute, else its id map's, else CPU."""
    device = getattr(drafter, "device", None)
    if device is None and drafter.draft_to_target is not None:
        device = drafter.draft_to_target.device
    return torch.device(device if device is not None else "cpu")
