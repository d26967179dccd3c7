"""Model protocol, adapters and the catalog of model pairs (catalog, locate, loading).

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
    "MODELS": "rheo.models.catalog",
    "ModelEntry": "rheo.models.catalog",
    "get_entry": "rheo.models.catalog",
    "ModelWeightsNotFoundError": "rheo.models.locate",
    "ModelPair": "rheo.models.loading",
    "ModelMismatchError": "rheo.models.loading",
    "load_model_pair": "rheo.models.loading",
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
