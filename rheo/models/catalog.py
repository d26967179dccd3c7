"""The catalog of model pairs this project evaluates: a target, its EAGLE-3 head, chat format, eos.

An **entry** names where each part comes from: a Hugging Face hub id, a repo-relative
path (``rheo/...``, a committed asset) or :data:`BUILTIN_SMOLLM2` (the project's own
SmolLM2 GGUF loader). Where the weights are found on this machine is
``rheo.models.locate``; loading them is ``rheo.models.loading``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Union

from rheo.paths import folder
from rheo.placement import DTYPES

__all__ = ["ModelEntry", "MODELS", "BUILTIN_SMOLLM2", "VICUNA_SYSTEM", "VICUNA_V11_TEMPLATE", "CHAT_FORMATS",
           "get_entry"]

BUILTIN_SMOLLM2 = "builtin:smollm2_gguf"

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



def as_eos_tokens(value) -> tuple[Union[str, int], ...]:
    """Turn-end tokens as a tuple: None -> (); one token string (``"<|im_end|>"``) or one id -> a
    tuple of it (a string is one token, never split into characters); else each item a token
    string or an integer id. Anything else: TypeError in one line."""
    if value is None:
        return ()
    if isinstance(value, (str, numbers.Integral)) and not isinstance(value, bool):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"eos_tokens must be token strings or ids (e.g. ['<|eot_id|>'] or [2]), got "
                        f"{type(value).__name__} {value!r:.60}") from None
    bad = [t for t in items if isinstance(t, bool) or not isinstance(t, (str, numbers.Integral))]
    if bad:
        raise TypeError(f"eos_tokens must be token strings or ids (e.g. ['<|eot_id|>'] or [2]), got "
                        f"{type(bad[0]).__name__} {bad[0]!r:.60}")
    return tuple(t if isinstance(t, str) else int(t) for t in items)


@dataclass(frozen=True)
class ModelEntry:
    """name; target/head: hub id, repo-relative path ("rheo/..." committed, ".cache/..." built by a
    make recipe) or BUILTIN_SMOLLM2;
    chat_format: "template" (the tokenizer's own) or "vicuna_v1.1";
    eos_tokens: tokens that end a turn, each a token string or an id (the tokenizer's eos is always
    added; see :func:`as_eos_tokens`);
    dtype: default weights dtype;
    eagle_eval: the EAGLE-3 evaluation script the model's head was evaluated with ("llama3chat",
    "vicuna", "ds": rheo.models.protocol.EAGLE3_SCRIPTS), "" for a pair EAGLE-3 did not evaluate."""

    name: str
    target: str
    head: str
    chat_format: str
    eos_tokens: tuple[Union[str, int], ...] = ()
    dtype: str = "bfloat16"
    eagle_eval: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_tokens", as_eos_tokens(self.eos_tokens))
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
    # an intermediate head between those two, not committed: built by `make head-mid` (.cache/)
    ModelEntry("smollm2_135m_mid_head", BUILTIN_SMOLLM2, str(folder("cache", "heads", "eagle3_smollm2_135m_mid")),
               "template", ("<|im_end|>",), "float32"),
    # the default head trained on, besides, the self-instructed corpus: built by `make head-broad` (.cache/)
    ModelEntry("smollm2_135m_broad_head", BUILTIN_SMOLLM2, str(folder("cache", "heads", "eagle3_smollm2_135m_broad")),
               "template", ("<|im_end|>",), "float32"),
    ModelEntry("llama31_8b_instruct", "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
               "template", ("<|eot_id|>", "<|end_of_text|>"), "bfloat16", "llama3chat"),
    ModelEntry("vicuna_13b_v13", "lmsys/vicuna-13b-v1.3", "yuhuili/EAGLE3-Vicuna1.3-13B",
               "vicuna_v1.1", ("</s>",), "float16", "vicuna"),
    ModelEntry("r1_distill_llama_8b", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
               "yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B", "template", (), "bfloat16", "ds"),
)}


def get_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name]

