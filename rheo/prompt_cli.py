"""``rheo prompt``: the exact text and token ids a model receives for one item under a prompt protocol.

    rheo prompt --suite mt_bench --item 81 --protocol eagle3          (the embedded pair)
    rheo prompt --suite mt_bench --item 81 --turn 1 --answer "First answer." --protocol eagle3
    rheo prompt --text "Name three prime numbers." --model llama31_8b_instruct --protocol eagle3

Only the tokenizer is loaded (rheo.models.loading.load_prompt_format), so this runs wherever the
target's tokenizer files are: always for the embedded pair; for a paper model where its target
folder is found (else one line names the variable to set). The prompt is built as the harness builds
it (eval.prompts.suites.chat_messages, then ModelPair.format_chat): the protocol's system message,
the chat format, the generation prompt; for a later turn the earlier answers given with ``--answer``
(a run uses the model's own). The turn ends a generation stops at are printed with their ids.
``--json`` prints one JSON object instead (messages, text, ids, stop ids).
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from rheo.cli import ArgumentParser, non_negative_int
from rheo.models.protocol import PROTOCOLS

__all__ = ["build_parser", "prompt_main"]


def build_parser(prog: str = "rheo prompt") -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Print the exact text and token ids a model receives for an item "
                                              "under a prompt protocol (only the tokenizer is loaded).")
    p.add_argument("--model", default=None, help="a catalog pair (default smollm2_135m, the embedded one)")
    p.add_argument("--target", default=None, help="a local target folder (its tokenizer) instead of --model")
    p.add_argument("--protocol", default=None, choices=PROTOCOLS,
                   help="template (the chat template alone) or eagle3 (EAGLE-3's evaluation prompts); default: "
                        "the model's own, as the harness runs it (eagle3 for the paper's three models)")
    p.add_argument("--suite", default=None, help="a benchmark suite of --data-dir (mt_bench, gsm8k, ...)")
    p.add_argument("--item", type=int, default=None, help="the item's question_id (default: the suite's first)")
    p.add_argument("--text", default=None, help="a user message of your own instead of --suite")
    p.add_argument("--turn", type=non_negative_int, default=0, help="0-based turn (MT-bench has 0 and 1)")
    p.add_argument("--answer", action="append", default=[],
                   help="the model's answer to an earlier turn, once per earlier turn (a run uses its own)")
    p.add_argument("--data-dir", default=None, help="the suites' folder (default data/benchmarks)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _item(args):
    """The Item the prompt is built from: ``--text`` (one turn) or ``--suite``/``--item``."""
    from eval.prompts.suites import Item, load_suite
    from rheo.paths import folder, resolve_path

    if (args.text is None) == (args.suite is None):
        raise ValueError("give --suite SUITE [--item ID] (a benchmark item) or --text MESSAGE (your own), one of them")
    if args.text is not None:
        return Item("text", 0, "", (args.text,))
    items = load_suite(resolve_path(args.data_dir or folder("data"), must_exist=True), args.suite,
                       None if args.item is None else [args.item])
    if not items:
        raise ValueError(f"--item {args.item} is not a question_id of {args.suite}")
    return items[0]


def prompt_main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from eval.prompts.suites import chat_messages
    from rheo.models.loading import load_prompt_format

    item = _item(args)
    if args.turn >= len(item.turns):
        raise ValueError(f"--turn {args.turn}: {item.suite} item {item.item_id} has {len(item.turns)} turn(s) (0-based)")
    if len(args.answer) != args.turn:
        raise ValueError(f"--turn {args.turn} needs {args.turn} earlier answer(s) (--answer TEXT once each), got "
                         f"{len(args.answer)}")
    name = args.model or (None if args.target else "smollm2_135m")
    pair = load_prompt_format(name, target_path=args.target, protocol=args.protocol)
    how = pair.prompting
    if how.max_turns is not None and args.turn >= how.max_turns:
        raise ValueError(f"protocol {how.protocol} asks {pair.entry.name} only the first {how.max_turns} turn(s) "
                         f"({how.source}): choose --turn < {how.max_turns}")
    messages = chat_messages(item, args.turn, args.answer)
    ids = pair.format_chat(messages)
    tok = pair.tokenizer
    text = tok.decode(ids, skip_special_tokens=False)
    stops = {tok.convert_ids_to_tokens(int(i)): int(i) for i in pair.eos_token_ids}
    if args.json:
        print(json.dumps({"model": pair.entry.name, "protocol": how.protocol, "source": how.source or None,
                          "system": how.system, "messages": messages, "text": text, "ids": ids, "stop_ids": stops},
                         ensure_ascii=False))
        return 0
    where = f"{item.suite} item {item.item_id} turn {args.turn}" if args.text is None else "your message"
    print(f"model {pair.entry.name}, protocol {how.protocol}" + (f" ({how.source})" if how.source else "")
          + f", {where}")
    print(f"system message: {how.system if how.system is not None else '(none of the protocol; the template may add one)'}")
    print("stops at: " + ", ".join(f"{t} ({i})" for t, i in stops.items()))
    print(f"--- text ({len(ids)} tokens)")
    print(text)
    print("--- token ids")
    print(" ".join(str(i) for i in ids))
    sys.stdout.flush()
    return 0
