"""The prompt protocol (rheo.models.protocol): template (the committed prompts) and eagle3 (EAGLE-3's
evaluation scripts), in the harness's config, keys and rows, the Python API and `rheo prompt`."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import eval.run as entry
from eval.conf import schema
from eval.conf.compose import compose_config
from eval.measure.loop import asked_turns
from eval.measure.pairs import make_tiny_pair
from eval.prompts.suites import Item
from eval.store.keys import config_hash
from eval.store.storage import load_results
from rheo.models.protocol import (EAGLE3, LLAMA2_SYSTEM, TEMPLATE, Prompting, answer_text, check_protocol,
                                  default_protocol, prompting, with_system)

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model=tiny_random", "dataset=gsm8k", "limit=1", "max_new_tokens=4", "method.k=4", "method.depth=2",
        "method.tree_size=6", "num_threads=1", "progress=false", "warmup=false", "baseline=false"]
MAIN_RHEO = ["model=smollm2_135m", "method=rheo", "method.m=1", "temperature=1.0", "seed=0", "max_new_tokens=128",
             "dtype=bfloat16", "device=cpu"]


def test_the_eagle3_facts_of_each_paper_model():
    llama, vicuna, ds = (prompting(m, EAGLE3) for m in ("llama31_8b_instruct", "vicuna_13b_v13", "r1_distill_llama_8b"))
    assert llama.system == LLAMA2_SYSTEM and llama.stop_tokens == ("<|eot_id|>",) and llama.max_turns is None
    assert LLAMA2_SYSTEM.startswith("You are a helpful, respectful and honest assistant.")
    assert vicuna.system is None and vicuna.stop_tokens == ()  # its format's own system message; eos alone
    assert ds.system is None and ds.stop_tokens == ("<|eot_id|>",) and ds.max_turns == 1
    assert {p.dtype for p in (llama, vicuna, ds)} == {"float16"} and all(p.strip_answers for p in (llama, vicuna, ds))
    assert llama.source.endswith("gen_ea_answer_llama3chat.py") and ds.source.endswith("gen_ea_answer_ds.py")
    embedded = prompting("smollm2_135m", EAGLE3)
    assert embedded.system == LLAMA2_SYSTEM and embedded.stop_tokens == ("<|im_end|>",) and embedded.dtype is None
    assert prompting("smollm2_135m") == Prompting() == prompting("llama31_8b_instruct", TEMPLATE)
    assert (default_protocol("llama31_8b_instruct"), default_protocol("smollm2_135m")) == (EAGLE3, TEMPLATE)
    with pytest.raises(ValueError, match=r"protocol must be one of \['template', 'eagle3'\], got 'eagle'"):
        check_protocol("eagle")


def test_the_system_message_goes_first_once_and_answers_are_stripped_under_eagle3():
    messages = [{"role": "user", "content": "q"}]
    assert with_system(messages, Prompting()) == messages
    assert with_system(messages, prompting("smollm2_135m", EAGLE3))[0] == {"role": "system", "content": LLAMA2_SYSTEM}
    own = [{"role": "system", "content": "mine"}, *messages]
    assert with_system(own, prompting("smollm2_135m", EAGLE3)) == own

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return " answer \n"
    assert answer_text(Tok(), [1], Prompting()) == " answer \n"
    assert answer_text(Tok(), [1], prompting("x", EAGLE3)) == "answer"


def test_the_committed_main_table_keeps_its_hash_and_eagle3_gets_its_own():
    committed = set(pq.read_table(ROOT / "results" / "runs.parquet", columns=["config_hash"]).column(0).to_pylist())
    template = schema.method_key(compose_config(MAIN_RHEO))
    assert "protocol" not in template and config_hash(template) in committed
    assert config_hash(schema.method_key(compose_config(MAIN_RHEO + ["protocol=template"]))) == config_hash(template)
    eagle3 = schema.method_key(compose_config(MAIN_RHEO + ["protocol=eagle3"]))
    assert eagle3["protocol"] == EAGLE3 and config_hash(eagle3) not in committed


def test_a_paper_model_runs_under_eagle3_in_float16_without_its_weights():
    cfg = compose_config(["model=llama31_8b_instruct", "device=cuda"])
    assert cfg.protocol is None and schema.run_protocol(cfg) == EAGLE3  # the model's own
    assert schema.run_dtype(cfg).dtype == "float16"
    assert schema.run_dtype(compose_config(["model=llama31_8b_instruct", "dtype=bfloat16"])).dtype == "bfloat16"
    assert schema.run_protocol(compose_config(["model=llama31_8b_instruct", "protocol=template"])) == TEMPLATE
    with pytest.raises(ValueError, match="protocol must be one of"):
        schema.run_protocol(compose_config(["protocol=eagle"]))
    item = Item("mt_bench", 81, "", ("first", "second"))
    assert asked_turns([item], compose_config(["model=r1_distill_llama_8b"]))[0].turns == ("first",)
    assert asked_turns([item], compose_config(["model=llama31_8b_instruct"]))[0].turns == item.turns


def test_rows_store_their_protocol_and_the_two_never_pool(tmp_path):
    out = tmp_path / "out"
    for protocol in (TEMPLATE, EAGLE3):
        assert entry.run(compose_config(TINY + [f"output_dir={out}", f"protocol={protocol}"])).computed == 1
    rows = load_results(out)
    assert sorted(rows["protocol"]) == [EAGLE3, TEMPLATE]
    assert rows.groupby("protocol")["config_hash"].nunique().to_dict() == {EAGLE3: 1, TEMPLATE: 1}
    assert rows["config_hash"].nunique() == 2
    tiny = make_tiny_pair()
    eagle = tiny.with_protocol(EAGLE3)
    assert eagle.format_chat([{"role": "user", "content": "q"}]) != tiny.format_chat([{"role": "user", "content": "q"}])
