"""Prompt protocols: how a benchmark item becomes the token ids a model receives, and what ends a turn.

Two protocols (``PROTOCOLS``):

* ``template`` (the default of the library and of the embedded pair; every row stored before the
  protocol existed was made under it): the pair's chat format (the tokenizer's own template, or the
  catalog's ``vicuna_v1.1``) with no system message of the project's (a template may add its own
  default one: SmolLM2's does); stop at the tokenizer's eos and the catalog's turn ends; the run's
  dtype and token limit; an earlier answer goes back into the conversation as decoded.
* ``eagle3``: EAGLE-3's evaluation scripts (SafeAILab/EAGLE, ``eagle/evaluation/``), model by model,
  as they prepare a prompt and stop a generation (:data:`EAGLE3`; docs/protocols.md has the table and
  the file each fact comes from):

  - Llama-3.1-8B-Instruct (``gen_ea_answer_llama3chat.py``): the Llama-2 chat system message
    (:data:`LLAMA2_SYSTEM`), then the tokenizer's chat template; stop at eos or ``<|eot_id|>``;
  - Vicuna-13B-v1.3 (``gen_ea_answer_vicuna.py``): FastChat's ``vicuna`` conversation (vicuna_v1.1,
    its own system message: the catalog's format already); stop at eos;
  - DeepSeek-R1-Distill-Llama-8B (``gen_ea_answer_ds.py``): the chat template, no system message;
    stop at eos or ``<|eot_id|>`` (where the tokenizer has it); the first turn of each item only
    (the script's loop is ``for j in range(1)``: MT-bench's second turn is never asked);
  - all three: float16 weights (where the run leaves ``dtype=auto``); the model's own first answer,
    cut at the first stop token, special tokens removed and stripped, is the assistant message
    before MT-bench's second turn. The scripts' ``--max-new-token`` is 1024 by default, but their
    ``eagenerate`` call does not pass it on, so a generation ends after 512 new tokens (``eagenerate``'s
    own default, checked once per cycle) or at 2048 positions: the token limit stays the run's
    ``max_new_tokens`` (``make reproduce-full``: 1024), and ``max_new_tokens=512`` is the scripts'
    effective limit.

  A pair outside the paper's three (the embedded SmolLM2 pair, a pair of your own) under ``eagle3``
  gets what the Llama-3 script does with a chat model: :data:`LLAMA2_SYSTEM` as the system message
  in the pair's own template, the pair's turn end (SmolLM2: ``<|im_end|>``, its ``<|eot_id|>``) and
  eos as stops, answers stripped; dtype and token limit stay the run's.

The harness runs the paper's three models under ``eagle3`` unless told otherwise
(:func:`default_protocol`), every other pair under ``template``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["TEMPLATE", "EAGLE3", "PROTOCOLS", "LLAMA2_SYSTEM", "Prompting", "prompting", "default_protocol",
           "check_protocol", "dtype_choice", "with_system", "answer_text"]

TEMPLATE = "template"
EAGLE3 = "eagle3"
PROTOCOLS = (TEMPLATE, EAGLE3)
EAGLE_DIR = "SafeAILab/EAGLE eagle/evaluation/"

#: the system message of EAGLE-3's Llama-3 evaluation script (Llama-2 chat's default system prompt)
LLAMA2_SYSTEM = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, while being "
    "safe.  Your answers should not include any harmful, unethical, racist, sexist, toxic, dangerous, or illegal "
    "content. Please ensure that your responses are socially unbiased and positive in nature.\n\n"
    "If a question does not make any sense, or is not factually coherent, explain why instead of answering "
    "something not correct. If you don't know the answer to a question, please don't share false information."
)


@dataclass(frozen=True)
class Prompting:
    """What one protocol does for one model (module docstring).

    ``system``: a system message put before the conversation (None: the format's own, if any);
    ``stop_tokens``: the turn ends besides the tokenizer's eos (None: the catalog's; a token the
    tokenizer lacks is left out); ``dtype``: the weights dtype a run with ``dtype=auto`` loads
    (None: the usual choice); ``max_turns``: only the first turns of an item are asked (None: all);
    ``strip_answers``: an earlier answer is stripped of surrounding white space before it goes back;
    ``source``: the EAGLE file the settings come from."""

    protocol: str = TEMPLATE
    system: Optional[str] = None
    stop_tokens: Optional[tuple[str, ...]] = None
    dtype: Optional[str] = None
    max_turns: Optional[int] = None
    strip_answers: bool = False
    source: str = ""


_LLAMA3 = EAGLE_DIR + "gen_ea_answer_llama3chat.py"
#: the eagle3 protocol of each EAGLE-3 evaluation script (gen_ea_answer_<name>.py; a catalog entry's
#: ``eagle_eval`` names the script its head was evaluated with)
EAGLE3_SCRIPTS: dict[str, Prompting] = {
    "llama3chat": Prompting(EAGLE3, LLAMA2_SYSTEM, ("<|eot_id|>",), "float16", None, True, _LLAMA3),
    "vicuna": Prompting(EAGLE3, None, (), "float16", None, True, EAGLE_DIR + "gen_ea_answer_vicuna.py"),
    "ds": Prompting(EAGLE3, None, ("<|eot_id|>",), "float16", 1, True, EAGLE_DIR + "gen_ea_answer_ds.py"),
}


def _eagle_script(model: str) -> Optional[Prompting]:
    """The eagle3 settings of a catalog model EAGLE-3 evaluated (its entry's ``eagle_eval``), else None."""
    from rheo.models.catalog import MODELS

    entry = MODELS.get(model)
    return EAGLE3_SCRIPTS[entry.eagle_eval] if entry is not None and entry.eagle_eval else None


#: the turn end of the embedded pair's template (SmolLM2: ChatML)
_OWN_TURN_END = {"smollm2": ("<|im_end|>",)}


def check_protocol(protocol: str) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`, else ValueError in one line."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
    return protocol


def default_protocol(model: str) -> str:
    """The protocol the harness runs ``model`` under when none is given: eagle3 for the paper's three
    models (what their EAGLE-3 heads were evaluated with), template for every other pair."""
    return EAGLE3 if _eagle_script(model) is not None else TEMPLATE


def prompting(model: str, protocol: Optional[str] = None) -> Prompting:
    """What ``protocol`` (None: :func:`default_protocol`) does for ``model`` (a catalog name or any other)."""
    protocol = check_protocol(default_protocol(model) if protocol is None else protocol)
    if protocol == TEMPLATE:
        return Prompting()
    script = _eagle_script(model)
    if script is not None:
        return script
    own = next((ends for prefix, ends in _OWN_TURN_END.items() if model.startswith(prefix)), None)
    return Prompting(EAGLE3, LLAMA2_SYSTEM, own, None, None, True, _LLAMA3 + " (its system message)")


def dtype_choice(dtype: Optional[str], device: str, model: str, protocol: str):
    """The weights dtype of a run (rheo.cpu_dtype.DtypeChoice, with its reason): under ``dtype="auto"`` the
    protocol's where it has one (eagle3: float16 for the paper's models, as EAGLE-3's evaluation), else
    rheo.cpu_dtype's choice; an explicit dtype wins."""
    from rheo.cpu_dtype import AUTO, DtypeChoice, resolve_dtype

    own = prompting(model, protocol).dtype
    if dtype == AUTO and own is not None:
        return DtypeChoice(own, f"protocol={protocol}: {own}, as EAGLE-3's evaluation of {model}")
    return resolve_dtype(dtype, device)


def with_system(messages: Sequence[dict], how: Prompting) -> list[dict]:
    """``messages`` with the protocol's system message first (unchanged when it has none, or when the
    conversation already starts with a system message)."""
    messages = list(messages)
    if how.system is None or (messages and messages[0].get("role") == "system"):
        return messages
    return [{"role": "system", "content": how.system}, *messages]


def answer_text(tokenizer, ids: Sequence[int], how: Prompting) -> str:
    """An answer as it goes back into the conversation: decoded without special tokens (the ids end
    at the stop token, which generation keeps out or the decoding drops), stripped under eagle3."""
    text = tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
    return text.strip() if how.strip_answers else text
