"""Toy language models over explicit probability tables.

``PrefixLM(logits_fn, vocab_size)`` wraps a function of the whole token prefix; it
serves as a target (scores every tree node from its full prefix) and as a drafter
(identity vocabulary map, no features). Logits are memoised per prefix.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from rheo.models.base import DraftTree, TargetOutput, TreeView, path_list

LogitsFn = Callable[[tuple[int, ...]], torch.Tensor]


class PrefixLM:
    """logits_fn(prefix: tuple[int, ...]) -> [vocab_size] float logits (-inf allowed)."""

    draft_to_target: Optional[torch.Tensor] = None
    device = torch.device("cpu")

    def __init__(self, logits_fn: LogitsFn, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.logits_fn = logits_fn
        self.vocab_size = vocab_size
        self._memo: dict[tuple[int, ...], torch.Tensor] = {}

    def logits(self, prefix: Sequence[int]) -> torch.Tensor:
        """[vocab] logits after ``prefix``."""
        key = tuple(int(t) for t in prefix)
        if key not in self._memo:
            out = torch.as_tensor(self.logits_fn(key))
            if out.shape != (self.vocab_size,):
                raise ValueError(f"logits_fn returned shape {tuple(out.shape)}, expected ({self.vocab_size},)")
            self._memo[key] = out
        return self._memo[key]

    def logits_batch(self, prefixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """[n, vocab] logits for n prefixes."""
        return torch.stack([self.logits(p) for p in prefixes])

    def new_session(self) -> "PrefixSession":
        return PrefixSession(self)


class PrefixSession:
    """One session plays one role (the loop opens one per role); both keep ``seq``.

    target role: ``seq`` = committed tokens *without* the root; ``commit(path)`` appends
    the tokens of the scored tree's nodes on ``path`` (root first).
    drafter role: ``seq`` = committed tokens *with* the root; ``commit(tokens, features)``
    appends the accepted tokens and the bonus.
    """

    def __init__(self, model: PrefixLM) -> None:
        self.model = model
        self.seq: list[int] = []
        self._scored: Optional[list[int]] = None  # tokens of the last scored tree (target role)

    def prefill(self, token_ids: Sequence[int], features: Optional[torch.Tensor] = None) -> None:
        self.seq = [int(t) for t in token_ids]  # no features: returns None

    def score_tree(self, tree: DraftTree) -> TargetOutput:
        self._scored = tree.tokens.tolist()
        paths = _node_paths(self._scored, tree.parents.tolist())
        return TargetOutput(logits=self.model.logits_batch([self.seq + p for p in paths]), features=None)

    def commit(self, tokens_or_path: torch.Tensor, features: Optional[torch.Tensor] = None) -> None:
        if self._scored is not None:  # target role: a path of node indices
            self.seq += [self._scored[i] for i in path_list(tokens_or_path)]
        else:  # drafter role: accepted tokens then the bonus
            self.seq += tokens_or_path.tolist()

    def discard(self) -> None:
        """Target role: forget a scored tree without committing it (nothing is cached)."""

    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        paths = _node_paths(tree.tokens.tolist(), tree.parents.tolist(), frontier.tolist())
        return self.model.logits_batch([self.seq[:-1] + p for p in paths])


def _node_paths(tokens: list[int], parents: list[int], nodes: Optional[list[int]] = None) -> list[list[int]]:
    """Token path root..node for each node (all nodes by default)."""
    out = []
    for node in range(len(tokens)) if nodes is None else nodes:
        path = []
        while node >= 0:
            path.append(tokens[node])
            node = parents[node]
        out.append(path[::-1])
    return out
