"""Verification methods as plug-ins: one registry (:mod:`rheo.methods.registry`), one module per method.

Built in: ``topk`` (EAGLE-2/3), ``rheo`` (RheoSampling), ``static`` (static stochastic
trees: RSD without replacement, SpecInfer with replacement), ``chain`` (chain
speculative sampling) and ``hsd`` / ``hsd_chain`` (the same static trees and chains verified
by Hierarchical Speculative Decoding). Each module registers its methods when imported; the imports
below, in this order, are the list of built-in methods (tables list methods in
registration order).
"""

from rheo.methods.registry import (Method, build_tree, current_label, get_method, method_names, method_of_variant,
                                   reads, register, select_candidates, unregister, verify_tree)

from rheo.methods import topk  # noqa: E402,F401  (registers topk)
from rheo.methods import rheo  # noqa: E402,F401  (registers rheo)
from rheo.methods import static  # noqa: E402,F401  (registers static, chain)
from rheo.methods import hsd  # noqa: E402,F401  (registers hsd, hsd_chain)

__all__ = ["Method", "build_tree", "current_label", "get_method", "method_names", "method_of_variant", "reads",
           "register", "select_candidates", "unregister", "verify_tree"]
