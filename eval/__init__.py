"""The benchmark harness. Importing it registers the reference methods of :mod:`baselines`."""

import baselines  # noqa: F401  (registers ar, hf_generate)
