"""Verification methods as plug-ins: one registry (:mod:`rheo.methods.registry`), one module per method.

Built in: ``topk`` (EAGLE-2/3), ``rheo`` (RheoSampling), ``static`` (static stochastic
trees: RSD without replacement, SpecInfer with replacement), ``chain`` (chain
speculative sampling), ``rheo_seq`` (Rheo's lead-plus-sample children on a static shape,
verified by Traversal Verification) and ``hsd`` / ``hsd_chain`` / ``rheo_hsd`` (static trees, chains and Rheo's
tree verified by Hierarchical Speculative Decoding). Each module registers its methods when imported; the imports
below, in this order, are the list of built-in methods (tables list methods in
registration order). Methods from outside the checkout follow them: the plug-ins of the entry-point
group ``rheo.methods`` and of ``RHEO_PLUGINS=module,...`` (:mod:`rheo.methods.plugins`), loaded here, so
that every process that imports the registry knows them.
"""

from rheo.methods.registry import (Method, build_tree, current_label, get_method, method_names, method_of_variant,
                                   reads, register, select_candidates, unregister, verify_tree)

from rheo.methods import topk  # noqa: E402,F401  (registers topk)
from rheo.methods import rheo  # noqa: E402,F401  (registers rheo)
from rheo.methods import static  # noqa: E402,F401  (registers static, chain)
from rheo.methods import rheo_seq  # noqa: E402,F401  (registers rheo_seq)
from rheo.methods import hsd  # noqa: E402,F401  (registers hsd, hsd_chain, rheo_hsd)
from rheo.methods.plugins import find_method, kind_of, load_plugins, plugin_methods  # noqa: E402

load_plugins()

__all__ = ["Method", "build_tree", "current_label", "find_method", "get_method", "kind_of", "method_names",
           "method_of_variant", "reads", "plugin_methods", "register", "select_candidates", "unregister", "verify_tree"]
