"""`rheo prompt`: the exact text and token ids an item becomes under a protocol (the tokenizer alone)."""

from __future__ import annotations

import json

import pytest

from rheo.models.protocol import LLAMA2_SYSTEM
from rheo.prompt_cli import prompt_main


def _embedded_or_skip():
    from rheo.models.smollm2 import cache_dir

    if not (cache_dir() / "tokenizer_config.json").is_file():
        pytest.skip("the embedded pair's cache is not built (make test builds it)")


@pytest.mark.slow  # transformers and the embedded tokenizer: seconds
def test_the_embedded_pair_under_eagle3_prints_the_system_message_text_and_ids(capsys):
    _embedded_or_skip()
    assert prompt_main(["--suite", "mt_bench", "--item", "81", "--protocol", "eagle3", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["protocol"] == "eagle3" and shown["system"] == LLAMA2_SYSTEM
    assert shown["messages"][0] == {"role": "user", "content": shown["messages"][0]["content"]}
    assert shown["text"].startswith("<|im_start|>system\n" + LLAMA2_SYSTEM + "<|im_end|>")
    assert shown["stop_ids"] == {"<|im_end|>": 2}
    from rheo.models.loading import load_prompt_format

    pair = load_prompt_format("smollm2_135m", protocol="eagle3")
    assert shown["ids"] == pair.format_chat(shown["messages"])  # what a run sends
    template = pair.with_protocol("template").format_chat(shown["messages"])
    assert len(template) < len(shown["ids"]) and LLAMA2_SYSTEM not in pair.tokenizer.decode(template)
    assert prompt_main(["--suite", "mt_bench", "--item", "81", "--turn", "1", "--answer", "First.",
                        "--protocol", "eagle3"]) == 0
    text = capsys.readouterr().out
    assert "system message: You are a helpful, respectful and honest assistant." in text
    assert "<|im_start|>assistant\nFirst.<|im_end|>" in text and "--- token ids" in text


@pytest.mark.parametrize("args,line", [
    (["--model", "llama31_8b_instruct", "--text", "Hi"],
     "its tokenizer is not on this machine (no target folder found): set RHEO_LLAMA31_8B_INSTRUCT_TARGET=DIR"),
    (["--suite", "mt_bench", "--turn", "1"], "--turn 1 needs 1 earlier answer(s) (--answer TEXT once each), got 0"),
    (["--text", "Hi", "--suite", "gsm8k"], "give --suite SUITE [--item ID] (a benchmark item) or --text MESSAGE"),
    (["--text", "Hi", "--protocol", "eagle"], "argument --protocol: invalid choice: 'eagle'"),
])
def test_bad_input_is_one_line(args, line, capsys):
    from rheo.commands import main

    with pytest.raises(SystemExit) as stop:
        main(["prompt", *args])
    err = capsys.readouterr().err
    assert stop.value.code != 0 and line in err, err
    assert len(err.strip().splitlines()) == 1, err
