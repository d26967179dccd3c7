"""Counting what one decoding cycle asks of a device: aten ops dispatched and host syncs, per phase.

On a GPU in eager mode, nearly every aten op the Python code dispatches is one kernel launch
(a few microseconds of host work each, whatever its size), and every host sync stalls the queue
until the device has caught up. For small batches these two, not arithmetic, set the time of a
cycle; both can be counted on any CPU, with the same code path.

* **op**: an aten op seen by a :class:`~torch.utils._python_dispatch.TorchDispatchMode`, except the
  metadata-only ones (:data:`METADATA_OPS`: views, expands, transposes, slices, selects, splits,
  detach, alias, allocations without a fill), which launch nothing.
* **sync**: an op or call that makes the host wait for the device (:func:`is_sync`):
  ``_local_scalar_dense`` (``.item()``, ``int()``, ``bool()``, ``float()`` of a tensor), ``nonzero``,
  ``masked_select``, ``unique``, ``equal``, indexing with a boolean mask (its size is only known on
  the device), ``repeat_interleave`` with tensor repeats and no output size, a copy from a device to
  the host; plus every ``Tensor.tolist()`` / ``Tensor.numpy()`` call (one transfer each; on a CPU
  they dispatch nothing, so they are counted at the Python call).

Phases are those of :mod:`rheo.timing` (draft, build, score, verify, commit, other; prefill apart):
:class:`CountingTimer` is a :class:`~rheo.timing.PhaseTimer` that also tells the counter which phase
runs. ``tree`` marks contain ``draft`` marks; what is counted in a tree mark outside draft is build.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rheo.timing import PhaseTimer

#: aten op name prefixes that only change a tensor's metadata (no kernel): not counted as ops
METADATA_OPS = ("aten.detach", "aten.view", "aten._unsafe_view", "aten.alias", "aten.t.", "aten.expand",
                "aten.unsqueeze", "aten.squeeze", "aten.slice", "aten.select.", "aten.permute", "aten.transpose",
                "aten.as_strided", "aten.lift_fresh", "aten.empty", "aten.unbind", "aten.split", "aten.chunk",
                "aten.narrow")
#: aten ops that always wait for the device
SYNC_OPS = ("aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
            "aten.equal.default", "aten._unique.default", "aten._unique2.default", "aten.unique_dim.default",
            "aten.unique_consecutive.default")
#: phase names of the timer's marks -> reported phase (``tree`` outside ``draft`` is build)
PHASE_OF_MARK = {"tree": "build", "tree/draft": "draft", "score": "score", "verify": "verify",
                 "commit": "commit", "prefill": "prefill"}


def _is_bool_index(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in (torch.bool, torch.uint8)


def is_sync(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the aten op ``name`` called with ``args``/``kwargs`` makes the host wait (module docstring)."""
    if name in SYNC_OPS:
        return True
    if name.startswith(("aten.index.Tensor", "aten.index_put")):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(_is_bool_index(i) for i in (indices or ()))
    if name == "aten.repeat_interleave.Tensor" or name == "aten.repeat_interleave.self_Tensor":
        return kwargs.get("output_size") is None
    if name in ("aten._to_copy.default", "aten.copy_.default"):
        src = args[1] if name == "aten.copy_.default" else args[0]
        dst_dev = args[0].device if name == "aten.copy_.default" else kwargs.get("device")
        return (isinstance(src, torch.Tensor) and src.device.type != "cpu" and dst_dev is not None
                and torch.device(dst_dev).type == "cpu")
    return False


class OpCounter(TorchDispatchMode):
    """Counts ops and syncs per phase while active (``with counter:``); ``by_name`` keeps
    (phase, op name) counts of ops and (phase, "sync " + name) counts of syncs, to find where they go."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "other"
        self.ops: Counter = Counter()  # phase -> ops
        self.syncs: Counter = Counter()  # phase -> syncs
        self.by_name: Counter = Counter()  # (phase, op name) -> ops
        self._kind: dict = {}  # OpOverload -> (name, counted)
        self._saved: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        known = self._kind.get(func)
        if known is None:
            name = str(func)
            known = self._kind[func] = (name, not name.startswith(METADATA_OPS))
        name, counted = known
        if counted:
            self.ops[self.phase] += 1
            self.by_name[(self.phase, name)] += 1
        if is_sync(name, args, kwargs):
            self.syncs[self.phase] += 1
            self.by_name[(self.phase, "sync " + name)] += 1
        return func(*args, **kwargs)

    def _host_read(self, method: str):
        original = self._saved[method]

        def read(tensor, *args, **kwargs):
            self.syncs[self.phase] += 1
            self.by_name[(self.phase, "sync " + method)] += 1
            return original(tensor, *args, **kwargs)
        return read

    def __enter__(self):
        for method in ("tolist", "numpy"):
            self._saved[method] = getattr(torch.Tensor, method)
            setattr(torch.Tensor, method, self._host_read(method))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for method, original in self._saved.items():
                setattr(torch.Tensor, method, original)
            self._saved = {}


class CountingTimer(PhaseTimer):
    """A PhaseTimer that also sets ``counter.phase`` (nested marks as ``outer/inner``)."""

    def __init__(self, counter: OpCounter, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        self.counter = counter

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        outer = self.counter.phase
        self.counter.phase = name if outer == "other" else f"{outer}/{name}"
        try:
            with super().phase(name):
                yield
        finally:
            self.counter.phase = outer


def per_phase(counts: Counter) -> dict[str, int]:
    """Counts by mark (``tree``, ``tree/draft``, ...) -> by reported phase (module docstring)."""
    out: Counter = Counter()
    for mark, n in counts.items():
        out[PHASE_OF_MARK.get(mark, "other")] += n
    return dict(out)
