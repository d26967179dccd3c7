"""Adapter: a Hugging Face ``LlamaForCausalLM`` as a :class:`~rheo.models.base.TargetModel`.

The model's own modeling code runs unchanged; everything the draft tree needs is
isolated here:

* **tree attention** – a custom 4D additive mask ``[1, 1, n, past + n]`` (the whole
  cached past is visible, the tree part is ``DraftTree.ancestor_mask``). Llama in
  ``transformers`` 5.x passes a 4D mask through ``create_causal_mask`` untouched;
  the eager kernel *adds* it to the attention scores and SDPA accepts a float
  mask too, so an additive mask in the model dtype serves both.
* **tree positions** – ``position_ids = past + tree.depths``.
* **KV compaction** – after verification only the past plus the accepted path is
  kept (:meth:`HFTargetSession.commit`). The cache's layers are views of one buffer
  ``[L, 2, 1, heads, capacity, head_dim]`` (:class:`KVArena`): a forward writes each
  layer's new rows in place (no copy of the past), and the commit moves the accepted
  rows of every layer at once, one gather and one copy whatever the layer count.
* **hidden-state capture** – the inputs of decoder layers 2, L//2 and L-3 (in
  ``output_hidden_states`` terms: ``hidden_states[2]``, ``[L//2]``, ``[L-3]``),
  concatenated on the last dim into ``features: [len, 3 * hidden]``. Captured
  with forward pre-hooks on just those layers, registered for the duration of
  one forward.

* **output rows on demand** – for a Llama causal LM the tree call runs the decoder
  only and returns :class:`~rheo.models.base.LazyLogits`: ``lm_head`` (49152 x 576
  for SmolLM2, ~21% of a forward's FLOPs) runs on the root and the first-ranked
  chain in one batch, and on any other row when the verifier reads it. A verifier
  reads the accepted path and one node more, so a 61-node tree pays for a few rows.

Batch size is 1. Features are returned in the model dtype; logits as float32.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, Union

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rheo.models.base import DraftTree, LazyLogits, TargetOutput, first_child_chain, path_list
from rheo.models.kv_arena import ArenaLayer, KVArena

__all__ = ["HFTarget", "HFTargetSession", "eagle3_feature_layers"]

# Attention implementations that honour a custom 4D float mask.
_MASKABLE_ATTN = ("eager", "sdpa")


def eagle3_feature_layers(num_layers: int) -> tuple[int, int, int]:
    """Decoder layers whose *inputs* form the EAGLE-3 features: (2, L//2, L-3).

    The one definition: the tree adapter below, the training-data script and the
    training code all take it from here (in ``output_hidden_states`` terms these are
    ``hidden_states[i]`` for i in the tuple), so a trained head always sees at
    inference the layers it was trained on.
    """
    if num_layers < 3:
        raise ValueError(f"EAGLE-3 features need >= 3 decoder layers, got {num_layers}")
    return (2, num_layers // 2, num_layers - 3)


class HFTarget:
    """TargetModel over a ``transformers`` Llama causal LM (eval mode, batch 1)."""

    def __init__(self, hf_model: torch.nn.Module, lazy_logits: Optional[bool] = None) -> None:
        """``lazy_logits``: run the output layer only on the tree rows a verifier reads
        (:class:`~rheo.models.base.LazyLogits`; on a 61-node tree it computes a few rows
        instead of 61 x vocabulary). None = on for Llama causal LMs, whose logits are the
        plain ``lm_head`` of the decoder's output; False = every row in the forward."""
        config = hf_model.config
        attn = getattr(config, "_attn_implementation", None) or "eager"
        if attn not in _MASKABLE_ATTN:
            raise ValueError(
                f"HFTarget needs an attention implementation that accepts a custom 4D mask "
                f"{list(_MASKABLE_ATTN)}, got {attn!r}; load the model with attn_implementation='sdpa'"
            )
        self.hf_model = hf_model.eval()
        self.vocab_size: int = int(config.vocab_size)
        self.hidden_size: int = int(config.hidden_size)
        self.layer_ids = eagle3_feature_layers(int(config.num_hidden_layers))
        #: positions the model was trained for (None if its config does not say)
        self.context_length: Optional[int] = getattr(config, "max_position_embeddings", None)
        # the KV-cache argument is `cache` in recent transformers 5.x, `past_key_values` before
        self.cache_kwarg = cache_kwarg(hf_model)
        plain = plain_lm_head(hf_model)
        if lazy_logits and not plain:
            raise ValueError(f"lazy_logits needs a Llama causal LM with a plain lm_head, got {type(hf_model).__name__}")
        self.lazy_logits: bool = plain if lazy_logits is None else bool(lazy_logits)

    @property
    def feature_dim(self) -> int:
        return 3 * self.hidden_size

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf_model.parameters()).dtype

    def new_session(self) -> "HFTargetSession":
        return HFTargetSession(self)


class HFTargetSession:
    """One sequence: a ``DynamicCache`` holding the committed context (root excluded)."""

    def __init__(self, target: HFTarget) -> None:
        self.target = target
        self.cache = DynamicCache(config=target.hf_model.config)
        self.arena: Optional[KVArena] = None
        if all(type(layer) is DynamicLayer for layer in self.cache.layers):  # full attention everywhere
            self.arena = KVArena(len(self.cache.layers))
            self.cache.layers = [ArenaLayer(self.arena, i) for i in range(len(self.cache.layers))]
        self.past_len = 0
        self._pending: Optional[DraftTree] = None  # scored tree whose KV is still in the cache

    # ------------------------------------------------------------------ protocol
    @torch.no_grad()
    def prefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        """token_ids: the context (all but the root). Returns features [len, 3H]."""
        if self._pending is not None:
            raise RuntimeError("prefill after score_tree without commit")
        t = self.target
        ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=t.device)
        if ids.ndim != 1:
            raise ValueError(f"token_ids must be a flat sequence, got shape {tuple(ids.shape)}")
        if ids.numel() == 0:
            return torch.empty(0, t.feature_dim, dtype=t.dtype, device=t.device)
        positions = torch.arange(self.past_len, self.past_len + ids.numel(), device=t.device)
        with self._capture() as captured:
            # The decoder alone: prefill needs no logits (saves a [len, vocab] lm_head).
            t.hf_model.get_decoder()(
                input_ids=ids[None], position_ids=positions[None], use_cache=True, **{t.cache_kwarg: self.cache}
            )
        self.past_len += int(ids.numel())
        self._check_cache_len()
        return self._features(captured)

    @torch.no_grad()
    def score_tree(self, tree: DraftTree) -> TargetOutput:
        """One forward of tree.tokens [n] on top of the cache.

        Returns logits [n, vocab] float32 and features [n, 3H]; node i's KV is left
        in the cache at slot past_len + i until :meth:`commit`.
        """
        if self._pending is not None:
            raise RuntimeError("score_tree twice without commit")
        t = self.target
        n = tree.num_nodes
        _check_tree(tree)
        tokens = tree.tokens.to(t.device)
        positions = (self.past_len + tree.depths.to(t.device))[None]  # [1, n]
        mask = tree_attention_mask(tree.ancestor_mask.to(t.device), self.past_len, t.dtype)
        kwargs = dict(input_ids=tokens[None], attention_mask=mask, position_ids=positions, use_cache=True,
                      **{t.cache_kwarg: self.cache})
        with self._capture() as captured:
            if t.lazy_logits:  # the decoder only; lm_head per row, when the verifier reads it
                hidden = t.hf_model.get_decoder()(**kwargs).last_hidden_state[0]  # [n, H], final norm applied
            else:
                logits = t.hf_model(**kwargs).logits[0].float()  # [n, vocab]
        self._pending = tree
        self._check_cache_len(extra=n)
        if t.lazy_logits:
            lm_head = t.hf_model.get_output_embeddings()
            logits = LazyLogits(n, t.vocab_size, lambda idx: lm_head(hidden[idx]).float(), hidden.device,
                                prefetch=first_child_chain(tree.host_lists()[0]))
        return TargetOutput(logits=logits, features=self._features(captured))

    @torch.no_grad()
    def commit(self, path: Union[torch.Tensor, Sequence[int]]) -> None:
        """path: [a+1] node indices, root first, each the parent of the next (a 1-D tensor, or a list:
        the verifier's, which needs no read from the device).

        Keeps past + the KV of the nodes on ``path`` (in that order), drops the rest
        of the scored tree.
        """
        tree = self._pending
        if tree is None:
            raise RuntimeError("commit without a scored tree")
        nodes = path_list(path)
        if not 1 <= len(nodes) <= tree.num_nodes:
            raise ValueError(f"path must be [a+1] with 1 <= a+1 <= {tree.num_nodes}, got {len(nodes)} nodes")
        parents = tree.host_lists()[0]  # the builder's copy: no read
        if nodes[0] != 0 or any(parents[child] != parent for parent, child in zip(nodes, nodes[1:])):
            raise ValueError(f"path {nodes} is not a root-first chain of the scored tree")
        past, keep = self.past_len, len(nodes)
        src = torch.tensor([past + i for i in nodes], dtype=torch.long).to(self.target.device)
        if self.arena is not None:  # every layer at once
            self.arena.keep(past, src)
        else:
            for layer in self.cache.layers:
                # Gather the accepted rows (a copy), write them behind the past, crop.
                layer.keys[..., past:past + keep, :] = layer.keys.index_select(-2, src)
                layer.values[..., past:past + keep, :] = layer.values.index_select(-2, src)
                layer.keys = layer.keys[..., :past + keep, :]
                layer.values = layer.values[..., :past + keep, :]
        self.past_len = past + keep
        self._pending = None
        self._check_cache_len()

    @torch.no_grad()
    def discard(self) -> None:
        """Drop the scored tree's KV without committing any of it: the cache holds exactly the
        committed past again (same-state evaluation scores trees it does not verify)."""
        if self._pending is None:
            raise RuntimeError("discard without a scored tree")
        past = self.past_len
        if self.arena is not None:
            self.arena.crop(past)
        else:
            for layer in self.cache.layers:
                layer.keys = layer.keys[..., :past, :]
                layer.values = layer.values[..., :past, :]
        self._pending = None
        self._check_cache_len()

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _capture(self) -> Iterator[dict[int, torch.Tensor]]:
        """Record the input hidden state [1, len, H] of each feature layer during one forward."""
        captured: dict[int, torch.Tensor] = {}
        layers = self.target.hf_model.get_decoder().layers

        def hook_for(idx: int):
            def hook(module, args, kwargs):
                captured[idx] = args[0] if args else kwargs["hidden_states"]
            return hook

        handles = [layers[i].register_forward_pre_hook(hook_for(i), with_kwargs=True)
                   for i in sorted(set(self.target.layer_ids))]
        try:
            yield captured
        finally:
            for h in handles:
                h.remove()

    def _features(self, captured: dict[int, torch.Tensor]) -> torch.Tensor:
        """captured: layer -> [1, len, H]. Returns [len, 3H]."""
        return torch.cat([captured[i][0] for i in self.target.layer_ids], dim=-1)

    def _check_cache_len(self, extra: int = 0) -> None:
        got = self.cache.get_seq_length()
        if got != self.past_len + extra:
            raise RuntimeError(f"KV cache holds {got} positions, expected {self.past_len + extra}")


def plain_lm_head(hf_model: torch.nn.Module) -> bool:
    """True when the model's logits are exactly ``lm_head(decoder(...))`` (Llama causal LMs:
    no logit scaling or soft-capping), so they may be computed row by row."""
    config = hf_model.config
    head = hf_model.get_output_embeddings() if hasattr(hf_model, "get_output_embeddings") else None
    return (type(hf_model).__name__ == "LlamaForCausalLM" and isinstance(head, torch.nn.Linear)
            and head.bias is None and getattr(config, "final_logit_softcapping", None) is None
            and getattr(config, "logit_scale", None) is None)


def cache_kwarg(hf_model: torch.nn.Module) -> str:
    """Name of the KV-cache keyword of ``hf_model.forward`` and its decoder's ("cache" or "past_key_values")."""
    names = set(inspect.signature(hf_model.forward).parameters)
    names &= set(inspect.signature(hf_model.get_decoder().forward).parameters)
    for name in ("cache", "past_key_values"):
        if name in names:
            return name
    raise ValueError("the model's forward takes neither `cache` nor `past_key_values`: unsupported transformers version")


def tree_attention_mask(ancestor_mask: torch.Tensor, past_len: int, dtype: torch.dtype) -> torch.Tensor:
    """ancestor_mask: [n, n] bool. Returns an additive mask [1, 1, n, past_len + n] of ``dtype``.

    0 where a tree node may attend (every past position; itself and its
    ancestors in the tree), the dtype's minimum elsewhere.
    """
    n = ancestor_mask.shape[0]
    visible = torch.cat(
        [torch.ones(n, past_len, dtype=torch.bool, device=ancestor_mask.device), ancestor_mask.bool()], dim=1
    )
    mask = torch.zeros(n, past_len + n, dtype=dtype, device=ancestor_mask.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def _check_tree(tree: DraftTree) -> None:
    n = tree.num_nodes
    if n < 1:
        raise ValueError("a scored tree holds at least the root")
    for name, t, shape in (("tokens", tree.tokens, (n,)), ("parents", tree.parents, (n,)),
                           ("depths", tree.depths, (n,)), ("ancestor_mask", tree.ancestor_mask, (n, n))):
        if tuple(t.shape) != shape:
            raise ValueError(f"tree.{name} must be {list(shape)}, got {list(t.shape)}")
