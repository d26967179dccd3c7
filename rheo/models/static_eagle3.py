"""The EAGLE-3 drafter with static shapes: the DraftModel of the ``static`` and ``graphs`` engines
(:mod:`rheo.engine`), the twin of :mod:`rheo.models.eagle3` (same head, same pairing of features and
tokens, same positions; see that module's docstring).

* **committed KV** - one buffer ``[2, 1, kv_heads, capacity, head_dim]`` of a capacity bucket
  (:func:`rheo.models.static_target.capacity_bucket`) and a 0-d ``length`` on the device.
* **draft step** (:func:`step_graph`) - a tree layer at depth d >= 1 for f frontier nodes. Each
  node's ancestor chain is padded to ``max_depth`` entries and masked past its d-1 real ones; the
  rotary row of position length-1+d is read with ``index_select``. The depth is a 0-d tensor, so one
  graph serves every depth and every committed length (one per frontier width).
* **draft extend** (:func:`extend_graph`) - the head over the accepted tokens, padded to
  depth + 1 rows (the padding rows' keys lie past the new length and are never seen).

The prompt's prefill runs the extend function eagerly at its own length. Buffers belong to the
drafter and are reused by its next session; one session at a time.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from rheo.models.base import TreeView
from rheo.models.eagle3 import Eagle3Drafter
from rheo.models.eagle3_fast import RopeRow, norm_pair, qkv_at, rope_table
from rheo.models.eagle3_head import attend
from rheo.models.static_target import MIN_CAPACITY, capacity_bucket

__all__ = ["StaticEagle3Drafter", "StaticEagle3Session", "step_graph", "extend_graph"]

#: ancestor chains are padded to this many entries at first (doubled when a tree is deeper)
MAX_DEPTH = 8
#: per-node buffers hold this many tree nodes at first (the paper's tree drafts 711; doubled when a tree has more)
MIN_NODES = 1024


class HeadState:
    """What the head's graphs read and write, as tensors (fixed shapes for a capacity and a tree size).

    kv: [2, 1, kv_heads, C, hd]; length: 0-d long; cos, sin: [C + max_depth + 1, hd] rotary rows
    (sin with rotate_half's sign); perm: [hd]; root_hidden: [H]; root_logits: [Vd] float32;
    node_hidden: [M, H]; node_kv: [M, 2, kv_heads, hd]; node_chain: [M, max_depth] long."""

    def __init__(self, drafter: Eagle3Drafter, capacity: int, nodes: int, max_depth: int) -> None:
        cfg, dev = drafter.head.cfg, drafter.device
        dtype = next(drafter.head.parameters()).dtype
        nkv, hd = cfg.num_key_value_heads, cfg.head_dim
        self.kv = torch.zeros(2, 1, nkv, capacity, hd, dtype=dtype, device=dev)
        self.length = torch.zeros((), dtype=torch.long, device=dev)
        table = rope_table(drafter.head, capacity + max_depth + 1, torch.zeros(1, dtype=dtype, device=dev))
        self.cos, self.sin, self.perm = table.cos, table.sin_signed, table.perm
        self.root_hidden = torch.zeros(cfg.hidden_size, dtype=dtype, device=dev)
        self.root_logits = torch.zeros(cfg.draft_vocab_size, dtype=torch.float32, device=dev)
        self.node_hidden = torch.zeros(nodes, cfg.hidden_size, dtype=dtype, device=dev)
        self.node_kv = torch.zeros(nodes, 2, nkv, hd, dtype=dtype, device=dev)
        self.node_chain = torch.zeros(nodes, max_depth, dtype=torch.long, device=dev)
        for t in (self.kv, self.length, self.cos, self.sin, self.perm, self.root_hidden, self.root_logits,
                  self.node_hidden, self.node_kv, self.node_chain):
            torch._dynamo.mark_static_address(t)  # a CUDA graph reads and writes them in place, never a copy

    @property
    def capacity(self) -> int:
        return int(self.kv.shape[3])

    @property
    def nodes(self) -> int:
        return int(self.node_hidden.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.node_chain.shape[1])


def step_graph(drafter: Eagle3Drafter, norms: torch.Tensor, s: HeadState, tokens: torch.Tensor,
               frontier: torch.Tensor, parent: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """One tree layer at ``depth`` (0-d long, >= 1) for the frontier nodes: tokens, frontier, parent:
    [f] long (target-vocabulary tokens, node indices, their parents). Writes the nodes' hidden
    states, keys, values and chains into ``s``; returns draft logits [f, Vd] float32."""
    head, f, dmax, cap = drafter.head, tokens.shape[0], s.max_depth, s.capacity
    embeds = drafter.embed_weight[tokens].to(s.node_hidden.dtype)[:, None]  # [f, 1, H]
    hidden = s.node_hidden[parent][:, None]  # [f, 1, H]
    at = (s.length - 1 + depth).view(1)  # every node of the layer sits at this position
    rope = RopeRow(s.cos.index_select(0, at), s.sin.index_select(0, at), s.perm)
    q, k, v = qkv_at(head, embeds, hidden, rope, norms)  # q [f, nH, 1, hd]; k, v [f, nKV, 1, hd]
    chain = torch.cat([parent[:, None], s.node_chain[parent, :dmax - 1]], dim=1)  # [f, dmax]: d-1 real ancestors
    s.node_chain[frontier] = chain
    new_kv = torch.stack([k[:, :, 0], v[:, :, 0]], dim=1)  # [f, 2, nKV, hd]
    tree_kv = torch.cat([s.node_kv[chain], new_kv[:, None]], dim=1)  # [f, dmax+1, 2, nKV, hd]: ancestors, then self
    nkv, hd = tree_kv.shape[3], tree_kv.shape[4]
    kv = torch.cat([s.kv, tree_kv.permute(2, 3, 0, 1, 4).reshape(2, 1, nkv, f * (dmax + 1), hd)], dim=3)
    slot = torch.arange(dmax + 1, device=tokens.device)
    own = (slot < depth - 1) | (slot == dmax)  # [dmax+1]: the real ancestors and the node itself
    block = torch.eye(f, dtype=torch.bool, device=tokens.device)[:, :, None] & own  # [f, f, dmax+1]
    seen = torch.cat([(torch.arange(cap, device=tokens.device) < s.length).expand(f, cap),
                      block.reshape(f, f * (dmax + 1))], dim=1)  # [f, C + f*(dmax+1)]
    mask = torch.zeros(seen.shape, dtype=q.dtype, device=tokens.device).masked_fill(~seen, float("-inf"))
    att = attend(q[:, :, 0].transpose(0, 1)[None], kv[0], kv[1], mask[None, None])  # [1, nH, f, hd]
    out = head.finish(att[0].transpose(0, 1)[:, :, None], hidden)[:, 0]  # [f, H]
    s.node_hidden[frontier] = out
    s.node_kv[frontier] = new_kv
    return head.logits(out).float()


def extend_graph(drafter: Eagle3Drafter, s: HeadState, tokens: torch.Tensor, features: torch.Tensor,
                 count: torch.Tensor) -> None:
    """The pairs (features[i], tokens[i]) after the committed ones: tokens [E] long, features [E, 3Ht];
    the first ``count`` (0-d long) are real. Writes E key/value rows at length .., sets the root's
    hidden state and logits from row count-1, and advances ``length`` by count."""
    head, e, cap, dev = drafter.head, tokens.shape[0], s.capacity, tokens.device
    hidden = head.project(features.to(s.node_hidden.dtype))[None]  # [1, E, H]
    embeds = drafter.embed_weight[tokens].to(s.node_hidden.dtype)[None]  # [1, E, H]
    at = s.length + torch.arange(e, device=dev)  # [E]
    q, k, v = head.qkv(embeds, hidden, at[None])
    s.kv.index_copy_(3, at, torch.stack([k, v]))
    seen = torch.arange(cap, device=dev)[None] <= at[:, None]  # [E, C]: the past and the pairs up to itself
    out = head.finish(attend(q, s.kv[0], s.kv[1], seen[None, None]), hidden)[0]  # [E, H]
    last = out.index_select(0, count.view(1) - 1)[0]  # [H]
    s.root_hidden.copy_(last)
    s.root_logits.copy_(head.logits(last).float())
    s.length.add_(count)


class StaticEagle3Drafter:
    """DraftModel over an :class:`Eagle3Drafter`'s head with static shapes (module docstring).

    ``compiler``: applied once to the draft step and the draft extend (None: eager, the ``static``
    engine); ``keep_outputs``: clone the step's logits (CUDA graphs reuse their output memory)."""

    def __init__(self, eager: Eagle3Drafter, compiler: Optional[Callable[[Callable], Callable]] = None,
                 min_capacity: int = MIN_CAPACITY, keep_outputs: bool = False) -> None:
        self.eager, self.head, self.embed_weight = eager, eager.head, eager.embed_weight
        self.vocab_size, self.draft_to_target, self.device = eager.vocab_size, eager.draft_to_target, eager.device
        self.min_capacity, self.keep_outputs = int(min_capacity), keep_outputs
        self.norms = norm_pair(eager.head)
        for t in (self.norms, eager.embed_weight):  # read by the graphs: in place, not copied at each replay
            torch._dynamo.mark_static_address(t)
        self._states: dict[tuple[int, int, int], HeadState] = {}
        self._owner: Optional[StaticEagle3Session] = None
        #: the most tree nodes and the deepest chain a session has needed: a new session starts there, so that
        #: its buffers never grow inside a compiled build (a traced call cannot make new fixed-address buffers)
        self.nodes, self.max_depth = MIN_NODES, MAX_DEPTH
        #: 0-d views of 0 .. 4095 on the device: a depth or a count passed without a host-to-device copy
        self.ints = torch.arange(4096, device=eager.device)
        run = compiler or (lambda fn: fn)
        self.step_fn = run(lambda s, *args: step_graph(eager, self.norms, s, *args))
        self.extend_fn = run(lambda s, *args: extend_graph(eager, s, *args))

    def state(self, capacity: int, nodes: int, max_depth: int) -> HeadState:
        key = (capacity, nodes, max_depth)
        if key not in self._states:
            self._states[key] = HeadState(self.eager, capacity, nodes, max_depth)
        return self._states[key]

    def scalar(self, value: int) -> torch.Tensor:
        """``value`` as a 0-d long tensor on the device (a view of ``ints`` where it fits)."""
        return self.ints[value] if 0 <= value < self.ints.numel() else torch.tensor(value, device=self.device)

    def new_session(self) -> "StaticEagle3Session":
        session = StaticEagle3Session(self)
        self._owner = session
        return session


class StaticEagle3Session:
    """One sequence on the drafter's buffers: ``committed`` pairs (``state.length`` on the device)."""

    def __init__(self, drafter: StaticEagle3Drafter) -> None:
        self.d = drafter
        self.committed = 0
        self.depth_seen = 0  # the deepest tree drafted so far (its last layer + 1): extends are padded to it + 1
        self.s = drafter.state(drafter.min_capacity, drafter.nodes, drafter.max_depth)
        self.s.length.zero_()

    def reserve(self, nodes: int, layers: int) -> None:
        """Before a captured build (outside traced code): buffers for a tree of ``nodes`` rows (root included)
        drafted in ``layers`` layers, and extends padded for it. Inside the build ``draft`` then reads host
        state only, so a new session or a deeper tree makes no graph variant and no buffer inside a trace."""
        self.depth_seen = max(self.depth_seen, layers)
        self._move(nodes=nodes, max_depth=layers - 1)

    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int], features: Optional[torch.Tensor]) -> None:
        """prompt_ids: [len] (root last); features: [len-1, 3Ht]. The extend function, run eagerly."""
        self._check_owner()
        ids = torch.as_tensor(list(prompt_ids), dtype=torch.long, device=self.d.device)
        n = int(ids.numel()) - 1
        if features is None or features.shape[0] != n:
            got = None if features is None else tuple(features.shape)
            raise ValueError(f"EAGLE-3 prefill needs features [{n}, F] for a {n + 1}-token prompt, got {got}")
        self.s.length.zero_()
        self.s.root_hidden.zero_()  # a new eager session's root row (what a one-token prompt drafts from),
        self.s.root_logits.zero_()  # not the previous generation's
        self.committed = 0
        if n > 0:
            self._move(capacity=self.committed + n)
            extend_graph(self.d.eager, self.s, ids[1:], features.to(self.d.device), self.d.scalar(n))
            self.committed += n

    @torch.no_grad()
    def commit(self, tokens: torch.Tensor, features: Optional[torch.Tensor]) -> None:
        """tokens: [a+1] accepted tokens then the bonus; features: [a+1, 3Ht]. Padded to depth + 1 rows."""
        self._check_owner()
        if features is None or features.shape[0] != tokens.shape[0]:
            raise ValueError(f"EAGLE-3 commit needs features [{tokens.shape[0]}, F], got "
                             f"{None if features is None else tuple(features.shape)}")
        t = int(tokens.shape[0])
        if t == 0:
            return
        rows = max(t, self.depth_seen + 1)
        self._move(capacity=self.committed + rows)
        tokens = torch.nn.functional.pad(tokens.to(self.d.device, torch.long), (0, rows - t))
        features = torch.nn.functional.pad(features.to(self.d.device), (0, 0, 0, rows - t))
        self.d.extend_fn(self.s, tokens, features, self.d.scalar(t))
        self.committed += t

    @torch.no_grad()
    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] node indices, all at one depth. Returns draft logits [f, draft_vocab] float32."""
        self._check_owner()
        frontier = frontier.to(self.d.device, torch.long)
        depth = tree.layer if tree.layer is not None else int(tree.depths[frontier[0]])  # a host read without it
        if torch.compiler.is_compiling():  # inside a captured build: reserve() sized the buffers before it
            s = self.s
            if int(tree.tokens.shape[0]) > s.nodes or depth > s.max_depth:
                raise RuntimeError(f"a captured build drafts {int(tree.tokens.shape[0])} nodes at depth {depth}, past "
                                   f"the {s.nodes} nodes and depth {s.max_depth} reserved before it")
        else:
            self.depth_seen = max(self.depth_seen, depth + 1)  # this layer's children lie at depth + 1
            s = self._move(nodes=int(tree.tokens.shape[0]), max_depth=depth)
        if depth == 0:
            s.node_hidden[0] = s.root_hidden
            return s.root_logits.expand(frontier.numel(), -1).clone()
        tokens = tree.tokens.to(self.d.device, torch.long)[frontier]
        parent = tree.parents.to(self.d.device, torch.long)[frontier]
        logits = self.d.step_fn(s, tokens, frontier, parent, self.d.scalar(depth))
        return logits.clone() if self.d.keep_outputs else logits

    # ------------------------------------------------------------------ helpers
    def _move(self, capacity: int = 0, nodes: int = 0, max_depth: int = 0) -> HeadState:
        """The state whose buckets hold ``capacity`` committed rows, ``nodes`` tree nodes and chains for
        ``max_depth``; moving to a bigger one copies what the current one holds (rarely)."""
        s = self.s
        if capacity <= s.capacity and nodes <= s.nodes and max_depth <= s.max_depth:
            return s
        new = self.d.state(capacity_bucket(max(capacity, s.capacity), self.d.min_capacity),
                           _doubled(s.nodes, nodes), _doubled(s.max_depth, max_depth))
        self.d.nodes, self.d.max_depth = max(self.d.nodes, new.nodes), max(self.d.max_depth, new.max_depth)
        c, m, dm = self.committed, min(s.nodes, new.nodes), min(s.max_depth, new.max_depth)
        new.kv[..., :c, :].copy_(s.kv[..., :c, :])
        for name in ("length", "root_hidden", "root_logits"):
            getattr(new, name).copy_(getattr(s, name))
        new.node_hidden[:m].copy_(s.node_hidden[:m])
        new.node_kv[:m].copy_(s.node_kv[:m])
        new.node_chain[:m, :dm].copy_(s.node_chain[:m, :dm])
        self.s = new
        return new

    def _check_owner(self) -> None:
        if self.d._owner is not self:
            raise RuntimeError("a newer session of this static drafter holds its buffers: use that one")


def _doubled(have: int, need: int) -> int:
    while have < need:
        have *= 2
    return have
