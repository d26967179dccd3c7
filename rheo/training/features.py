"""Target features for draft-head training, computed from the corpus and cached on disk.

For every token position of every corpus sequence, one target forward gives

* ``feats``  [T, 3H] fp16: the inputs of decoder layers :func:`eagle3_feature_layers` (the
  EAGLE-3 fused feature; the same definition the tree-scoring adapter uses);
* ``final``  [T, H]  fp16: the target's last normed hidden state (its next-token logits
  are ``lm_head(final)``; soft labels over the draft vocabulary are recomputed from it);
* ``argmax`` [T] int32: the target's argmax next token over the full vocabulary.

They live in flat memory-mapped files under ``cache_dir`` (outside git, ~4.6 KB per
token), indexed like the corpus (``Corpus.offsets``). ``done.npy`` marks finished
sequences, so an interrupted run resumes where it stopped, and ``sums.npy`` holds each
finished sequence's CRC-32, checked when it is read: a truncated file's lost sequences are
computed again (never read as zeros), altered contents are refused; ``meta.json`` pins the corpus
hash, the dtype and the layer ids, and a mismatch rebuilds nothing silently: it refuses.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zlib
from pathlib import Path
from typing import Dict, Iterator, List

import numpy as np
import torch
from tqdm import tqdm

from rheo.io import atomic_write, atomic_write_text
from rheo.models.hf_target import eagle3_feature_layers
from rheo.training.corpus import Corpus, read_shard, shard_files

log = logging.getLogger(__name__)


def _open(path: Path, dtype, shape, create: bool) -> np.memmap:
    if create:  # (then opened "r+": "w+" would truncate the reserved file)
        reserve(path, int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return np.memmap(path, dtype=dtype, mode="r+" if create or path.exists() else "r", shape=shape)


def reserve(path: Path, size: int) -> None:
    """Allocate ``size`` bytes of ``path`` on disk now (data already there is kept): a full disk is
    an OSError naming the folder here, not a bus error when a memory-mapped page is first written."""
    new = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if new:
            path.unlink()
        free = shutil.disk_usage(path.parent).free
        raise OSError(f"feature cache {path.parent}: cannot reserve {size / 1e9:.2f} GB for {path.name} "
                      f"({e.strerror}; {free / 1e9:.2f} GB free): free space there or choose another "
                      f"--features folder") from None
    finally:
        os.close(fd)


class CorruptFeaturesError(ValueError):
    """Cached features that are not what was written."""

    user_error = True  # rheo.cli: one line, no traceback


def forget_truncated(cache: "FeatureCache", path: Path, row_bytes: int) -> None:
    """Mark as not done every finished sequence of ``cache`` whose rows lie beyond the end of
    ``path`` (truncated by a crash or a copy), so they are computed again instead of read as zeros;
    a file longer than the corpus needs is refused."""
    if not path.exists():
        return
    need, size = int(cache.corpus.offsets[-1]) * row_bytes, path.stat().st_size
    if size > need:
        raise CorruptFeaturesError(f"feature cache {path} holds {size} bytes, the corpus needs {need}: not this "
                                   f"corpus's cache; delete {path.parent} to rebuild it")
    lost = cache.done & (cache.corpus.offsets[1:] * row_bytes > size)
    if lost.any():
        log.warning("feature cache %s holds %d of %d bytes (truncated): %d finished sequences will be computed "
                    "again", path, size, need, int(lost.sum()))
        cache.done[lost], cache.sums[lost] = False, -1


class FeatureCache:
    """Memory-mapped feats / final / argmax for one corpus."""

    def __init__(self, folder: Path | str, corpus: Corpus, hidden: int, meta: Dict, create: bool = False):
        self.folder = Path(folder)
        self.corpus = corpus
        n_tok = int(corpus.offsets[-1])
        meta_path = self.folder / "meta.json"
        if meta_path.exists():
            old = json.loads(meta_path.read_text())
            if old != meta:
                raise ValueError(f"feature cache {self.folder} was built for {old}, not {meta}: "
                                 f"delete the folder to rebuild it")
        elif create:
            atomic_write_text(meta_path, json.dumps(meta, indent=1))
        else:
            raise FileNotFoundError(f"no feature cache in {self.folder}: run scripts/train_draft.py --features-only")
        done_path, sums_path = self.folder / "done.npy", self.folder / "sums.npy"
        self.done = np.load(done_path) if done_path.exists() else np.zeros(len(corpus), dtype=bool)
        self.sums = np.load(sums_path) if sums_path.exists() else np.full(len(corpus), -1, dtype=np.int64)
        layout = (("feats.f16", np.float16, 3 * hidden), ("final.f16", np.float16, hidden), ("argmax.i32", np.int32, 1))
        for name, dtype, width in layout:  # before reserving: that would zero-fill a truncated file
            forget_truncated(self, self.folder / name, width * np.dtype(dtype).itemsize)
        self.feats = _open(self.folder / "feats.f16", np.float16, (n_tok, 3 * hidden), create)
        self.final = _open(self.folder / "final.f16", np.float16, (n_tok, hidden), create)
        self.argmax = _open(self.folder / "argmax.i32", np.int32, (n_tok,), create)

    def save_done(self) -> None:
        """Flush the features, record the checksum of every newly finished sequence, then mark them done."""
        for m in (self.feats, self.final, self.argmax):
            m.flush()
        for s in np.flatnonzero(self.done & (self.sums < 0)):
            self.sums[s] = self.checksum(int(s))
        atomic_write(self.folder / "sums.npy", lambda f: np.save(f, self.sums))
        atomic_write(self.folder / "done.npy", lambda f: np.save(f, self.done))

    def checksum(self, s: int) -> int:
        """CRC-32 of sequence ``s``'s feats, final and argmax rows as stored."""
        a, b = int(self.corpus.offsets[s]), int(self.corpus.offsets[s + 1])
        crc = 0
        for m in (self.feats, self.final, self.argmax):
            crc = zlib.crc32(np.ascontiguousarray(m[a:b]).tobytes(), crc)
        return crc

    def sequence(self, s: int) -> Dict[str, torch.Tensor]:
        """Sequence ``s``'s tokens and features; CorruptFeaturesError when they are not what was written."""
        if self.done[s] and self.sums[s] >= 0 and self.checksum(s) != self.sums[s]:
            raise CorruptFeaturesError(f"feature cache {self.folder}: sequence {s} differs from the checksum "
                                       f"recorded when it was written (a feature file truncated, overwritten or "
                                       f"zero-filled): delete {self.folder} and rerun scripts/train_draft.py "
                                       f"--features-only")
        a, b = int(self.corpus.offsets[s]), int(self.corpus.offsets[s + 1])
        return dict(
            input_ids=torch.from_numpy(self.corpus.tokens[a:b].astype(np.int64)),
            features=torch.from_numpy(np.asarray(self.feats[a:b])),
            final=torch.from_numpy(np.asarray(self.final[a:b])),
            argmax=torch.from_numpy(np.asarray(self.argmax[a:b]).astype(np.int64)),
            resp_start=int(self.corpus.resp_start[s]),
        )


def length_batches(lengths: np.ndarray, order: List[int], max_tokens: int) -> Iterator[List[int]]:
    """Consecutive runs of ``order`` whose padded size (count x longest) stays <= max_tokens."""
    cur: List[int] = []
    width = 0
    for s in order:
        n = int(lengths[s])
        if cur and max(width, n) * (len(cur) + 1) > max_tokens:
            yield cur
            cur, width = [], 0
        cur.append(s)
        width = max(width, n)
    if cur:
        yield cur


def import_shard_features(cache: FeatureCache, shard_dir: Path | str) -> int:
    """Copy the features kept during generation (``<shard>.feats.npz``) into the cache.

    Shards are walked in packing order; each shard's token ids must equal the corpus
    sequences they map to (else the corpus was packed from other shards: refuse).
    Returns the number of sequences imported.
    """
    corpus, s0, imported = cache.corpus, 0, 0
    for f in shard_files(shard_dir):
        if s0 >= len(corpus):  # the corpus holds the first passes only
            break
        samples = read_shard(f)["samples"]
        s1 = s0 + len(samples)
        for i, smp in enumerate(samples):
            if s0 + i >= len(corpus) or corpus.sequence(s0 + i).tolist() != smp["prompt"] + smp["response"]:
                raise ValueError(f"{f}: sample {i} differs from corpus sequence {s0 + i}: the corpus was not "
                                 f"packed from {shard_dir}; drop --shard-features")
        npz = f.with_name(f"{f.stem}.feats.npz")
        if npz.exists() and not cache.done[s0:s1].all():
            a, b = int(corpus.offsets[s0]), int(corpus.offsets[s1])
            with np.load(npz) as z:
                if z["feats"].shape[0] != b - a:
                    raise ValueError(f"{npz}: {z['feats'].shape[0]} rows, the shard's sequences hold {b - a} tokens")
                cache.feats[a:b], cache.final[a:b], cache.argmax[a:b] = z["feats"], z["final"], z["argmax"]
            cache.done[s0:s1] = True
            imported += s1 - s0
        s0 = s1
    cache.save_done()
    return imported


@torch.no_grad()
def forward_features(model, seqs: List[np.ndarray], layers) -> List[Dict[str, np.ndarray]]:
    """One right-padded forward over token sequences, on the model's device. Per sequence (host
    numpy): feats [n, 3H] fp16, final [n, H] fp16, argmax [n] int32 (see the module docstring)."""
    width = max(len(q) for q in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)  # [B, W]
    attn = torch.zeros_like(ids)
    for i, q in enumerate(seqs):
        ids[i, : len(q)] = torch.from_numpy(np.asarray(q, dtype=np.int64))
        attn[i, : len(q)] = 1
    dev = next(model.parameters()).device
    out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), output_hidden_states=True)
    hs = out.hidden_states  # L+1 tensors [B, W, H]; hs[i] is the input of layer i, hs[-1] the normed output
    feats = torch.cat([hs[i] for i in layers], dim=-1).to(torch.float16).cpu()  # [B, W, 3H]
    final = hs[-1].to(torch.float16).cpu()  # [B, W, H]
    argmax = out.logits.argmax(-1).to(torch.int32).cpu()  # [B, W]
    return [dict(feats=feats[i, : len(q)].numpy(), final=final[i, : len(q)].numpy(),
                 argmax=argmax[i, : len(q)].numpy()) for i, q in enumerate(seqs)]


def build_features(model, cache: FeatureCache, max_tokens: int = 8192, dtype: torch.dtype = torch.bfloat16,
                   first: int = 0) -> None:
    """Fill every sequence not yet marked done (longest first, so memory peaks early); with
    ``first``, only the corpus's first ``first`` sequences (what a run on them reads)."""
    corpus = cache.corpus
    lengths = corpus.lengths()
    layers = eagle3_feature_layers(model.config.num_hidden_layers)
    upto = min(first, len(corpus)) if first else len(corpus)
    todo = sorted((s for s in range(upto) if not cache.done[s]), key=lambda s: -lengths[s])
    model = model.to(dtype)
    bar = tqdm(total=int(lengths[todo].sum()) if todo else 0, desc="target features", unit="tok", mininterval=20)
    for batch in length_batches(lengths, todo, max_tokens):
        for s, f in zip(batch, forward_features(model, [corpus.sequence(s) for s in batch], layers)):
            a, n = int(corpus.offsets[s]), int(lengths[s])
            cache.feats[a : a + n], cache.final[a : a + n], cache.argmax[a : a + n] = f["feats"], f["final"], f["argmax"]
            cache.done[s] = True
        cache.save_done()
        bar.update(int(lengths[batch].sum()))
    bar.close()
