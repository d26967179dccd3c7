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
from typing import Optional, Protocol, Sequence, runtime_checkable

import torch


@dataclass(frozen=True)
class TreeView:
    """Drafted nodes so far (all of them, before pruning).

    tokens:  [n] long, target-vocabulary ids, node 0 = root
    parents: [n] long, parent node index, -1 for the root
    depths:  [n] long, 0 for the root
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor


@dataclass(frozen=True)
class DraftTree:
    """The pruned tree the target scores in one call.

    tokens:        [n] long, node 0 = root; parents precede children
    parents:       [n] long, -1 for the root
    depths:        [n] long, position offset from the root (root = 0)
    ancestor_mask: [n, n] bool, [i, j] is True iff j is i or an ancestor of i
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    ancestor_mask: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class TargetOutput:
    """logits: [n, vocab] float (untempered); features: [n, F] or None."""

    logits: torch.Tensor
    features: Optional[torch.Tensor]


@runtime_checkable
class TargetSession(Protocol):
    def prefill(self, token_ids: Sequence[int]) -> Optional[torch.Tensor]:
        """Cache the context (everything but the root). Returns features [len, F] or None."""

    def score_tree(self, tree: DraftTree) -> TargetOutput:
        """Score root + drafted nodes in one call on top of the cache."""

    def commit(self, path: torch.Tensor) -> None:
        """path: [a+1] long node indices (root first). Keep exactly these in the cache."""


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
