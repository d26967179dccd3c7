"""HSD (Hierarchical Speculative Decoding) on static trees and chains (:mod:`rheo.hsd`).

* ``hsd``: a static tree (``branching``, ``replacement`` as for ``static``) verified by HSD;
  ``branching = (k, 1, .., 1)`` with ``replacement=True`` is the paper's multi-draft setting
  (k chains drawn independently, sharing only the root), ``(1,) * depth`` its single chain.
* ``hsd_chain``: one drafted chain of ``depth`` tokens verified by HSD (the paper's main
  setting); the same drafts as ``chain``, so the two compare on the same states.

* ``rheo_hsd``: Rheo's tree (leads, one sample, fills; the same fields as ``rheo``) verified by
  HSD: each node's sample first, as a chain through the samples below it, then the point
  masses. Lossless because a sample's survival never depends on its value (docs/algorithm.md).

Same trees and same randomness while drafting as ``static`` / ``chain`` / ``rheo``; only the
verifier differs. On Top-K's tree HSD is Top-K's own verifier (tests), so no method is
registered for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rheo.hsd import hsd_path_probs, verify_hsd
from rheo.methods.registry import Method, register
from rheo.methods.rheo import _validate as _validate_rheo
from rheo.methods.rheo import rheo_candidates, rule_label
from rheo.methods.static import CHAIN_SHAPE, STATIC_SHAPE, _validate_chain, _validate_static
from rheo.methods.topk import DYNAMIC_FIELDS, option_label
from rheo.ot import rheo_sets, static_sets
from rheo.tree import build_dynamic_tree

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.spec import Spec


def _hsd_label(row) -> str:
    shape = ",".join(str(int(b)) for b in row.branching)
    return f"hsd {'specinfer' if row.replacement else 'rsd'} ({shape})"


def _hsd_pretty(variant: str) -> str:
    _, rule, shape = variant.split(" ", 2)
    return f"HSD {'SpecInfer' if rule == 'specinfer' else 'RSD'} {shape}"


def _root_sets(cfg: "Spec"):
    return static_sets(cfg.branching[0])


register(Method(
    name="hsd", display="HSD", kind="static", candidates=STATIC_SHAPE.candidates, build=STATIC_SHAPE.build,
    verify=verify_hsd, fields=("branching", "replacement", "sparse_top"), validate=_validate_static,
    max_children=lambda cfg: max(cfg.branching), label=_hsd_label, pretty=_hsd_pretty, path_probs=hsd_path_probs,
    candidate_sets=lambda dist, cfg: _root_sets(cfg)(dist, cfg)))

register(Method(
    name="hsd_chain", display="HSD chain", kind="static", candidates=CHAIN_SHAPE.candidates,
    build=CHAIN_SHAPE.build, verify=verify_hsd, fields=("depth", "sparse_top"), validate=_validate_chain,
    max_children=lambda cfg: 1, label=lambda row: f"hsd_chain d={int(row.depth)}", path_probs=hsd_path_probs,
    candidate_sets=static_sets(1)))


def _validate_rheo_hsd(cfg: "Spec") -> None:
    _validate_rheo(cfg)
    if cfg.proxy == "fixed":
        raise ValueError("proxy='fixed' lets whether a sample survives pruning depend on its value, which no verifier "
                         "of the tree can undo: give proxy='rheo' or proxy='tempered' with method='rheo_hsd'")


def _rheo_hsd_label(row) -> str:
    """'rheo_hsd m=1' (Rheo's rule label under this name; the verify order is not read: samples first)."""
    rule = rule_label(row.m, "stochastic_first", row.proxy, getattr(row, "adapt", None))
    return "rheo_hsd" + rule[len("rheo"):] + option_label(row)


register(Method(
    name="rheo_hsd", display="Rheo+HSD", kind="dynamic", candidates=rheo_candidates, build=build_dynamic_tree,
    verify=verify_hsd, fields=DYNAMIC_FIELDS + ("m", "proxy", "probe_min", "adapt"), validate=_validate_rheo_hsd,
    label=_rheo_hsd_label, path_probs=hsd_path_probs, candidate_sets=rheo_sets))
