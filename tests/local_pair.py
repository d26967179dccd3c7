"""A tiny local pair on disk, for the tests: a random Llama checkpoint with a word-level tokenizer
(vocabulary 256, a chat template) and a random EAGLE-3 head in the official layout that reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from eagle3_heads import VOCAB, H, official_config, official_state, write_head

WORDS = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(3, VOCAB)]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    vocab["assistant:"], vocab["user:"] = 3, 4  # the template's role words (w3, w4 are never used)
    del vocab["w3"], vocab["w4"]
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = TEMPLATE
    return tok


def write_target(folder: Path, num_layers: int = 4, hidden: int = H) -> Path:
    from rheo.models.tiny import make_tiny_llama

    make_tiny_llama(seed=0, vocab_size=VOCAB, hidden_size=hidden, num_layers=num_layers).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return folder


def write_local_head(folder: Path, seed: int = 0, config_changes: dict | None = None, **state_kwargs) -> Path:
    """A head in the official layout; ``state_kwargs`` go to official_state (fc_in, d2t_shift)."""
    state, _ = official_state(seed, **state_kwargs)
    write_head(folder, state)
    if config_changes:
        (folder / "config.json").write_text(json.dumps({**official_config(), **config_changes}))
    return folder


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The local pair loaded as users load theirs (rheo.models.loading.load_model_pair), once per module."""
    from rheo.models.loading import load_model_pair

    target = write_target(tmp_path_factory.mktemp("target"))
    return load_model_pair(target_path=str(target), head_path=str(write_local_head(tmp_path_factory.mktemp("h"))))


@pytest.fixture(scope="module")
def prompt():
    return torch.tensor([[5, 17, 33, 2, 99, 140, 7]])  # [1, 7]
