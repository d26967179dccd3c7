"""Every Python example in the README and docs/ that shows what it prints prints exactly that
(`...` in the shown output stands for any text). The examples on the real pair load and decode
SmolLM2 (seconds to tens of seconds): slow; the cheap checks run by default."""

from __future__ import annotations

import contextlib
import io

import pytest
from doc_examples import Example, context, examples, runnable

EXAMPLES = examples()


def test_the_examples_that_show_output_are_found():
    names = {e.name for e in EXAMPLES}
    assert {"README.md#1", "README.md#3", "library.md#1"} <= names, names
    assert all(e.claim and runnable(e.code) for e in EXAMPLES)


def test_the_same_example_shows_the_same_output_wherever_it_is():
    by_code: dict[str, set[str]] = {}
    for e in EXAMPLES:
        by_code.setdefault(e.code_only(), set()).add(e.claim)
    assert all(len(claims) == 1 for claims in by_code.values()), by_code


def test_an_elided_output_matches_any_text_in_its_place():
    e = Example(EXAMPLES[0].doc, 0, "", "The answer is 2, ... 3.08")
    assert e.matches("The answer is 2, and so on, and on 3.08\n")
    assert not e.matches("The answer is 2, and so on 3.09")


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_each_example_prints_what_its_doc_shows(example):
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in context(example):
            exec(compile(code, str(example.doc), "exec"), namespace)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example.code, str(example.doc), "exec"), namespace)
    assert example.matches(printed.getvalue()), (f"{example.name} prints {printed.getvalue().strip()!r}; "
                                                 f"the doc shows {example.claim!r}: fix the doc")
