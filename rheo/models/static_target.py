"""A Hugging Face Llama target with static shapes: the :class:`~rheo.models.base.TargetModel` of the
``static`` and ``graphs`` engines (:mod:`rheo.engine`), the twin of :mod:`rheo.models.hf_target`.

Every shape a scoring call sees is fixed by two buckets, so a compiler makes one graph per pair of
them and none per cache length:

* **cache** - per decoder layer one key and one value tensor ``[1, kv_heads, capacity, head_dim]``
  (:class:`~rheo.models.static_forward.StaticKV`). ``capacity`` is a bucket
  (:func:`capacity_bucket`): the cache moves up one, copying the committed rows once, when a call
  would overflow it. The buffers belong to the target
  and are reused by its next session (a CUDA graph replays on fixed addresses).
* **past** - the committed length as a 0-d long tensor on the device; attention sees all
  ``capacity`` columns and the mask hides those past the tree.
* **tree** - padded to a size bucket (:func:`tree_bucket`: 1, 8, 16, 32, 64, then multiples of 64).
  A padding row sees only itself and no real row sees it.

Inside the scoring function (:func:`rheo.models.static_forward.score_graph`): the mask and
positions, transformers' decoder layers unchanged, the EAGLE-3 features read in the layer loop (the
inputs of layers 2, L//2, L-3: no hooks), and the logits of the first-ranked chain (the rows a
verifier reads first). Other rows are computed when read (:class:`GraphLogits`). Committing is a
fixed-shape gather and copy per tensor (:func:`~rheo.models.static_forward.commit_graph`);
discarding a tree costs nothing (the mask hides its rows). Prefill runs the same decoder eagerly over the prompt.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F

from rheo.models.base import DraftTree, LazyLogits, TargetOutput, first_child_chain, path_list
from rheo.models.hf_target import HFTarget, _check_tree
from rheo.models.static_forward import CHAIN_ROWS, commit_graph, decode_graph, score_graph

__all__ = ["StaticHFTarget", "StaticHFTargetSession", "GraphLogits", "capacity_bucket", "tree_bucket"]

#: tree sizes a scoring graph is made for (larger trees: multiples of the last)
TREE_BUCKETS = (1, 8, 16, 32, 64)
#: the smallest cache capacity; capacities double from it
MIN_CAPACITY = 256

Compiler = Callable[[Callable], Callable]


def tree_bucket(n: int) -> int:
    """The padded size of an ``n``-node tree: the first of TREE_BUCKETS >= n, else a multiple of 64."""
    for size in TREE_BUCKETS:
        if n <= size:
            return size
    return -(-n // TREE_BUCKETS[-1]) * TREE_BUCKETS[-1]


def capacity_bucket(need: int, smallest: int = MIN_CAPACITY) -> int:
    """The cache capacity for ``need`` positions: ``smallest`` doubled until it holds them."""
    capacity = smallest
    while capacity < need:
        capacity *= 2
    return capacity


class GraphLogits(LazyLogits):
    """:class:`LazyLogits` whose first rows were made inside the scoring graph: ``given`` [r] row
    indices and their logits ``values`` [r, V]; any other row is ``lm_head`` of its hidden state."""

    def __init__(self, n: int, vocab: int, compute: Callable[[torch.Tensor], torch.Tensor], device: torch.device,
                 given: Sequence[int], values: torch.Tensor) -> None:
        super().__init__(n, vocab, compute, device)
        self._rows.update(zip(given, values))
        self.computed_in_batches.append(len(given))


class StaticHFTarget:
    """TargetModel over a transformers Llama causal LM (batch 1) with static shapes (module docstring).

    ``compiler``: applied once to the scoring and the commit function (None: they run eagerly, the
    ``static`` engine); ``min_capacity``: the smallest cache bucket. One session at a time: a new
    session takes the cache buffers over, and the earlier one refuses further calls."""

    def __init__(self, eager: HFTarget, compiler: Optional[Compiler] = None, min_capacity: int = MIN_CAPACITY,
                 keep_outputs: bool = False) -> None:
        self.eager, self.hf_model = eager, eager.hf_model
        self.decoder = eager.hf_model.get_decoder()
        self.lm_head = eager.hf_model.get_output_embeddings()
        self.vocab_size, self.hidden_size = eager.vocab_size, eager.hidden_size
        self.layer_ids, self.context_length, self.cache_kwarg = eager.layer_ids, eager.context_length, eager.cache_kwarg
        self.device, self.dtype = eager.device, eager.dtype
        self.min_capacity = int(min_capacity)
        #: clone what the graphs return before it is kept (CUDA graphs reuse their output memory)
        self.keep_outputs = keep_outputs
        config = eager.hf_model.config
        self._kv_shape = (1, config.num_key_value_heads, getattr(config, "head_dim", None)
                          or config.hidden_size // config.num_attention_heads)
        self._layers = int(config.num_hidden_layers)
        self._buffers: dict[int, list[torch.Tensor]] = {}  # capacity -> 2L tensors
        self._owner: Optional[StaticHFTargetSession] = None
        run = compiler or (lambda fn: fn)
        self.score_fn = run(lambda kv, *args: score_graph(self, kv, *args))
        self.commit_fn = run(commit_graph)

    @property
    def feature_dim(self) -> int:
        return 3 * self.hidden_size

    def buffers(self, capacity: int) -> list[torch.Tensor]:
        """The 2L cache tensors of ``capacity`` (made once, kept, and marked as fixed addresses)."""
        if capacity not in self._buffers:
            kvh, hd = self._kv_shape[1:]
            made = [torch.zeros(1, kvh, capacity, hd, dtype=self.dtype, device=self.device)
                    for _ in range(2 * self._layers)]
            for buf in made:
                torch._dynamo.mark_static_address(buf)
            self._buffers[capacity] = made
        return self._buffers[capacity]

    def new_session(self) -> "StaticHFTargetSession":
        session = StaticHFTargetSession(self)
        self._owner = session
        return session


class StaticHFTargetSession:
    """One sequence on the target's cache buffers (past_len committed rows, ``past`` its 0-d twin)."""

    def __init__(self, target: StaticHFTarget) -> None:
        self.target = target
        self.past_len = 0
        self.past = torch.zeros((), dtype=torch.long, device=target.device)
        self.kv: list[torch.Tensor] = target.buffers(target.min_capacity)
        self._pending: Optional[tuple[DraftTree, int, torch.Tensor]] = None  # tree, padded size, hidden

    @property
    def capacity(self) -> int:
        return int(self.kv[0].shape[2])

    @torch.no_grad()
    def prefill(self, token_ids: Sequence[int]) -> torch.Tensor:
        """token_ids: the context (all but the root), decoded eagerly. Returns features [len, 3H]."""
        self._check_owner()
        if self._pending is not None:
            raise RuntimeError("prefill after score_tree without commit")
        t = self.target
        ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=t.device)
        n = int(ids.numel())
        if ids.ndim != 1 or n == 0:
            if ids.ndim == 1:  # nothing to cache: no features
                return torch.empty(0, t.feature_dim, dtype=t.dtype, device=t.device)
            raise ValueError(f"token_ids must be a flat sequence, got shape {tuple(ids.shape)}")
        self._fit(self.past_len + n)
        causal = torch.ones(n, n, dtype=torch.bool, device=t.device).tril()
        _, features = decode_graph(t, self.kv, ids, torch.arange(n, device=t.device), causal, self.past)
        self._advance(n)
        return features

    @torch.no_grad()
    def score_tree(self, tree: DraftTree) -> TargetOutput:
        """tree.tokens [n] on top of the cache, padded to its bucket. Returns :class:`GraphLogits`
        [n, V] and features [n, 3H]; node i's KV waits at row past_len + i until :meth:`commit`."""
        self._check_owner()
        if self._pending is not None:
            raise RuntimeError("score_tree twice without commit")
        _check_tree(tree)
        t = self.target
        n = tree.num_nodes
        size = tree_bucket(n)
        self._fit(self.past_len + size)
        pad = size - n
        tokens = F.pad(tree.tokens.to(t.device), (0, pad))
        depths = F.pad(tree.depths.to(t.device), (0, pad))
        parents = F.pad(tree.parents.to(t.device), (0, pad), value=-1)
        ancestors = F.pad(tree.ancestor_mask.to(t.device), (0, pad, 0, pad))
        hidden, features, chain_logits = t.score_fn(self.kv, tokens, depths, parents, ancestors, self.past)
        if t.keep_outputs:
            hidden, features, chain_logits = hidden.clone(), features.clone(), chain_logits.clone()
        chain = first_child_chain(tree.host_lists()[0])[:min(size, CHAIN_ROWS)]
        self._pending = (tree, size, hidden)
        logits = GraphLogits(n, t.vocab_size, lambda idx: t.lm_head(hidden[idx]).float(), hidden.device,
                             chain, chain_logits[:len(chain)])
        return TargetOutput(logits=logits, features=features[:n])

    @torch.no_grad()
    def commit(self, path: Union[torch.Tensor, Sequence[int]]) -> None:
        """path: [a+1] node indices, root first, each the parent of the next. Keeps past + those rows
        (one fixed-shape copy per tensor; none when the path is already in place, 0, 1, .., a)."""
        self._check_owner()
        if self._pending is None:
            raise RuntimeError("commit without a scored tree")
        tree, size, _ = self._pending
        nodes = path_list(path)
        if not 1 <= len(nodes) <= tree.num_nodes:
            raise ValueError(f"path must be [a+1] with 1 <= a+1 <= {tree.num_nodes}, got {len(nodes)} nodes")
        parents = tree.host_lists()[0]
        if nodes[0] != 0 or any(parents[child] != parent for parent, child in zip(nodes, nodes[1:])):
            raise ValueError(f"path {nodes} is not a root-first chain of the scored tree")
        if nodes != list(range(len(nodes))):
            src = torch.tensor(nodes + nodes[-1:] * (size - len(nodes)), dtype=torch.long).to(self.target.device)
            self.target.commit_fn(self.kv, self.past, src)
        self._advance(len(nodes))
        self._pending = None

    @torch.no_grad()
    def discard(self) -> None:
        """Drop the scored tree (nothing to undo: its rows lie past the committed ones)."""
        self._check_owner()
        if self._pending is None:
            raise RuntimeError("discard without a scored tree")
        self._pending = None

    # ------------------------------------------------------------------ helpers
    def _advance(self, n: int) -> None:
        self.past_len += n
        self.past.add_(n)

    def _fit(self, need: int) -> None:
        """Move the cache up to the bucket that holds ``need`` rows (the committed rows copied once)."""
        if need <= self.capacity:
            return
        bigger = self.target.buffers(capacity_bucket(need, self.target.min_capacity))
        for old, new in zip(self.kv, bigger):
            new[:, :, :self.past_len].copy_(old[:, :, :self.past_len])
        self.kv = bigger

    def _check_owner(self) -> None:
        if self.target._owner is not self:
            raise RuntimeError("a newer session of this static target holds its cache: use that one")
