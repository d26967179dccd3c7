"""The model protocol the decode loop runs on.

Terms used across the project (defined once here):

* **root** – the last committed token of the sequence. Its key/value entries are
  *not* yet in the target's cache: every cycle the target scores the root and the
  drafted tree together, so the root's logits give the distribution of the first
  new token.
* **drafted tree** – node 0 is the root, nodes 1.. are drafted tokens; every node
  stores its parent index (-1 for the root) and its depth (0 for the root).
* **features** – per-position target hidden states a drafter may consume (EAGLE-3
  fuses three layers). ``None`` for drafters that need none (toy models).

A cycle, as driven by :func:`rheo.decode.speculative_generate`::

    t = target.new_session();  feats = t.prefill(prompt[:-1])
    d = drafter.new_session(); d.prefill(prompt, feats)
    repeat:
        tree   = build_tree(d.draft ...)                # drafter expands frontiers
        out    = t.score_tree(tree)                     # one target call
        path, bonus = verify(out.logits, tree, ...)     # path = [0, a1, .., ak]
        t.commit(path)                                  # keep root + accepted in cache
        d.commit(tokens[a1..ak] + [bonus], out.features[path])

Pairing convention for ``features``: ``features[i]`` is the target hidden state
at the position *before* ``tokens[i]`` (EAGLE pairs feature f_t with token
x_{t+1}).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Union, runtime_checkable

import torch


@dataclass(frozen=True)
class TreeView:
    """Drafted nodes so far (all of them, before pruning).

    tokens:  [n] long, target-vocabulary ids, node 0 = root
    parents: [n] long, parent node index, -1 for the root
    depths:  [n] long, 0 for the root
    layer:   the depth of the frontier being drafted, when the builder knows it (a drafter that
             needs it reads it here instead of from ``depths``, which would be a host read)
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    layer: Optional[int] = None


@dataclass(frozen=True)
class DraftTree:
    """The pruned tree the target scores in one call.

    tokens:        [n] long, node 0 = root; parents precede children
    parents:       [n] long, -1 for the root
    depths:        [n] long, position offset from the root (root = 0)
    ancestor_mask: [n, n] bool, [i, j] is True iff j is i or an ancestor of i
    host:          (parents, tokens) as lists when the builder read them already (its one transfer),
                   so that scoring, verifying and committing need no read of their own; else None
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    ancestor_mask: torch.Tensor
    host: Optional[tuple[list[int], list[int]]] = None

    def host_lists(self) -> tuple[list[int], list[int]]:
        """(parents, tokens) as lists: the builder's copy, else one read."""
        if self.host is not None:
            return self.host
        parents, tokens = torch.stack([self.parents, self.tokens.to(self.parents.dtype)]).tolist()
        return parents, tokens

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[0])


class LazyLogits:
    """Target logits [n, V] float32 whose rows are computed when first read.

    A tree verifier reads the rows of the nodes it visits (the accepted path and the
    node after it), a few of the n scored ones; the target's output layer (vocabulary
    x hidden) is then run on those rows only. ``compute(idx [k] long) -> [k, V]`` makes
    missing rows in one batched call; ``prefetch`` rows are made up front in one such
    call. Supports what verifiers use: ``shape``, ``dtype``, ``len``, ``x[i]`` (an int:
    [V]), ``x[idx]`` (a list, slice or long tensor of rows: [k, V]) and
    :meth:`materialize` ([n, V]). Row values do not depend on which rows are read.
    """

    def __init__(self, n: int, vocab: int, compute: Callable[[torch.Tensor], torch.Tensor],
                 device: torch.device, prefetch: Optional[Sequence[int]] = None) -> None:
        self.shape = torch.Size((n, vocab))
        self.dtype = torch.float32
        self.device = torch.device(device)
        self._compute = compute
        self._rows: Dict[int, torch.Tensor] = {}
        self.computed_in_batches: List[int] = []  # rows made per compute call (what was paid for)
        if prefetch:
            self._ensure(list(prefetch))

    def __len__(self) -> int:
        return int(self.shape[0])

    def _ensure(self, rows: List[int]) -> None:
        n = len(self)
        for r in rows:
            if not 0 <= r < n:
                raise IndexError(f"row {r} out of range for {n} scored nodes")
        missing = list(dict.fromkeys(r for r in rows if r not in self._rows))
        if missing:
            out = self._compute(torch.tensor(missing, dtype=torch.long, device=self.device))  # [k, V]
            self.computed_in_batches.append(len(missing))
            for r, row in zip(missing, out):
                self._rows[r] = row

    def __getitem__(self, index):
        if isinstance(index, torch.Tensor) and index.ndim == 0:
            index = int(index)
        if isinstance(index, int) or (hasattr(index, "__index__") and not isinstance(index, torch.Tensor)):
            r = int(index)
            r = r + len(self) if r < 0 else r
            self._ensure([r])
            return self._rows[r]
        if isinstance(index, slice):
            rows = list(range(len(self)))[index]
        elif isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            rows = torch.nonzero(index.flatten()).flatten().tolist()
        else:
            rows = [int(r) for r in (index.flatten().tolist() if isinstance(index, torch.Tensor) else index)]
        rows = [r + len(self) if r < 0 else r for r in rows]
        self._ensure(rows)
        if not rows:
            return torch.empty(0, self.shape[1], dtype=self.dtype, device=self.device)
        return torch.stack([self._rows[r] for r in rows])

    def materialize(self) -> torch.Tensor:
        """All rows [n, V] float32."""
        return self[:]


def path_list(path: "torch.Tensor | Sequence[int]") -> List[int]:
    """A committed path (node indices, root first) as a list: a 1-D integer tensor is read, a list of
    ints is taken as it is (the verifier's own, so committing needs no read from the device)."""
    if isinstance(path, torch.Tensor):
        if path.ndim != 1 or path.dtype.is_floating_point or path.dtype == torch.bool:
            raise ValueError(f"path must be a 1-D tensor of node indices, got shape {tuple(path.shape)} {path.dtype}")
        return [int(i) for i in path.tolist()]
    nodes = list(path)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in nodes):
        raise ValueError(f"path must hold node indices (ints), got {nodes!r}")
    return nodes


def first_child_chain(parents: torch.Tensor | List[int]) -> List[int]:
    """parents: [n] (parents precede children; a tensor or a list). The root and, from each node, its
    lowest-index child: the chain of each layer's first-ranked candidate, the likeliest accepted path."""
    first: Dict[int, int] = {}
    for i, p in enumerate(parents.tolist() if isinstance(parents, torch.Tensor) else parents):
        if p >= 0 and p not in first:
            first[p] = i
    chain = [0]
    while chain[-1] in first:
        chain.append(first[chain[-1]])
    return chain


@dataclass(frozen=True)
class TargetOutput:
    """logits: [n, vocab] float32 (untempered): a tensor, or :class:`LazyLogits` whose rows
    are computed when read; features: [n, F] or None."""

    logits: Union[torch.Tensor, LazyLogits]
    features: Optional[torch.Tensor]


@runtime_checkable
class TargetSession(Protocol):
    def prefill(self, token_ids: Sequence[int]) -> Optional[torch.Tensor]:
        """Cache the context (everything but the root). Returns features [len, F] or None."""

    def score_tree(self, tree: DraftTree) -> TargetOutput:
        """Score root + drafted nodes in one call on top of the cache."""

    def commit(self, path: Union[torch.Tensor, Sequence[int]]) -> None:
        """path: [a+1] node indices (root first), a list of ints (the verifier's: no device read) or a
        1-D long tensor (:func:`path_list` reads either). Keep exactly these in the cache."""

    # optional, for same-state evaluation (rheo.same_state):
    # def discard(self) -> None: drop the scored tree, keep the committed past unchanged


@runtime_checkable
class TargetModel(Protocol):
    vocab_size: int

    def new_session(self) -> TargetSession: ...


@runtime_checkable
class DraftSession(Protocol):
    def prefill(self, prompt_ids: Sequence[int], features: Optional[torch.Tensor]) -> None:
        """prompt_ids: the whole prompt (root last); features: [len-1, F] or None."""

    def commit(self, tokens: torch.Tensor, features: Optional[torch.Tensor]) -> None:
        """tokens: [a+1] accepted tokens then the bonus (new root); features: [a+1, F] or None."""

    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] node indices to expand (same depth). Returns draft logits [f, draft_vocab]."""


@runtime_checkable
class DraftModel(Protocol):
    vocab_size: int  # draft vocabulary size
    draft_to_target: Optional[torch.Tensor]  # [draft_vocab] long target ids, None = identity

    def new_session(self) -> DraftSession: ...
