"""Do a target folder's weights fit its ``config.json``? Answered from safetensors headers, before
``transformers`` loads them.

``transformers`` ends a target whose tensors have other shapes than its ``config.json`` describes (an
EAGLE-3 head folder given as the target, a ``config.json`` of another checkpoint) in a RuntimeError
about ``ignore_mismatched_sizes`` after a multi-line report. :func:`check_target_shapes` raises one
:class:`ModelMismatchError` line instead, naming the first such tensor with both shapes. The shapes
the config implies are those of the Llama layout built on the meta device (no memory, no weights).
"""

from __future__ import annotations

from pathlib import Path

import torch

from rheo.models.pair_check import ModelMismatchError

__all__ = ["check_target_shapes", "header_shapes", "layout_shapes"]

#: tensor names only an EAGLE-3 head holds
HEAD_MARKS = ("fc.weight", "d2t", "midlayer.")


def header_shapes(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """{tensor name: (file name, shape)} of every safetensors file in ``folder`` (headers only)."""
    from safetensors import safe_open

    shapes = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                shapes[name] = (path.name, list(f.get_slice(name).get_shape()))
    return shapes


def layout_shapes(folder: Path) -> dict[str, list[int]]:
    """{tensor name: shape} of the Llama model that ``folder``/config.json describes (built on meta)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(str(folder), local_files_only=True)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def check_target_shapes(folder: Path, label: str = "") -> None:
    """Raise ModelMismatchError (one line, ``label`` in front) when a tensor of the target in ``folder``
    has another shape than its config.json gives it; nothing to check without safetensors files."""
    found = header_shapes(Path(folder))
    if not found:
        return  # pytorch_model.bin: no header to read
    wanted = layout_shapes(Path(folder))
    wrong = [(name, file, shape, wanted[name]) for name, (file, shape) in found.items()
             if name in wanted and shape != wanted[name]]
    if not wrong:
        return
    name, file, shape, want = wrong[0]
    more = f" (and {len(wrong) - 1} more tensor(s) of other shapes)" if len(wrong) > 1 else ""
    head = [n for n in found if n.startswith(HEAD_MARKS)]
    hint = (f"; it holds EAGLE-3 head tensors ({', '.join(sorted(head)[:2])}, ...): an EAGLE-3 head given as the "
            f"target? (target_path and head_path swapped?)" if head else "")
    raise ModelMismatchError(f"{label}target {folder}: its weights do not fit its config.json: {name} is {shape} in "
                             f"{file}, the config.json gives {want}{more}{hint}. Fix: give the target's own folder "
                             f"(config.json and weights of one checkpoint)")
