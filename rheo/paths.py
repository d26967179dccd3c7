"""The project checkout's root folder, for the committed data, assets and configs read from it."""

from __future__ import annotations

from pathlib import Path

#: the folder holding ``rheo/``, ``data/``, ``configs/`` (the package is installed editable)
REPO_ROOT = Path(__file__).resolve().parent.parent
