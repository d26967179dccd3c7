"""Row keys: the committed archives rehash from their own columns, and a new SpecConfig field
reaches the method node, the row columns and the key with no other edit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from eval.conf import schema
from eval.store import keys, storage
from rheo.config import SpecConfig
from rheo.methods import get_method, register, unregister

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("archive", ["runs.parquet", "speed.parquet", "sampled_studies.parquet"])
def test_every_committed_row_rehashes_from_its_columns(archive):
    """The key a row was hashed from is its run columns plus its method's fields (an option keyed
    only when set, rheo.config.KEY_WHEN_SET, is None in rows that leave it at its default or
    predate it); only the dtype is ambiguous: the key holds the configured one (None = the
    model's default), the row the one the model ran in."""
    rows = {r["config_hash"]: r for r in pq.read_table(ROOT / "results" / archive).to_pylist()}
    assert len(rows) >= {"runs.parquet": 2}.get(archive, 10)  # the main table: Top-K and Rheo m=1
    for chash, r in rows.items():
        spec = SpecConfig.for_method(method=r["method"], temperature=r["temperature"],
                          **{f: r[f] for f in get_method(r["method"]).fields if r.get(f) is not None})
        found = {keys.config_hash(keys.method_key(
            spec, model=r["model"], device=r["device"], dtype=dtype, seed=r["seed"],
            max_new_tokens=r["max_new_tokens"], target_path=r["target_path"], head_path=r["head_path"],
            paired_with=r["paired_with"])) for dtype in (r["dtype"], None)}
        assert chash in found, (archive, r["method"], chash)


@dataclasses.dataclass(frozen=True)
class _WithTilt(SpecConfig):
    """SpecConfig plus one parameter, as a new line in rheo/config.py would add it."""

    tilt: float = 0.5


def test_a_new_spec_field_reaches_the_method_node_the_row_columns_and_the_key():
    node = OmegaConf.structured(schema.method_conf_type(_WithTilt))
    assert OmegaConf.merge(node, {"name": "topk", "tilt": 0.25}).tilt == 0.25  # its YAML default
    with pytest.raises(ValidationError):
        OmegaConf.merge(node, {"name": "topk", "tilt": "steep"})
    assert ("tilt", pa.float64()) in storage.method_columns(_WithTilt)
    register(dataclasses.replace(get_method("topk"), name="tilted", fields=get_method("topk").fields + ("tilt",)))
    try:
        run = dict(model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=8)
        key = keys.method_key(_WithTilt(method="tilted", tilt=0.25), **run)
        assert key["tilt"] == 0.25
        assert keys.config_hash(key) != keys.config_hash(keys.method_key(_WithTilt(method="tilted", tilt=0.3), **run))
        assert "tilt" not in keys.method_key(_WithTilt(method="topk"), **run)  # other methods' keys stay
        with pytest.raises(ValueError, match="method='topk' does not read tilt=0.25"):  # and refuse a value of it
            _WithTilt(method="topk", tilt=0.25)
    finally:
        unregister("tilted")


def test_the_run_and_the_gpu_check_share_one_keys_module():
    from eval.device import devcheck

    assert devcheck.method_key is keys.method_key and devcheck.config_hash is keys.config_hash
    assert devcheck.SUITE_FILES is keys.SUITE_FILES and schema.SUITE_FILES is keys.SUITE_FILES
