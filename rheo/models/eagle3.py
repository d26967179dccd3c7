"""EAGLE-3 drafter: an :class:`~rheo.models.eagle3_head.Eagle3Head` behind the DraftModel protocol.

The session keeps the head's own KV cache. Head position j holds the pair
(features[j], token[j+1]) (see ``rheo.models.base``: features[i] is the target
state before tokens[i]); its output predicts token j+2. So after prefill /
commit the *last* committed pair's output gives the root's logits (node 0).

Drafting a tree layer at depth d >= 1 runs one batched head step over the
frontier nodes: token = the node's token, hidden = its parent's output hidden,
position = committed_len - 1 + d; each node attends to the whole committed
cache plus the keys of its own ancestors in the tree (stored when they were
expanded) and itself. The tree KV is dropped at the next :meth:`commit`, which
recomputes the accepted tokens from the target's real features.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from rheo.models.base import TreeView
from rheo.models.eagle3_checkpoint import Eagle3LoadError, load_head
from rheo.models.eagle3_fast import RopeRow, RopeTable, norm_pair, qkv_at, rope_table
from rheo.models.eagle3_head import Eagle3Head, attend

__all__ = ["Eagle3Drafter", "Eagle3Session", "load_eagle3_drafter", "Eagle3LoadError"]


class Eagle3Drafter:
    """DraftModel over an EAGLE-3 head and the target's (frozen) token embeddings."""

    def __init__(self, head: Eagle3Head, embed_weight: torch.Tensor) -> None:
        """embed_weight: [target_vocab, H] the target's input embeddings."""
        self.head = head.eval()
        self.embed_weight = embed_weight.detach()
        self.vocab_size: int = head.cfg.draft_vocab_size
        self.draft_to_target: torch.Tensor = head.draft_to_target().long()  # [draft_vocab]

    @property
    def device(self) -> torch.device:
        return self.embed_weight.device

    def new_session(self) -> "Eagle3Session":
        return Eagle3Session(self)


class Eagle3Session:
    """One sequence. Committed keys and values in one tensor, kv: [2, 1, nKV, S, hd]; per-node tree
    state keyed by node index."""

    def __init__(self, drafter: Eagle3Drafter) -> None:
        self.d = drafter
        cfg = drafter.head.cfg
        p = next(drafter.head.parameters())
        self.dtype, self.device = p.dtype, p.device
        self.kv = torch.zeros(2, 1, cfg.num_key_value_heads, 0, cfg.head_dim, dtype=self.dtype, device=self.device)
        self.root_logits = torch.zeros(cfg.draft_vocab_size, dtype=torch.float32, device=self.device)
        self.root_hidden = torch.zeros(cfg.hidden_size, dtype=self.dtype, device=self.device)
        self._rope_table: Optional[RopeTable] = None
        self._norms = norm_pair(drafter.head)  # [2, H]: the head's input and hidden norm weights
        self._masks: dict[tuple[int, int], torch.Tensor] = {}  # (f, depth) -> [f, room + f*depth]
        self._reset_tree(1)

    @property
    def committed_len(self) -> int:
        return int(self.kv.shape[3])

    @property
    def keys(self) -> torch.Tensor:
        """[1, nKV, S, hd] committed keys (a view)."""
        return self.kv[0]

    @property
    def values(self) -> torch.Tensor:
        """[1, nKV, S, hd] committed values (a view)."""
        return self.kv[1]

    # ------------------------------------------------------------------ protocol
    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int], features: Optional[torch.Tensor]) -> None:
        """prompt_ids: [len] (root last); features: [len-1, 3Ht]."""
        ids = torch.as_tensor(list(prompt_ids), dtype=torch.long, device=self.device)
        n = int(ids.numel()) - 1
        if features is None or features.shape[0] != n:
            got = None if features is None else tuple(features.shape)
            raise ValueError(f"EAGLE-3 prefill needs features [{n}, F] for a {n + 1}-token prompt, got {got}")
        self.kv = self.kv[:, :, :, :0]
        self._append(ids[1:], features)

    @torch.no_grad()
    def commit(self, tokens: torch.Tensor, features: Optional[torch.Tensor]) -> None:
        """tokens: [a+1] accepted tokens then the bonus; features: [a+1, 3Ht] (root + accepted nodes)."""
        if features is None or features.shape[0] != tokens.shape[0]:
            raise ValueError(f"EAGLE-3 commit needs features [{tokens.shape[0]}, F], got "
                             f"{None if features is None else tuple(features.shape)}")
        self._append(tokens.to(self.device, torch.long), features)

    @torch.no_grad()
    def draft(self, tree: TreeView, frontier: torch.Tensor) -> torch.Tensor:
        """frontier: [f] node indices, all at one depth. Returns draft logits [f, draft_vocab] float32."""
        frontier = frontier.to(self.device, torch.long)
        parents_all = tree.parents.to(self.device, torch.long)
        depth = tree.layer if tree.layer is not None else int(tree.depths[frontier[0]])  # a host read without it
        self._grow(int(tree.tokens.shape[0]), depth)
        if depth == 0:
            self.node_hidden[0] = self.root_hidden
            return self.root_logits.expand(frontier.numel(), -1).clone()
        head = self.d.head
        f = int(frontier.numel())
        tokens = tree.tokens.to(self.device, torch.long)[frontier]
        embeds = self.d.embed_weight[tokens].to(self.dtype)[:, None]  # [f, 1, H]
        parent = parents_all[frontier]  # [f]
        hidden = self.node_hidden[parent][:, None]  # [f, 1, H]
        at = self.committed_len - 1 + depth  # every node of the layer sits at this position
        q, k, v = qkv_at(head, embeds, hidden, self._rope(at), self._norms)  # q [f, nH, 1, hd]; k, v [f, nKV, 1, hd]
        # ancestors at depths d-1 .. 1 (the root's KV is committed): [f, d-1], the parent's row shifted
        chain = (torch.cat([parent[:, None], self.node_chain[parent, : depth - 2]], dim=1) if depth > 1
                 else parent[:, None][:, :0])
        self.node_chain[frontier, : depth - 1] = chain
        new_kv = torch.stack([k[:, :, 0], v[:, :, 0]], dim=1)  # [f, 2, nKV, hd]
        tree_kv = torch.cat([self.node_kv[chain], new_kv[:, None]], dim=1)  # [f, d, 2, nKV, hd]: ancestors, then self
        # One attention call for the whole layer: the f queries share the committed keys (not copied
        # f times; that copy dominated drafting on long prompts) and see only their own chain's keys.
        nkv, hd = tree_kv.shape[3], tree_kv.shape[4]
        s = self.committed_len
        kv = torch.cat([self.kv, tree_kv.permute(2, 3, 0, 1, 4).reshape(2, 1, nkv, f * depth, hd)], dim=3)  # [2, 1, nKV, S+f*d, hd]
        att = attend(q[:, :, 0].transpose(0, 1)[None], kv[0], kv[1], self._mask(s, f, depth)[None, None])  # [1, nH, f, hd]
        out = head.finish(att[0].transpose(0, 1)[:, :, None], hidden)[:, 0]  # [f, H]
        self.node_hidden[frontier] = out
        self.node_kv[frontier] = new_kv
        return head.logits(out).float()

    # ------------------------------------------------------------------ helpers
    def _rope(self, position: int) -> RopeRow:
        """The rotation of ``position``: a row of a table made once and doubled when outgrown, so a
        draft step computes no rotary angles."""
        if self._rope_table is None or position >= self._rope_table.length:
            self._rope_table = rope_table(self.d.head, max(1024, 2 * (position + 1)), self.root_hidden)
        return self._rope_table.row(position)

    def _mask(self, committed: int, f: int, depth: int) -> torch.Tensor:
        """[f, committed + f*depth] additive mask (a view, nothing launched): every row sees (0) the
        committed keys, then row i sees the ``depth`` tree keys of its own chain and no other (-inf), the
        float mask attention would make of the boolean one. A buffer per (f, depth) holds ``room`` zero
        columns before that block, made once and remade with twice the room when outgrown."""
        buffer = self._masks.get((f, depth))
        if buffer is None or buffer.shape[1] - f * depth < committed:
            room = max(1024, 2 * committed)
            own = torch.eye(f, dtype=torch.bool, device=self.device).repeat_interleave(depth, dim=1)  # [f, f*d]
            buffer = torch.zeros(f, room + f * depth, dtype=self.dtype, device=self.device)
            buffer[:, room:].masked_fill_(~own, float("-inf"))
            self._masks[(f, depth)] = buffer
        return buffer[:, buffer.shape[1] - f * depth - committed:]

    def _append(self, tokens: torch.Tensor, features: torch.Tensor) -> None:
        """Run pairs (features[i], tokens[i]) after the committed cache. tokens: [t]; features: [t, 3Ht].
        The per-node buffers are kept (not cleared): a tree writes every row it reads first."""
        t = int(tokens.numel())
        if t == 0:
            return
        head, s = self.d.head, self.committed_len
        hidden = head.project(features.to(self.device, self.dtype))[None]  # [1, t, H]
        embeds = self.d.embed_weight[tokens].to(self.dtype)[None]
        positions = torch.arange(s, s + t, device=self.device)[None]
        q, k, v = head.qkv(embeds, hidden, positions)
        self.kv = torch.cat([self.kv, torch.stack([k, v])], dim=3)
        mask = torch.ones(t, s + t, dtype=torch.bool, device=self.device).tril(diagonal=s)
        out = head.finish(attend(q, self.keys, self.values, mask[None, None]), hidden)[0]  # [t, H]
        self.root_hidden = out[-1]
        self.root_logits = head.logits(out[-1]).float()

    def _reset_tree(self, capacity: int) -> None:
        cfg = self.d.head.cfg
        self.node_hidden = torch.zeros(capacity, cfg.hidden_size, dtype=self.dtype, device=self.device)
        self.node_kv = torch.zeros(capacity, 2, cfg.num_key_value_heads, cfg.head_dim, dtype=self.dtype,
                                   device=self.device)  # [N, 2, nKV, hd]: a node's key and value
        self.node_chain = torch.zeros(capacity, 0, dtype=torch.long, device=self.device)  # [N, depth-1] ancestors

    def _grow(self, n: int, depth: int) -> None:
        """Room for ``n`` nodes and chains of ``depth - 1`` ancestors (grown by doubling: rarely)."""
        extra = n - self.node_hidden.shape[0]
        if extra > 0:
            extra = max(extra, self.node_hidden.shape[0])
            self.node_hidden = torch.cat([self.node_hidden, self.node_hidden.new_zeros(extra, *self.node_hidden.shape[1:])])
            self.node_kv = torch.cat([self.node_kv, self.node_kv.new_zeros(extra, *self.node_kv.shape[1:])])
        rows, width = self.node_hidden.shape[0], max(depth - 1, 0)
        if self.node_chain.shape != (rows, max(width, self.node_chain.shape[1])):
            grown = self.node_chain.new_zeros(rows, max(width, self.node_chain.shape[1]))
            grown[: self.node_chain.shape[0], : self.node_chain.shape[1]] = self.node_chain
            self.node_chain = grown


# ---------------------------------------------------------------------- loading
def load_eagle3_drafter(head_dir, target_hf_model, device="cpu", dtype: Optional[torch.dtype] = None) -> Eagle3Drafter:
    """Load an EAGLE-3 head (official layout) for ``target_hf_model`` (a HF Llama causal LM).

    ``dtype`` defaults to the target's parameter dtype. Raises :class:`Eagle3LoadError`
    when the head does not fit the target, :class:`CorruptWeightsError` when its weights
    file is unreadable. Edge cases follow the official EAGLE-3 code:

    * no ``rms_norm_eps`` in config.json: 1e-6 (``Eagle3Config.from_dict``);
    * ``head_dim`` is ignored in favour of hidden / heads, as there; a checkpoint whose
      attention weights need another head size is refused (the official code cannot load it);
    * token embeddings: a checkpoint that carries ``embed_tokens.weight`` uses it (as there);
      otherwise the target's. A config whose ``target_hidden_size`` differs from its
      ``hidden_size`` needs its own embeddings (the target's have the wrong width) and is
      refused without them. (With ``target_hidden_size == hidden_size`` and no embeddings,
      as this project's heads were saved, the official code would use untrained embeddings;
      the target's, which such a head is trained with, are used here.)
    """
    head, embed = load_head(head_dir, target_hf_model)
    dtype = dtype or target_hf_model.get_input_embeddings().weight.dtype
    head = head.to(device=device, dtype=dtype)
    head.d2t.data = head.d2t.data.long()
    return Eagle3Drafter(head, embed.to(device=device, dtype=dtype))
