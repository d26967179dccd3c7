"""Model protocol, adapters and the model registry.

The protocol (``rheo.models.base``) is imported eagerly; names that pull in
``transformers`` are imported on first access, so ``import rheo.models.toy``
stays cheap.
"""

from __future__ import annotations

import importlib

from rheo.models.base import (
    DraftModel,
    DraftSession,
    DraftTree,
    TargetModel,
    TargetOutput,
    TargetSession,
    TreeView,
)

_LAZY = {
    "HFTarget": "rheo.models.hf_target",
    "HFTargetSession": "rheo.models.hf_target",
    "make_tiny_llama": "rheo.models.tiny",
    "MODELS": "rheo.models.registry",
    "ModelEntry": "rheo.models.registry",
    "ModelPair": "rheo.models.registry",
    "ModelWeightsNotFoundError": "rheo.models.registry",
    "ModelMismatchError": "rheo.models.registry",
    "get_entry": "rheo.models.registry",
    "load_model_pair": "rheo.models.registry",
}

__all__ = [
    "DraftModel", "DraftSession", "DraftTree", "TargetModel", "TargetOutput", "TargetSession", "TreeView",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rheo.models' has no attribute {name!r}")
