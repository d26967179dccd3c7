"""Does an EAGLE-3 head fit a target? Answered from config files and weight headers only.

:func:`check_pair` reads the target's ``config.json``, the head's ``config.json``, the
tensor shapes in the head's safetensors header and its draft-to-target id map (a few KB),
and refuses the pair with one :class:`ModelMismatchError` line naming both folders, every
mismatch and the fix. No target weight is read, so a wrong pairing of two 8B checkpoints
fails in a second instead of after minutes of loading.

What must agree (the EAGLE-3 head reads the target's hidden states and emits target ids):

* a Llama-family target (rheo loads targets with ``LlamaForCausalLM``);
* the head's target hidden size and its ``fc`` input width (3 feature layers x hidden);
* vocabulary: the head's target vocabulary, its draft vocabulary and its ``d2t`` map
  (draft id + d2t = target id, inside the target vocabulary);
* the feature layers: the target has at least 3 decoder layers, and a head that names
  the layers it was trained on (``eagle_aux_hidden_state_layer_ids``) names the ones rheo
  reads for this target (the inputs of layers 2, L//2, L-3; in that key's numbering, the
  outputs of layers 1, L//2-1, L-4).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from rheo.models.weights import CorruptWeightsError

__all__ = ["ModelMismatchError", "head_config_problems", "check_pair", "read_json"]

#: target model types loaded as Llama (the same architecture under another name)
LLAMA_TYPES = ("llama",)
FIX = "pair the head with the target it was trained for (or train a head for this target)"


class ModelMismatchError(ValueError):
    """A draft head that does not fit the target it is paired with."""


def read_json(path: Path) -> Optional[dict]:
    """The JSON object in ``path`` (None when there is no such file)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise CorruptWeightsError(f"{path} is not valid JSON ({e}): truncated or corrupt; restore or "
                                  f"re-download it") from e


def _get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def head_config_problems(target_config: Any, head_config: dict) -> list[str]:
    """Mismatches between a target config (a dict or a ``transformers`` config) and a head config.json."""
    t_hidden, t_vocab = int(_get(target_config, "hidden_size")), int(_get(target_config, "vocab_size"))
    h_hidden = head_config.get("target_hidden_size") or head_config.get("hidden_size")
    problems = []
    if h_hidden is not None and int(h_hidden) != t_hidden:
        problems.append(f"head expects target hidden size {h_hidden}, target has {t_hidden}")
    if head_config.get("vocab_size") is not None and int(head_config["vocab_size"]) != t_vocab:
        problems.append(f"head target vocabulary {head_config['vocab_size']} != target vocabulary {t_vocab}")
    draft_vocab = head_config.get("draft_vocab_size")
    if draft_vocab is not None and int(draft_vocab) > t_vocab:
        problems.append(f"head draft vocabulary {draft_vocab} > target vocabulary {t_vocab}")
    return problems


def check_pair(target_dir: Path, head_dir: Path, label: str = "") -> None:
    """Raise ModelMismatchError (one line) when the head in ``head_dir`` cannot read the target in
    ``target_dir``; ``label`` prefixes the message (e.g. ``model 'x': ``)."""
    target_config = read_json(Path(target_dir) / "config.json")
    head_config = read_json(Path(head_dir) / "config.json")
    if target_config is None or head_config is None:
        return  # the loaders name the missing file
    problems = _target_problems(target_config)
    problems += head_config_problems(target_config, head_config)
    problems += _weight_header_problems(Path(head_dir), head_config, target_config)
    problems += _layer_problems(target_config, head_config)
    if problems:
        raise ModelMismatchError(f"{label}head {head_dir} does not fit target {target_dir}: "
                                 + "; ".join(problems) + f". Fix: {FIX}")


def _target_problems(target_config: dict) -> list[str]:
    kind = target_config.get("model_type")
    if kind is not None and kind not in LLAMA_TYPES:
        return [f"target model_type {kind!r} is not Llama-family (targets load as LlamaForCausalLM)"]
    return []


def _layer_problems(target_config: dict, head_config: dict) -> list[str]:
    layers = target_config.get("num_hidden_layers")
    if layers is None:
        return []
    layers = int(layers)
    if layers < 3:
        return [f"target has {layers} decoder layers, EAGLE-3 reads the hidden states of 3 (needs >= 3)"]
    named = (head_config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    read = [1, layers // 2 - 1, layers - 4]  # outputs of these layers = inputs of 2, L//2, L-3
    if named is not None and [int(i) for i in named] != read:
        return [f"head was trained on the outputs of target layers {list(named)}, rheo reads {read} from a "
                f"{layers}-layer target"]
    return []


def _weight_header_problems(head_dir: Path, head_config: dict, target_config: dict) -> list[str]:
    """fc input width and the d2t map, read from the safetensors header (and d2t, a few KB)."""
    path = head_dir / "model.safetensors"
    if not path.is_file():
        return []  # pytorch_model.bin: no header to read; the EAGLE-3 loader checks it
    from safetensors import safe_open

    t_hidden, t_vocab = int(target_config["hidden_size"]), int(target_config["vocab_size"])
    problems = []
    try:
        with safe_open(str(path), "pt") as f:
            keys = set(f.keys())
            if "fc.weight" in keys:
                fc_in = int(f.get_slice("fc.weight").get_shape()[1])  # fc.weight: [H_head, 3 * H_target]
                if fc_in != 3 * t_hidden:
                    problems.append(f"head fc reads {fc_in} features, the target gives 3 layers x hidden "
                                    f"{t_hidden} = {3 * t_hidden}")
            if "d2t" in keys:
                problems += _map_problems(f.get_tensor("d2t"), head_config, t_vocab)
    except Exception:  # noqa: BLE001 -- an unreadable header: check_weight_files names the file and the fix
        return []
    return problems


def _map_problems(d2t, head_config: dict, t_vocab: int) -> list[str]:
    """d2t: [draft_vocab] offsets (target id = draft id + d2t)."""
    import torch

    draft_vocab = head_config.get("draft_vocab_size") or head_config.get("vocab_size")
    if draft_vocab is not None and d2t.shape[0] != int(draft_vocab):
        return [f"head d2t maps {d2t.shape[0]} draft ids, its draft vocabulary is {draft_vocab}"]
    target_ids = torch.arange(d2t.shape[0]) + d2t.long()  # [draft_vocab]
    low, high = int(target_ids.min()), int(target_ids.max())
    if low < 0 or high >= t_vocab:
        return [f"head d2t maps draft ids to target ids {low}..{high}, outside the target vocabulary "
                f"[0, {t_vocab})"]
    return []
