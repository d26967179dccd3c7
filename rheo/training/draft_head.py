"""The draft head before training: its draft vocabulary, a fresh or warm-started head, a saved one.

The draft vocabulary is the ``size`` most frequent response tokens of the training split;
a new head is shaped like one target layer, with the target's output rows for those tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rheo.models.eagle3 import load_eagle3_drafter
from rheo.models.eagle3_head import Eagle3Config, Eagle3Head, dequantize_int8
from rheo.training.features import FeatureCache

__all__ = ["draft_vocab", "coverage", "init_head", "saved_head"]


def draft_vocab(corpus, train_ids: np.ndarray, size: int) -> torch.Tensor:
    """[size] long, ascending: most frequent training-response tokens (ties: lower id)."""
    counts = np.zeros(2**16, dtype=np.int64)
    for s in train_ids:
        seq = corpus.sequence(s)
        np.add.at(counts, seq[corpus.resp_start[s]:].astype(np.int64), 1)
    ranked = np.lexsort((np.arange(len(counts)), -counts))[:size]
    return torch.from_numpy(np.sort(ranked)).long()


def coverage(cache: FeatureCache, held: np.ndarray, in_vocab: torch.Tensor) -> float:
    """Share of held-out response positions whose target argmax is in the draft vocabulary."""
    hits = total = 0
    for s in held:
        a, r, b = int(cache.corpus.offsets[s]), int(cache.corpus.resp_start[s]), int(cache.corpus.offsets[s + 1])
        am = torch.from_numpy(np.asarray(cache.argmax[a + r - 1 : b - 1]).astype(np.int64))
        hits += int(in_vocab[am].sum())
        total += len(am)
    return hits / max(total, 1)


def init_head(target, draft_ids: torch.Tensor, warm_start: str, warm_output: bool = False) -> Eagle3Head:
    """Head shaped like one target layer, on the host; lm_head/norm = the target's (draft rows).

    draft_ids: [Vd] long on the host; ``target`` may sit on any device.

    ``warm_start``: a head dir whose fc / midlayer weights are copied (its draft vocabulary
    may differ: lm_head rows come from the target). ``warm_output``: also copy its lm_head and
    norm (a head trained with ``--train-lm-head``); its draft vocabulary must then be the same."""
    tc = target.config
    cfg = Eagle3Config(
        hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, intermediate_size=tc.intermediate_size,
        vocab_size=tc.vocab_size, draft_vocab_size=len(draft_ids), target_hidden_size=tc.hidden_size,
        head_dim=getattr(tc, "head_dim", None), rms_norm_eps=tc.rms_norm_eps,
        rope_theta=tc.rope_parameters.get("rope_theta", 10000.0), max_position_embeddings=tc.max_position_embeddings,
    )
    head = Eagle3Head(cfg)
    with torch.no_grad():
        head.d2t.copy_(draft_ids - torch.arange(len(draft_ids)))
        head.t2d.zero_()
        head.t2d[draft_ids] = True
        head.lm_head.weight.copy_(target.lm_head.weight[draft_ids.to(target.lm_head.weight.device)])
        head.norm.weight.copy_(target.model.norm.weight)
        if warm_start:
            from safetensors.torch import load_file

            state = dequantize_int8(load_file(str(Path(warm_start) / "model.safetensors")))
            keep = {k: v.float() for k, v in state.items() if k.startswith(("fc.", "midlayer."))}
            if warm_output:
                if "d2t" not in state or not torch.equal(state["d2t"].long(), head.d2t.long()):
                    raise ValueError(f"warm start {warm_start}: --train-lm-head continues a head with the same "
                                     "draft vocabulary; this one's differs (drop --train-lm-head or the warm start)")
                keep.update({k: state[k].float() for k in ("lm_head.weight", "norm.weight")})
            missing = head.load_state_dict(keep, strict=False)
            if missing.unexpected_keys:
                raise ValueError(f"warm start {warm_start}: unexpected keys {missing.unexpected_keys}")
    return head


def saved_head(head_dir: str, target, device) -> Eagle3Head:
    """A saved head (official layout) for ``target``, fp32 on ``device``, via the project's loader."""
    return load_eagle3_drafter(head_dir, target, device=device, dtype=torch.float32).head
