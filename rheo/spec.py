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
    """Read-only view of a decoder's configuration (``rheo.config.SpecConfig``)."""

    @property
    def method(self) -> str: ...

    @property
    def k(self) -> int: ...

    @property
    def m(self) -> int: ...

    @property
    def depth(self) -> int: ...

    @property
    def tree_size(self) -> int: ...

    @property
    def temperature(self) -> float: ...

    @property
    def sparse_top(self) -> Optional[int]: ...

    @property
    def proxy(self) -> str: ...

    @property
    def proxy_value(self) -> float: ...

    @property
    def verify_order(self) -> str: ...

    @property
    def proxy_eps(self) -> float: ...

    @property
    def branching(self) -> Optional[tuple[int, ...]]: ...

    @property
    def replacement(self) -> bool: ...

    @property
    def rank(self) -> str: ...

    @property
    def probe_min(self) -> float: ...

    @property
    def greedy(self) -> bool: ...
