"""Verification methods as plug-ins: one registry (:mod:`rheo.methods.registry`), one module per method.

Built in: ``topk`` (EAGLE-2/3), ``rheo`` (RheoSampling), ``static`` (static stochastic
trees: RSD without replacement, SpecInfer with replacement) and ``chain`` (chain
speculative sampling). Every module of this package is imported on the first lookup.
"""

from rheo.methods.registry import Method, get_method, method_names, method_of_variant, register, unregister

__all__ = ["Method", "get_method", "method_names", "method_of_variant", "register", "unregister"]
