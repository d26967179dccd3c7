"""Presets: named bundles of SpecConfig fields, the one place where a recommended setting is written.

    SpecConfig.preset("rheo_auto", temperature=0.7)          # the library
    rheo generate "..." --method rheo_auto                     # the command line
    python -m eval.run method=rheo_auto                        # the harness (configs/method/rheo_auto.yaml)

A preset is a registered method (``method``) with some of its fields fixed; everything it leaves
out keeps SpecConfig's default (the paper's tree). The harness's YAML of a preset must compose to
the same SpecConfig (tests/test_presets.py checks each entry against its file). A new preset is one
entry below and one file ``configs/method/<name>.yaml``. This module holds data only: SpecConfig
reads it (rheo.config), it reads nothing of the project.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

#: name -> the SpecConfig fields it fixes (``method`` always among them)
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    # Rheo m=1 with the tempered proxy: the paper's rule at T = 1, Top-K's tree as T -> 0
    # (docs/algorithm.md; judged against the paper's m=0 and m=1 in docs/results.md)
    "rheo_auto": MappingProxyType({"method": "rheo", "m": 1, "proxy": "tempered"}),
    # per request, Rheo m=0 while the earlier cycles' roots favour the sampled child, else rheo_auto's
    # settings (rheo.adaptive; docs/algorithm.md; judged cell by cell in docs/results.md)
    "rheo_adaptive": MappingProxyType({"method": "rheo", "m": 1, "proxy": "tempered", "adapt": "root"}),
    # per request, Rheo m=0 while the earlier cycles' roots say the drafter is good (a sampled child is
    # accepted at least rheo.adaptive.LEVEL of the time), else rheo_auto's settings (docs/algorithm.md)
    "rheo_level": MappingProxyType({"method": "rheo", "m": 1, "proxy": "tempered", "adapt": "level"}),
})


def preset_fields(name: str, **overrides: Any) -> dict[str, Any]:
    """The SpecConfig fields of preset ``name`` with ``overrides`` on top (ValueError naming the presets)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    if "method" in overrides and overrides["method"] != PRESETS[name]["method"]:
        raise ValueError(f"preset {name!r} is method {PRESETS[name]['method']!r}; drop method={overrides['method']!r} "
                         f"or build SpecConfig(method=...) directly")
    return {**PRESETS[name], **overrides}
