"""Where and in what precision weights live: the one dtype map, and device checks.

Both are checked before any weights are read, so a bad value fails with the
name of the setting instead of a torch error after a model has loaded.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = tuple(DTYPES)


def as_dtype(value: Union[None, str, torch.dtype], name: str = "dtype") -> Optional[torch.dtype]:
    """None, a name of :data:`DTYPES` or one of its torch dtypes -> the torch dtype (None stays None).

    Anything else raises ValueError (TypeError for a non-string, non-dtype) naming ``name``.
    """
    if value is None or isinstance(value, torch.dtype) and value in DTYPES.values():
        return value
    if isinstance(value, str):
        if value in DTYPES:
            return DTYPES[value]
        raise ValueError(f"{name} must be one of {list(DTYPES)} (or the torch dtype), got {value!r}")
    if isinstance(value, torch.dtype):
        raise ValueError(f"{name} must be one of {list(DTYPES.values())}, got {value}")
    raise TypeError(f"{name} must be a torch.dtype or one of {list(DTYPES)}, got {type(value).__name__} {value!r}")


def setting(name: str, value: object) -> str:
    """How the user sets ``name`` where they typed it: an option (``--device cpu``), a make variable
    (``DEVICE=cpu``) or a config key and keyword (``device=cpu``)."""
    return f"{name} {value}" if name.startswith("-") else f"{name}={value}"


def _given(name: str, value: object) -> str:
    return f"{name} {value}" if name.startswith("-") else f"{name}={value!r}"


def as_device(value: Union[str, torch.device], name: str = "device") -> torch.device:
    """A device this torch build can use: "cpu", "cuda", "cuda:<i>" (or "mps"); else ValueError naming ``name``
    as the user wrote it (``device`` for a config key, ``--device`` for an option, ``DEVICE`` for make)."""
    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"{name} must be a string like 'cpu' or 'cuda:0', got {type(value).__name__} {value!r}")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{name} {value!r} is not a device name (e.g. cpu, cuda, cuda:0): {e}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no visible CUDA device"
            raise ValueError(f"{_given(name, value)} but CUDA is not usable here ({build}, torch {torch.__version__}); "
                             f"use {setting(name, 'cpu')}")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{_given(name, value)} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif device.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"{_given(name, value)} but MPS is not available in this torch build; use "
                             f"{setting(name, 'cpu')}")
    elif device.type != "cpu":
        raise ValueError(f"{name} must be cpu, cuda, cuda:<index> or mps, got {value!r}")
    return device
