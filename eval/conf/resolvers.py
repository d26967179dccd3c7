"""The OmegaConf resolvers of the run config and the recipes."""

from __future__ import annotations

from omegaconf import OmegaConf

from rheo.paths import out_root


def register_resolvers() -> None:
    """``${rheo_out:}``: the output root as rheo.paths.out_root reads it, so that an unset or empty
    ``RHEO_OUT`` is the default (``outputs``) in configs too (``${oc.env:RHEO_OUT,outputs}`` gives "" for an
    empty one, and ``${out_root}/runs`` would be ``/runs``)."""
    if not OmegaConf.has_resolver("rheo_out"):
        OmegaConf.register_new_resolver("rheo_out", lambda: str(out_root()))
