"""Offline training prompts for the draft head: six kinds, none from the benchmarks.

Kinds (``Prompt.kind``), mirroring what the benchmark suites ask for without
reading them:

* ``chat``      task types x topics (explain, compare, advise, write a poem/email/story ...);
* ``code``      Python functions to write, from a list of small tasks (plain request or a
                signature + docstring to complete);
* ``math``      arithmetic word problems from templates with random quantities and names;
* ``qa``        short factual questions from templates, and questions about a passage;
* ``summary``   passages from text the installed packages ship (stdlib / package
                docstrings, package descriptions, licences), to summarise;
* ``followup``  second turns ("make it shorter", "explain step 2", ...) on the target's
                own first answers: built later, from generated answers, by
                :func:`followup_turns`;
* ``instruct``  requests the target wrote itself (:mod:`rheo.training.self_instruct`).

Passages come from :mod:`rheo.training.passages`. Everything is deterministic given
the seed and the installed packages; the generated corpus itself is committed as
token ids (``data/draft_corpus/``), so nobody needs to rebuild it. The held-out split
is a fixed share chosen by a hash of the prompt text (independent of order).
:func:`build_corpus_prompts` drops any prompt that fails the contamination check
(:mod:`rheo.training.contamination`).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

from rheo.training import passages as _passages
from rheo.training.contamination import benchmark_ngrams, shares_ngram
from rheo.training.prompt_templates import (
    ANIMALS, CHAT_TEMPLATES, CODE_TASKS, CODE_TEMPLATES, COUNTRIES, ELEMENTS, FOLLOWUPS, ITEMS, MATH_TEMPLATES, NAMES,
    PASSAGE_QUESTIONS, QA_TEMPLATES, SUMMARY_TEMPLATES, TOPICS)

HELD_OUT_PERCENT = 3
KINDS = ("chat", "code", "math", "qa", "summary", "followup", "instruct")  # append only: the corpus stores indices


@dataclass(frozen=True)
class Prompt:
    text: str
    kind: str


def _chat(rng: random.Random) -> List[Prompt]:
    out = []
    for t in TOPICS:
        for tpl in CHAT_TEMPLATES:
            out.append(Prompt(tpl.format(t=t, u=rng.choice(TOPICS)), "chat"))
    return out


def _code(rng: random.Random) -> List[Prompt]:
    return [Prompt(tpl.format(name=n, args=a, ret=r, doc=d), "code") for n, a, r, d in CODE_TASKS
            for tpl in CODE_TEMPLATES]


def _math(rng: random.Random, per_template: int) -> List[Prompt]:
    out = []
    for tpl in MATH_TEMPLATES:
        for _ in range(per_template):
            n1, n2 = rng.sample(NAMES, 2)
            out.append(Prompt(tpl.format(
                n1=n1, n2=n2, it=rng.choice(ITEMS), a=rng.randint(2, 60), b=rng.randint(2, 30),
                c=rng.randint(2, 12), d=rng.randint(1, 9), p=rng.randint(2, 9), pc=rng.choice((10, 15, 20, 25, 30, 40))),
                "math"))
    return out


def _qa(rng: random.Random) -> List[Prompt]:
    out = []
    for tpl in QA_TEMPLATES:
        if "{country}" in tpl:
            out += [Prompt(tpl.format(country=c), "qa") for c in COUNTRIES]
        elif "{element}" in tpl:
            out += [Prompt(tpl.format(element=e), "qa") for e in ELEMENTS]
        elif "{animal}" in tpl:
            out += [Prompt(tpl.format(animal=a), "qa") for a in ANIMALS]
        elif "{t}" in tpl:
            out += [Prompt(tpl.format(t=t), "qa") for t in TOPICS]
        else:
            out.append(Prompt(tpl, "qa"))
    return out


def _passage_prompts(rng: random.Random, max_passages: int) -> List[Prompt]:
    out = []
    for i, p in enumerate(_passages.passages(rng.randint(0, 2**31), max_passages)):
        if i % 3 == 0:
            out.append(Prompt(rng.choice(PASSAGE_QUESTIONS).format(p=p), "qa"))
        else:
            out.append(Prompt(rng.choice(SUMMARY_TEMPLATES).format(p=p), "summary"))
    return out


def build_corpus_prompts(seed: int = 0, math_per_template: int = 80, max_passages: int = 1500,
                         benchmark_dir: str | Path | None = None) -> List[Prompt]:
    """All first-turn prompts, deduplicated, contamination-filtered, shuffled with ``seed``."""
    rng = random.Random(seed)
    prompts = _chat(rng) + _code(rng) + _math(rng, math_per_template) + _qa(rng) + _passage_prompts(rng, max_passages)
    seen, unique = set(), []
    for p in prompts:
        if p.text not in seen:
            seen.add(p.text)
            unique.append(p)
    bench = benchmark_ngrams(benchmark_dir)
    clean = [p for p in unique if not shares_ngram(p.text, bench)]
    rng.shuffle(clean)
    return clean


def build_prompts(seed: int = 0) -> List[str]:
    """Texts of :func:`build_corpus_prompts` (kept for callers that want plain strings)."""
    return [p.text for p in build_corpus_prompts(seed)]


def is_held_out(text: str) -> bool:
    """Fixed split: ``HELD_OUT_PERCENT`` % of prompts, chosen by a hash of the text."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 100 < HELD_OUT_PERCENT


def split_prompts(prompts: Sequence) -> Tuple[list, list]:
    """(train, held_out) by :func:`is_held_out` on each prompt's text (str or Prompt)."""
    train, held = [], []
    for p in prompts:
        (held if is_held_out(p if isinstance(p, str) else p.text) else train).append(p)
    return train, held


def followup_turns(seed: int, n: int) -> List[str]:
    """``n`` second-turn user messages, deterministic given ``seed``."""
    rng = random.Random(seed)
    return [rng.choice(FOLLOWUPS) for _ in range(n)]
