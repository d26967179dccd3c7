"""What a run's config resolves before any key is made: its prompt protocol and its weights dtype
(eval.conf.schema re-exports both; rheo.models.protocol, rheo.cpu_dtype)."""

from __future__ import annotations

from omegaconf import DictConfig

from rheo.cpu_dtype import DtypeChoice
from rheo.models.protocol import check_protocol, default_protocol, dtype_choice


def run_protocol(cfg: DictConfig) -> str:
    """The run's prompt protocol: ``protocol``, or the model's own (rheo.models.protocol.default_protocol)."""
    given = cfg.get("protocol")
    return check_protocol(default_protocol(cfg.model.name) if given is None else str(given))


def run_dtype(cfg: DictConfig) -> DtypeChoice:
    """The dtype a run loads its pair in and keys its rows by, and why: ``dtype=auto`` is resolved by the
    CPU's bf16 instructions (rheo.cpu_dtype) before any key is made, so that one config hash never
    stands for two precisions; a study that pins its dtype keeps it (and its committed hashes). Under
    ``protocol=eagle3`` a paper model's ``dtype=auto`` is the protocol's (float16)."""
    return dtype_choice(cfg.dtype, cfg.device, cfg.model.name, run_protocol(cfg))
