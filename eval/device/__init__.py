"""Device-side tools: the GPU check's checks and report (``scripts/gpu_check.py``) and the
tree tuning for a machine (``scripts/tune_tree.py``)."""
