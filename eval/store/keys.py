"""What names a result row, without Hydra: suite files, generation seeds, method keys, config hashes.

The runner (``eval.run``, through :mod:`eval.conf.schema`) and the GPU check
(:mod:`eval.device.devcheck`, which must run without Hydra) both key and hash their rows
here, so a row means the same whichever wrote it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional, Sequence

from rheo.config import SpecConfig, method_parameters
from rheo.methods import get_method
from rheo.models.catalog import MODELS
from rheo.models.locate import head_fingerprint, target_fingerprint
from rheo.models.weights import sampled_fingerprint, weights_fingerprint

#: harness suite name -> file under data_dir (file names as in the EAGLE repository)
SUITE_FILES = {
    "alpaca": "alpaca.jsonl",
    "gsm8k": "gsm8k.jsonl",
    "humaneval": "humaneval.jsonl",
    "mt_bench": "mt_bench.jsonl",
    "nq": "qa.jsonl",
    "cnn_dm": "sum.jsonl",
}
#: method parameters in every method's key (None when the method does not read them): rheo.config.IN_EVERY_KEY
EVERY_KEY_FIELDS = tuple(f.name for f in method_parameters() if f.metadata.get("in_every_key"))


def method_key(spec: SpecConfig, *, model: str, device: str, dtype: Optional[str], seed: int,
               max_new_tokens: int, target_path: Optional[str] = None, head_path: Optional[str] = None,
               paired_with: Optional[str] = None, draft_mix: Optional[float] = None,
               draft_temp: Optional[float] = None,
               chat_format: Optional[str] = None, eos_tokens: Optional[Sequence[str]] = None,
               protocol: str = "template") -> dict:
    """Everything that determines the rows of one method: hashed into config_hash.

    A drafting method's key also holds ``head_sha``, the fingerprint of the head's weight files
    (``rheo.models.locate.head_fingerprint``): rows of a replaced head are never resumed.
    Parameters a method does not read are None (Top-K has no m, AR has no tree), so e.g. a sweep
    over m reuses the Top-K and AR rows. The parameters a method reads are its registered ``fields``.
    ``paired_with``: the config hash of the method config an AR row was timed next to.
    ``draft_mix``: the draft-quality dial (rheo.models.mixture), in the key only when set.
    ``draft_temp``: the head's draft temperature (rheo.models.scaled), in the key only when set.
    ``chat_format``, ``eos_tokens``: a model's prompt format and turn ends when set (a pair of your
    own, or a catalog pair's overridden), in the key only then. A pair outside the catalog is
    fingerprinted by the weight files in its ``head_path``.
    ``spec.engine`` (rheo.engine), in the key only when not "eager": rows of two engines never pool.
    ``protocol`` (rheo.models.protocol), in the key only when not "template" (the committed rows').
    """
    method = get_method(spec.method)
    key = {
        "model": model, "target_path": target_path, "head_path": None if method.is_reference else head_path,
        "device": device, "dtype": dtype, "method": spec.method, "temperature": float(spec.temperature),
        "seed": int(seed), "max_new_tokens": int(max_new_tokens), **dict.fromkeys(EVERY_KEY_FIELDS),
        "paired_with": paired_with,
    }
    key.update({f: _plain(getattr(spec, f)) for f in method.fields if not _at_default(spec, f)})
    if draft_mix is not None and not method.is_reference:
        key["draft_mix"] = float(draft_mix)
    target_sha = _target_sha(model, target_path)
    if target_sha is not None:
        key["target_sha"] = target_sha
    if draft_temp is not None and not method.is_reference:
        key["draft_temp"] = float(draft_temp)
    if chat_format is not None:
        key["chat_format"] = str(chat_format)
    if eos_tokens is not None:
        key["eos_tokens"] = [str(t) for t in eos_tokens]
    if protocol != "template":  # the committed rows' protocol leaves their keys as they were
        key["protocol"] = str(protocol)
    if spec.engine != "eager":  # the reference engine leaves every earlier key as it was
        key["engine"] = spec.engine
    if not method.is_reference and model in MODELS:  # the head's weights, not only its path
        key["head_sha"] = head_fingerprint(model, head_path)
    elif not method.is_reference and head_path:  # a pair of your own
        key["head_sha"] = weights_fingerprint(Path(head_path).expanduser())
    return key


def _target_sha(model: str, target_path: Optional[str]) -> Optional[str]:
    """The fingerprint of a target the user chose (method_key's ``target_sha``), None for the catalog's own."""
    if model in MODELS:
        return target_fingerprint(model, target_path)
    if target_path and Path(target_path).expanduser().is_dir():  # a pair of your own
        return sampled_fingerprint(Path(target_path).expanduser())
    return None


def _at_default(spec: SpecConfig, name: str) -> bool:
    """A KEY_WHEN_SET parameter (rheo.config) left at its default: kept out of the key, so the rows
    keyed before it existed keep their hashes."""
    f = type(spec).__dataclass_fields__[name]
    return bool(f.metadata.get("key_when_set")) and getattr(spec, name) == f.default


def _plain(value):
    """A key value as JSON stores it (a static tree's branching tuple as a list)."""
    return list(value) if isinstance(value, tuple) else value


def config_hash(key: dict) -> str:
    blob = json.dumps(key, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def generation_seed(suite: str, item_id: int, turn: int, seed: int) -> int:
    """Seed of the torch.Generator for one (suite, item, turn, seed): same for every method."""
    blob = f"{suite}/{item_id}/{turn}/{seed}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:7], "little")
