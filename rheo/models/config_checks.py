"""Typed range checks of a head's config.json, before anything is allocated.

A value of the wrong type or out of range (0 attention heads, ``"576"`` as a size, a
``draft_vocab_size`` of billions, an unknown RoPE type) would otherwise surface as a
ZeroDivisionError, a TypeError or an allocation of hundreds of GB deep inside the loader.
"""

from __future__ import annotations

import numbers
from typing import Any

#: sizes of a draft head (the largest public EAGLE-3 heads are far below these)
LIMITS = {"hidden_size": 1 << 16, "num_attention_heads": 1 << 10, "num_key_value_heads": 1 << 10,
          "intermediate_size": 1 << 18, "vocab_size": 1 << 22, "draft_vocab_size": 1 << 22,
          "target_hidden_size": 1 << 16, "max_position_embeddings": 1 << 24}
REQUIRED = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


class HeadConfigError(ValueError):
    """A head config.json value of the wrong type or out of range."""

    user_error = True  # rheo.cli: one line, no traceback


def check_head_config_values(d: Any, where: str = "head config.json") -> None:
    """HeadConfigError naming the key, the value and the fix for the first bad entry of ``d``."""
    if not isinstance(d, dict):
        raise HeadConfigError(f"{where} must be a JSON object, got {type(d).__name__}: restore the head's config.json")
    for key in REQUIRED:
        if d.get(key) is None:
            raise HeadConfigError(f"{where}: no {key}: an EAGLE-3 head config needs {list(REQUIRED)}")
    for key, limit in LIMITS.items():
        value = d.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= limit:
            raise HeadConfigError(f"{where}: {key} must be an integer in [1, {limit}], got {type(value).__name__} "
                                  f"{value!r:.40}: fix the head's config.json")
    if d["hidden_size"] % d["num_attention_heads"]:
        raise HeadConfigError(f"{where}: hidden_size {d['hidden_size']} is not a multiple of num_attention_heads "
                              f"{d['num_attention_heads']}")
    for key in ("rope_scaling", "rope_parameters"):
        rope = d.get(key)
        if isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) not in ROPE_TYPES:
            raise HeadConfigError(f"{where}: {key}.rope_type {rope.get('rope_type', rope.get('type'))!r} is not one "
                                  f"of {list(ROPE_TYPES)}")
