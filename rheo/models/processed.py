"""A target whose logits pass through row-wise logits processors, node by node of the tree.

A logits processor here is any callable ``(input_ids [1, L] long, scores [1, V]) -> [1, V]``
whose output row depends on that row's own sequence only (``transformers``' repetition
penalty, n-gram ban, suppressed tokens, top-k, top-p, min-p, ...). Sampling a sequence
from such processed logits is a well-defined autoregressive distribution; the decoder stays
lossless with respect to it as long as every tree node's logits are processed with that
node's own sequence: the committed context, the root and the drafted path down to the node.
:class:`ProcessedTarget` does exactly that, so history-dependent processors (a repetition
penalty sees a different past on every branch) are as exact as static masks.

``pre`` runs on the raw logits; ``post`` (the warpers ``transformers`` applies after its
temperature warper) runs on ``pre``'s output divided by ``temperature`` and is multiplied
back, so the verifier's own division by the temperature gives ``post``'s scores exactly.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from rheo.models.base import DraftTree, LazyLogits, TargetModel, TargetOutput, path_list

__all__ = ["ProcessedTarget", "Processor"]

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids [1, L], scores [1, V]) -> [1, V]


class ProcessedTarget:
    """TargetModel: ``target`` with ``pre`` (then, at ``temperature`` > 0, ``post``) applied to
    every scored node's logits row, each with its own sequence ``lead + context + path``.

    ``lead``: tokens the processors see before the prompt that the target does not (the left
    padding that ``transformers`` keeps in ``input_ids``). Other attributes are the target's."""

    def __init__(self, target: TargetModel, pre: Processor, post: Optional[Processor] = None,
                 temperature: float = 0.0, lead: Sequence[int] = ()) -> None:
        if post is not None and temperature <= 0:
            raise ValueError(f"ProcessedTarget: post-temperature processors need a temperature > 0, got {temperature}")
        self.target, self.pre, self.post = target, pre, post
        self.temperature, self.lead = float(temperature), [int(t) for t in lead]

    def __getattr__(self, name: str):
        return getattr(self.target, name)

    def new_session(self) -> "ProcessedSession":
        return ProcessedSession(self, self.target.new_session())

    def process(self, ids: list[int], row: torch.Tensor) -> torch.Tensor:
        """row: [V] logits after the sequence ``ids`` -> [V] processed logits (same dtype)."""
        input_ids = torch.tensor([ids], dtype=torch.long, device=row.device)  # [1, L]
        out = self.pre(input_ids, row[None].clone())  # [1, V]
        if self.post is not None:
            out = self.post(input_ids, out / self.temperature) * self.temperature
        return out[0].to(row.dtype)


class ProcessedSession:
    """The target's session; ``context`` mirrors its cache (committed tokens, root excluded)."""

    def __init__(self, owner: ProcessedTarget, session) -> None:
        self.owner, self.session = owner, session
        self.context: list[int] = []
        self._scored: Optional[DraftTree] = None

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def prefill(self, token_ids: Sequence[int]):
        self.context = [int(t) for t in token_ids]
        return self.session.prefill(token_ids)

    def score_tree(self, tree: DraftTree) -> TargetOutput:
        out = self.session.score_tree(tree)
        raw, tokens, parents = out.logits, tree.tokens.tolist(), tree.parents.tolist()
        head = self.owner.lead + self.context

        def compute(rows: torch.Tensor) -> torch.Tensor:  # rows [k] -> [k, V]
            picked = raw[rows]  # [k, V]
            return torch.stack([self.owner.process(head + _path(tokens, parents, r), picked[i])
                                for i, r in enumerate(rows.tolist())])

        self._scored = tree
        logits = LazyLogits(tree.num_nodes, int(raw.shape[1]), compute, raw.device)
        logits.dtype = raw.dtype
        return TargetOutput(logits=logits, features=out.features)

    def commit(self, path) -> None:
        """path: [a+1] node indices, root first (a list or a 1-D tensor): their tokens join the context."""
        if self._scored is not None:
            tokens = self._scored.host_lists()[1]
            self.context += [tokens[i] for i in path_list(path)]
        self._scored = None
        self.session.commit(path)

    def discard(self) -> None:
        self._scored = None
        self.session.discard()


def _path(tokens: list[int], parents: list[int], node: int) -> list[int]:
    """Token path root..node of the tree given by ``tokens`` [n] and ``parents`` [n]."""
    path = []
    while node >= 0:
        path.append(tokens[node])
        node = parents[node]
    return path[::-1]
