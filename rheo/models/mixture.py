"""A drafter of chosen quality: the trained head mixed with the target itself.

At every drafted node the mixed drafter proposes from

    q_a = (1 - a) q_head + a p_target(. | node)

on the target's vocabulary, with ``a`` (``draft_mix``) in [0, 1]: ``a = 0`` is the head
alone, ``a = 1`` the target itself (untempered), and values between turn the drafter's
quality up continuously. It is another drafter behind the :class:`~rheo.models.base.DraftModel`
protocol, so every lossless method stays lossless with it; what it is *not* is a trained head
of that quality: its errors are the head's, diluted, not those a stronger head would make.

Cost: the target scores the partial tree level by level. The session keeps its own target
cache of the committed context; drafting a layer runs one forward of the frontier tokens it has
not scored yet (each attends to the committed past, its ancestors scored at earlier layers, and
itself), and the output layer on those rows. A node is known by its path of tokens from the
root, so trees drafted at the same state (same-state evaluation drafts several) share every
node they have in common; a commit drops them all and extends the cache by the old root and the
accepted tokens in one forward. ``python -m eval.measure.dial_cost`` measures what a tree costs.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from transformers import DynamicCache

from rheo.models.base import DraftModel, TreeView

__all__ = ["MixedDrafter", "MixedSession"]


class MixedDrafter:
    """DraftModel: ``(1 - mix) * base + mix * target`` on the target vocabulary (module docstring).

    base:   a DraftModel (its ``draft_to_target`` map places its vocabulary in the target's)
    target: an :class:`rheo.models.hf_target.HFTarget` (Llama causal LM)
    mix:    ``a`` in [0, 1]
    """

    def __init__(self, base: DraftModel, target, mix: float) -> None:
        if isinstance(mix, bool) or not isinstance(mix, (int, float)) or not 0.0 <= float(mix) <= 1.0:
            raise ValueError(f"draft_mix must be a number in [0, 1], got {mix!r}")
        self.base, self.target, self.mix = base, target, float(mix)
        self.vocab_size: int = int(target.vocab_size)
        self.draft_to_target: Optional[torch.Tensor] = None  # proposes target ids directly
        self.device = getattr(base, "device", None) or target.device

    def new_session(self) -> "MixedSession":
        return MixedSession(self)


class MixedSession:
    """One sequence: the base drafter's session plus a target cache of the committed context."""

    def __init__(self, drafter: MixedDrafter) -> None:
        self.d = drafter
        self.base = drafter.base.new_session()
        model = drafter.target.hf_model
        self.cache = DynamicCache(config=model.config)
        self.past_len = 0
        self.root: Optional[int] = None  # the last token given to prefill/commit (not in the cache)
        self.slot_of: dict[tuple[int, ...], int] = {}  # a scored node's path (root first) -> its cache slot
        self.rows: dict[tuple[int, ...], torch.Tensor] = {}  # ... -> its target logits [V] float32

    # ------------------------------------------------------------------ protocol
    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int], features: Optional[torch.Tensor]) -> None:
        """prompt_ids: [len] (root last): the base session's prefill, and the target's cache of all
        but the root."""
        self.base.prefill(prompt_ids, features)
        ids = [int(t) for t in prompt_ids]
        self._crop(0)
        if self.d.mix > 0 and len(ids) > 1:
            self._extend(ids[:-1])
        self.root = ids[-1]

    @torch.no_grad()
    def commit(self, tokens: torch.Tensor, features: Optional[torch.Tensor]) -> None:
        """tokens: [a+1] accepted tokens then the bonus (the new root)."""
        self.base.commit(tokens, features)
        new = [int(t) for t in tokens.tolist()]
        self._crop(self.past_len)
        if self.d.mix > 0:
            self._extend([self.root] + new[:-1])
        self.root = new[-1]

    @torch.no_grad()
    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] node indices at one depth. Returns log q_a [f, V] float32 (-inf: no mass)."""
        base_logits = self.base.draft(tree, frontier)  # [f, Vd]
        q_head = torch.softmax(base_logits.float(), dim=-1)  # [f, Vd]
        f, vocab = q_head.shape[0], self.d.vocab_size
        d2t = self.d.base.draft_to_target
        ids = (torch.arange(q_head.shape[1], device=q_head.device) if d2t is None else d2t.to(q_head.device))
        q = torch.zeros(f, vocab, dtype=torch.float32, device=q_head.device).index_add_(1, ids, q_head)  # [f, V]
        if self.d.mix > 0:
            p = torch.softmax(self._score_frontier(tree, frontier), dim=-1).to(q.device)  # [f, V]
            q = (1.0 - self.d.mix) * q + self.d.mix * p
        return q.log()

    # ------------------------------------------------------------------ the target's side
    def _score_frontier(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """Target logits [f, V] float32 of the frontier nodes, each after its own path. Nodes scored
        before at this state (same path) are read back; the others are scored in one forward and
        their keys and values stay in the cache for deeper layers and later trees."""
        paths = _paths(tree)
        nodes = [int(i) for i in frontier.tolist()]
        new = list(dict.fromkeys(paths[n] for n in nodes if paths[n] not in self.rows))
        if new:
            self._score(new)
        return torch.stack([self.rows[paths[n]] for n in nodes])

    def _score(self, paths: list[tuple[int, ...]]) -> None:
        """One forward of the last token of each path (their ancestors are scored: paths are scored
        layer by layer, so a path's prefixes always are)."""
        target = self.d.target
        model, device = target.hf_model, target.device
        scored, f = len(self.slot_of), len(paths)
        visible = torch.zeros(f, self.past_len + scored + f, dtype=torch.bool)  # [f, past + s + f]
        visible[:, : self.past_len] = True
        for row, path in enumerate(paths):
            visible[row, self.past_len + scored + row] = True
            for cut in range(1, len(path)):
                visible[row, self.past_len + self.slot_of[path[:cut]]] = True
        mask = torch.zeros(visible.shape, dtype=target.dtype)
        mask.masked_fill_(~visible, torch.finfo(target.dtype).min)
        tokens = torch.tensor([[p[-1] for p in paths]], dtype=torch.long, device=device)  # [1, f]
        positions = torch.tensor([[self.past_len + len(p) - 1 for p in paths]], device=device)  # [1, f]
        hidden = model.get_decoder()(input_ids=tokens, attention_mask=mask[None, None].to(device),
                                     position_ids=positions, use_cache=True,
                                     **{target.cache_kwarg: self.cache}).last_hidden_state[0]  # [f, H]
        logits = model.get_output_embeddings()(hidden).float()  # [f, V]
        for row, path in enumerate(paths):
            self.slot_of[path] = scored + row
            self.rows[path] = logits[row]

    def _extend(self, ids: list[int]) -> None:
        """Append ``ids`` to the committed context in the target's cache (one causal forward)."""
        target = self.d.target
        if not ids:
            return
        x = torch.tensor([ids], dtype=torch.long, device=target.device)  # [1, t]
        positions = torch.arange(self.past_len, self.past_len + len(ids), device=target.device)[None]
        target.hf_model.get_decoder()(input_ids=x, position_ids=positions, use_cache=True,
                                      **{target.cache_kwarg: self.cache})
        self.past_len += len(ids)

    def _crop(self, length: int) -> None:
        """Keep the first ``length`` cached positions (the committed past), drop the tree part."""
        self.past_len = length
        self.slot_of, self.rows = {}, {}
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]


def _paths(tree: TreeView) -> list[tuple[int, ...]]:
    """Every node's tokens from the root to itself (root first): [n] tuples."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    out: list[tuple[int, ...]] = []
    for node, (tok, up) in enumerate(zip(tokens, parents)):  # parents precede children
        out.append((out[up] if up >= 0 else ()) + (int(tok),))
    return out


def mix_label(mix: Optional[float]) -> str:
    """'head', 'target' or 'a=0.5': a dial value as tables print it."""
    if mix is None or (isinstance(mix, float) and math.isnan(mix)) or mix == 0:
        return "head"
    return "target" if mix == 1 else f"a={mix:g}"
