"""The draft-head training corpus as token ids: pack generated shards, load the packed file.

Packed layout (``data/draft_corpus/corpus.npz``, numpy ``savez_compressed``):

* ``tokens``      [T] uint16, every sequence's prompt ids then response ids, concatenated;
* ``offsets``     [S+1] int64, sequence s is ``tokens[offsets[s]:offsets[s+1]]``;
* ``resp_start``  [S] int32, index (within the sequence) of the first response token;
* ``kind``        [S] uint8, index into :data:`rheo.training.prompts.KINDS`;
* ``temperature`` [S] float32, 0 = greedy;
* ``held_out``    [S] bool, the fixed held-out split (:func:`rheo.training.prompts.is_held_out`).

``manifest.json`` beside it records counts, sizes, the generation commands and a SHA-256
of the packed file; :func:`load_corpus` checks the hash, so a damaged or hand-edited file
is refused with a message instead of training on it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np

from rheo.io import atomic_write, atomic_write_text, make_dir
from rheo.paths import REPO_ROOT
from rheo.training.prompts import KINDS

DEFAULT_DIR = REPO_ROOT / "data" / "draft_corpus"


@dataclass
class Corpus:
    tokens: np.ndarray  # [T] uint16
    offsets: np.ndarray  # [S+1] int64
    resp_start: np.ndarray  # [S] int32
    kind: np.ndarray  # [S] uint8
    temperature: np.ndarray  # [S] float32
    held_out: np.ndarray  # [S] bool

    def __len__(self) -> int:
        return len(self.resp_start)

    def sequence(self, s: int) -> np.ndarray:
        return self.tokens[self.offsets[s] : self.offsets[s + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def response_tokens(self) -> int:
        return int((self.lengths() - self.resp_start).sum())


def pack_samples(samples: List[Dict]) -> Corpus:
    """samples: dicts with prompt, response (lists of ids), kind, temperature, split."""
    seqs = [list(s["prompt"]) + list(s["response"]) for s in samples]
    if max(max(q) for q in seqs) >= 2**16:
        raise ValueError("token ids >= 65536 do not fit the uint16 corpus format")
    lens = np.array([len(q) for q in seqs], dtype=np.int64)
    return Corpus(
        tokens=np.array([t for q in seqs for t in q], dtype=np.uint16),
        offsets=np.concatenate([[0], np.cumsum(lens)]),
        resp_start=np.array([len(s["prompt"]) for s in samples], dtype=np.int32),
        kind=np.array([KINDS.index(s["kind"]) for s in samples], dtype=np.uint8),
        temperature=np.array([s["temperature"] for s in samples], dtype=np.float32),
        held_out=np.array([s["split"] == "heldout" for s in samples], dtype=bool),
    )


PASS_ORDER = {"a": 0, "f": 1, "b": 2}  # generation passes of scripts/gen_corpus.py


def shard_files(shard_dir: Path | str) -> List[Path]:
    """Generation shards (``<pass>_<batch>.json``) in packing order: pass a, f, b, then batch index."""
    files = [f for f in Path(shard_dir).glob("*.json") if f.stem.split("_")[0] in PASS_ORDER]
    return sorted(files, key=lambda f: (PASS_ORDER[f.stem.split("_")[0]], int(f.stem.split("_")[1])))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_corpus(corpus: Corpus, folder: Path, manifest: Dict) -> Path:
    folder = make_dir(folder)
    path = atomic_write(folder / "corpus.npz", lambda f: np.savez_compressed(
        f, **{k: getattr(corpus, k) for k in Corpus.__dataclass_fields__}))
    manifest = dict(manifest, file="corpus.npz", sha256=sha256(path), bytes=path.stat().st_size)
    atomic_write_text(folder / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return path


def load_corpus(folder: Path | str = DEFAULT_DIR) -> Corpus:
    """The packed corpus of ``folder``; a missing, damaged or unreadable file is refused naming it
    (ValueError / FileNotFoundError) and the fix."""
    folder = Path(folder)
    path, man = folder / "corpus.npz", folder / "manifest.json"
    fix = f"restore it with `git checkout -- {folder}` (the committed corpus) or regenerate it (`make corpus`)"
    if not path.exists():
        raise FileNotFoundError(f"no training corpus at {path}: it is committed in the repository "
                                f"(data/draft_corpus/), or regenerate it with `make corpus`")
    if man.exists():
        try:
            want = json.loads(man.read_text()).get("sha256")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{man} is not a JSON object ({type(e).__name__}: {e}): {fix}") from None
        if want and sha256(path) != want:
            raise ValueError(f"{path} does not match the SHA-256 in {man}: the file is damaged or was "
                             f"changed by hand; restore it with `git checkout -- {folder}` or regenerate it")
    try:
        with np.load(path) as z:  # (allow_pickle stays False: arrays only)
            return Corpus(**{k: z[k] for k in Corpus.__dataclass_fields__})
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError, AttributeError) as e:
        raise ValueError(f"{path} is not a readable corpus ({type(e).__name__}: {e}): truncated or "
                         f"damaged; {fix}") from None


def read_shard(path: Path | str) -> Dict:
    """A generation shard (``scripts/gen_corpus.py``; ``.json.gz`` from ``scripts/gen_selfinstruct.py``):
    a JSON object with a ``samples`` list."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        rec = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
        if not isinstance(rec, dict) or not isinstance(rec.get("samples"), list):
            raise ValueError("not an object with a 'samples' list")
    except (ValueError, UnicodeDecodeError, IsADirectoryError, gzip.BadGzipFile, EOFError) as e:
        raise ValueError(f"generation shard {path} is unreadable ({type(e).__name__}: {e}): truncated by a "
                         f"killed writer? Delete it and rerun scripts/gen_corpus.py to regenerate it") from None
    return rec


def concat_corpora(parts: List[Corpus]) -> Corpus:
    """One corpus from several packed parts (e.g. the templated corpus, then the
    self-instructed part), sequences in the order given."""
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for c in parts:
        offsets.append(c.offsets[1:] + base)
        base += int(c.offsets[-1])
    return Corpus(tokens=np.concatenate([c.tokens for c in parts]), offsets=np.concatenate(offsets),
                  resp_start=np.concatenate([c.resp_start for c in parts]),
                  kind=np.concatenate([c.kind for c in parts]),
                  temperature=np.concatenate([c.temperature for c in parts]),
                  held_out=np.concatenate([c.held_out for c in parts]))


def load_corpora(spec: str | Path) -> tuple[Corpus, str]:
    """``spec``: a corpus folder, or several joined by commas (e.g. the templated corpus, then
    ``data/draft_corpus/selfinstruct``), concatenated in that order. Returns (corpus, fingerprint):
    the SHA-256 of a single folder's ``corpus.npz``, or of the parts' hashes joined."""
    folders = [Path(p.strip()) for p in str(spec).split(",") if p.strip()]
    if not folders:
        raise ValueError("--corpus is empty: give a corpus folder (or several, comma-separated)")
    parts = [load_corpus(f) for f in folders]
    shas = [sha256(f / "corpus.npz") for f in folders]
    if len(parts) == 1:
        return parts[0], shas[0]
    return concat_corpora(parts), hashlib.sha256(",".join(shas).encode()).hexdigest()
