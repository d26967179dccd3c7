"""EAGLE-3 training pieces: batches with soft targets, and the training-time test.

Terms. A *pair* j of a sequence x_0..x_{N-1} is (f_j, x_{j+1}) where f_j is the
fused target feature at position j; the head's step-1 output at pair j predicts
x_{j+2}, whose target distribution is p_{j+1} = softmax(lm_head(final_{j+1})).

Training-time test (TTT), unrolled K steps, mirrors tree drafting exactly:
step k (k >= 2) at pair j takes the hidden the head itself produced at step
k-1 for pair j-1, the same token x_{j+1} and the same target p_{j+1}; it sits
at position j. Its query sees the step-1 keys of pairs <= j-(k-1) (what would
be the committed cache at draft depth k-1) and, for every step i in 2..k, the
single step-i key of pair j-(k-i) (the node's ancestors in the draft tree, and
itself). Only pairs j >= k-1 are valid at step k.
"""

from __future__ import annotations

from typing import Dict, List

import torch
from torch import nn

from rheo.models.eagle3_head import Eagle3Head, attend


def ttt_mask(num_pairs: int, step: int) -> torch.Tensor:
    """[num_pairs, step * num_pairs] bool: which keys a step-``step`` query at each pair sees."""
    j = torch.arange(num_pairs)
    blocks = [j[None, :] <= j[:, None] - (step - 1)]  # step-1 (committed) keys
    for i in range(2, step + 1):
        blocks.append(j[None, :] == j[:, None] - (step - i))  # one ancestor key per deeper step
    return torch.cat(blocks, dim=1)


def ttt_steps(head: Eagle3Head, feats: torch.Tensor, embeds: torch.Tensor, steps: int,
              select: torch.Tensor | None = None):
    """Yield the head's draft logits [B, M, Vd] for unrolled steps 1..steps.

    feats: [B, M, 3Ht] (pair j's target feature); embeds: [B, M, H] (pair j's token embedding).
    At step k only pairs j >= k-1 are meaningful (see the module docstring).
    select: optional [B, M] bool; then only those pairs' logits are computed, [P, Vd]
    (the output projection is the costliest part, and prompt pairs carry no loss).
    """
    b, m, _ = embeds.shape
    dev = embeds.device
    positions = torch.arange(m, device=dev).expand(b, m)
    hidden = head.project(feats)
    keys, values = [], []
    for k in range(1, steps + 1):
        q, kk, vv = head.qkv(embeds, hidden, positions)
        keys.append(kk)
        values.append(vv)
        attn_mask = ttt_mask(m, k).to(dev)[None, None]
        out = head.finish(attend(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask), hidden)
        yield head.logits(out if select is None else out[select])
        hidden = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)


def ttt_forward(head: Eagle3Head, batch: Dict[str, torch.Tensor], steps: int, in_vocab: torch.Tensor):
    """Unrolled training-time test loss, over the ``valid`` pairs only.

    in_vocab: [V] bool, target ids inside the draft vocabulary.
    Returns (per-step losses [steps], per-step (correct, count) [steps, 2]).
    """
    feats, embeds, logp, argmax, valid = (batch[k] for k in ("feats", "embeds", "logp", "argmax", "valid"))
    m, dev = embeds.shape[1], embeds.device
    d2t_ids = head.draft_to_target()
    target_probs = logp[valid].exp()  # [P, Vd]
    am = argmax[valid]  # [P]
    pos = torch.arange(m, device=dev).expand_as(valid)[valid]  # [P] pair index j
    in_v = in_vocab[am]
    losses, stats = [], []
    for k, logits in enumerate(ttt_steps(head, feats, embeds, steps, select=valid), start=1):
        step_ok = pos >= k - 1
        w = (in_v & step_ok).float()
        ce = -(target_probs * torch.log_softmax(logits.float(), -1)).sum(-1)
        losses.append((ce * w).sum() / w.sum().clamp_min(1.0))
        with torch.no_grad():
            hit = (d2t_ids[logits.argmax(-1)] == am) & step_ok
            stats.append(torch.stack([hit.sum(), step_ok.sum()]))
    return torch.stack(losses), torch.stack(stats)


@torch.no_grad()
def batch_from_sequences(seqs: List[Dict], embed: nn.Embedding, w_draft: torch.Tensor,
                         min_resp_offset: int = 2) -> Dict[str, torch.Tensor]:
    """Pad cached sequences into pair tensors, soft labels recomputed from the target's final hidden.

    Each sequence: input_ids [N], features [N, F] fp16, final [N, Ht] fp16, argmax [N], resp_start.
    w_draft: [Vd, Ht] the target's lm_head rows of the draft vocabulary; the batch lives on its device
    (``embed`` must be there too).
    Returns feats [B, M, F], embeds [B, M, H], logp [B, M, Vd], argmax [B, M], valid [B, M] bool with
    M = max(N) - 1; pair j holds (f_j, x_{j+1}) and is scored against p_{j+1} (see the module docstring).
    """
    m = max(len(s["input_ids"]) for s in seqs) - 1
    b, f_dim, h_t = len(seqs), seqs[0]["features"].shape[1], seqs[0]["final"].shape[1]
    feats = torch.zeros(b, m, f_dim)
    toks = torch.zeros(b, m, dtype=torch.long)
    final = torch.zeros(b, m, h_t)
    argmax = torch.zeros(b, m, dtype=torch.long)
    valid = torch.zeros(b, m, dtype=torch.bool)
    for i, s in enumerate(seqs):
        n = len(s["input_ids"])
        feats[i, : n - 1] = s["features"][: n - 1].float()
        toks[i, : n - 1] = s["input_ids"][1:]
        final[i, : n - 1] = s["final"][1:].float()
        argmax[i, : n - 1] = s["argmax"][1:]
        valid[i, max(s["resp_start"] - min_resp_offset, 0) : n - 2] = True
    dev = w_draft.device  # built on the host, then moved where the head trains
    feats, toks, final, argmax, valid = (t.to(dev) for t in (feats, toks, final, argmax, valid))
    logp = torch.log_softmax(final @ w_draft.T, dim=-1)  # [B, M, Vd]
    return dict(feats=feats, embeds=embed(toks), logp=logp, argmax=argmax, valid=valid)
