"""What the mechanisms and the method plug-ins read of a decoder's configuration.

:class:`rheo.config.SpecConfig` is the one implementation: it validates itself against the
method registry (:mod:`rheo.methods.registry`), so the registry, the method modules and the
mechanisms (:mod:`rheo.tree`, :mod:`rheo.verify`, :mod:`rheo.expected`, :mod:`rheo.ot`,
:mod:`rheo.mechanism`) annotate with this protocol instead of importing the configuration,
and the configuration sits above all of them in the import graph. The meaning of each
field is documented on ``SpecConfig``.
"""

from __future__ import annotations

from typing import Optional, Protocol


class Spec(Protocol):
    """Read-only view of a decoder's configuration (``rheo.config.SpecConfig``): its fields, and
    ``greedy``."""

    method: str
    k: int
    m: int
    depth: int
    tree_size: int
    temperature: float
    sparse_top: Optional[int]
    proxy: str
    proxy_value: float
    verify_order: str
    proxy_eps: float
    branching: Optional[tuple[int, ...]]
    replacement: bool
    rank: str
    probe_min: float
    adapt: str
    verifier: str
    engine: str

    @property
    def greedy(self) -> bool: ...
