"""A pair of your own in the harness (``model=local``), checked before anything loads or is created:
its name (it labels the rows and names their folder), its folders, and whether its head fits its
target (config files and weight headers only)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Optional

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@functools.lru_cache(maxsize=8)
def check_local_pair(name: str, target_path: str, head_path: str, chat_format: Optional[str] = None,
                     eos_tokens: Optional[tuple[str, ...]] = None) -> None:
    """Refuse, with one line, a pair of your own that cannot load: a name unfit for a folder, a
    missing folder, unreadable head weights, a head that does not fit its target (config files and
    weight headers only: no weight is loaded, nothing is created)."""
    from rheo.models.eagle3_checkpoint import head_weights_fix
    from rheo.models.loading import local_entry
    from rheo.models.pair_check import check_pair
    from rheo.models.weights import check_weight_files

    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"model.name {name!r} labels the rows and names their folder: use letters, digits, "
                         f"'.', '_' and '-' (e.g. model.name=my-llama)")
    local_entry(target_path, head_path, name, chat_format or "template", eos_tokens)
    target, head = Path(target_path).expanduser(), Path(head_path).expanduser()
    check_weight_files(head, f"model {name!r}: EAGLE-3 head", head_weights_fix(head))
    check_pair(target, head, f"model {name!r}: ")
