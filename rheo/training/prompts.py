"""Offline chat prompts for draft-head training, built from Python's stdlib docstrings.

Nothing here reads the benchmark data: prompts come only from the docstrings of
standard-library modules bundled with the running interpreter. The list is
deterministic given the seed; :func:`split_prompts` holds out a fixed share.
"""

from __future__ import annotations

import importlib
import inspect
import random
from typing import List, Tuple

STDLIB_MODULES = (
    "abc argparse array base64 bisect calendar collections colorsys contextlib copy csv dataclasses "
    "datetime decimal difflib enum fnmatch fractions functools glob gzip hashlib heapq hmac html "
    "itertools json logging math operator os pathlib pickle pprint queue random re secrets shlex "
    "shutil socket sqlite3 statistics string struct subprocess tempfile textwrap threading time "
    "timeit typing unicodedata urllib.parse uuid warnings weakref zipfile zlib"
).split()

TEMPLATES = (
    "Explain what `{qual}` does in Python.",
    "Summarise this docstring in two sentences:\n\n{doc}",
    "Write a short example that uses `{qual}`.",
    "What are common mistakes when using `{qual}`?",
    "Rewrite this explanation in simpler words for a beginner:\n\n{first}",
    "When should I use `{qual}` instead of writing my own code?",
    "Give three bullet points describing the `{mod}` module.",
    "Write a haiku about `{qual}`.",
    "Translate this sentence into French: {first}",
    "Is the following statement true? Explain briefly. \"{first}\"",
)


def _docs(mod_name: str) -> List[Tuple[str, str]]:
    try:
        mod = importlib.import_module(mod_name)
    except Exception:
        return []
    out = []
    doc = inspect.getdoc(mod)
    if doc:
        out.append((mod_name, doc))
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
            continue
        d = inspect.getdoc(obj)
        if d and len(d) > 40:
            out.append((f"{mod_name}.{name}", d))
    return out


def build_prompts(seed: int = 0, max_doc_chars: int = 500) -> List[str]:
    """All prompts (deduplicated, shuffled with ``seed``)."""
    rng = random.Random(seed)
    prompts = set()
    for mod_name in STDLIB_MODULES:
        for qual, doc in _docs(mod_name):
            doc = doc.strip()[:max_doc_chars]
            first = doc.split("\n\n")[0].replace("\n", " ")[:300]
            for tpl in rng.sample(TEMPLATES, 3):
                prompts.add(tpl.format(qual=qual, mod=mod_name.split(".")[0], doc=doc, first=first))
    out = sorted(prompts)
    rng.shuffle(out)
    return out


def split_prompts(prompts: List[str], held_out_fraction: float = 0.05) -> Tuple[List[str], List[str]]:
    """(train, held_out): the first ``held_out_fraction`` of the shuffled list is held out."""
    n_held = max(1, int(len(prompts) * held_out_fraction))
    return prompts[n_held:], prompts[:n_held]


def doc_texts(seed: int = 0, max_doc_chars: int = 800) -> List[Tuple[str, str]]:
    """(qualified name, docstring) pairs, shuffled, for teacher-forced samples."""
    rng = random.Random(seed + 1)
    out = [(q, d.strip()[:max_doc_chars]) for m in STDLIB_MODULES for q, d in _docs(m)]
    rng.shuffle(out)
    return out
