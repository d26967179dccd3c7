"""Prose passages from text that ships with the installed Python packages (offline).

Sources, in order: module docstrings of the standard library, descriptions in the
``METADATA`` of installed distributions (their READMEs), and licence files. A
passage is a run of paragraphs of 60-260 words with little code in it. Used for the
summarisation and reading-comprehension prompts of :mod:`rheo.training.prompts`.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import inspect
import random
import re
import sys
from typing import Iterator, List

STDLIB = (
    "abc argparse array asyncio base64 bisect calendar cmd collections colorsys concurrent.futures configparser "
    "contextlib copy csv dataclasses datetime decimal difflib doctest email enum fnmatch fractions ftplib "
    "functools getopt gettext glob gzip hashlib heapq hmac html http imaplib inspect io ipaddress itertools json "
    "locale logging lzma mailbox math mimetypes multiprocessing numbers operator optparse os pathlib pdb pickle "
    "pkgutil platform poplib pprint profile queue random re sched secrets selectors shelve shlex shutil signal "
    "smtplib socket socketserver sqlite3 ssl statistics string struct subprocess tarfile tempfile textwrap "
    "threading time timeit tkinter tokenize trace traceback types typing unicodedata unittest urllib uuid "
    "warnings wave weakref xml zipfile zlib"
).split()

MIN_WORDS, MAX_WORDS = 60, 260
_CODEY = re.compile(r"(>>>|\bdef |\bimport |[{}\[\]=]{2,}|::|\$ |`{3})")


def _paragraph_runs(text: str) -> Iterator[str]:
    """Consecutive prose paragraphs joined until MAX_WORDS; yields runs of >= MIN_WORDS."""
    run: List[str] = []
    words = 0
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        n = len(para.split())
        if n < 8 or _CODEY.search(para) or para.count("|") > 2 or para.count("http") > 1 or para.count("@") > 2:
            if words >= MIN_WORDS:
                yield " ".join(run)
            run, words = [], 0
            continue
        if words + n > MAX_WORDS and words >= MIN_WORDS:
            yield " ".join(run)
            run, words = [], 0
        if n <= MAX_WORDS:
            run.append(para)
            words += n
    if words >= MIN_WORDS:
        yield " ".join(run)


def _stdlib_docs() -> Iterator[str]:
    for name in STDLIB:
        try:
            mod = importlib.import_module(name)
        except Exception:  # a module this interpreter build lacks (e.g. tkinter)
            continue
        doc = inspect.getdoc(mod) or ""
        yield doc
        for attr in sorted(vars(mod)):
            obj = getattr(mod, attr)
            if not attr.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj)):
                yield inspect.getdoc(obj) or ""


def _distribution_texts() -> Iterator[str]:
    dists = sorted(md.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower())
    for d in dists:
        body = d.metadata.get_payload() if hasattr(d.metadata, "get_payload") else ""
        yield body or d.metadata.get("Description") or ""
        for f in d.files or ():
            if re.search(r"(LICEN[CS]E|COPYING|NOTICE)", f.name, re.I):
                try:
                    yield f.read_text(errors="ignore")
                except Exception:  # unreadable file: skip it
                    continue


def passages(seed: int, limit: int) -> List[str]:
    """Up to ``limit`` distinct passages, shuffled with ``seed``."""
    seen, out = set(), []
    for text in list(_stdlib_docs()) + list(_distribution_texts()):
        for run in _paragraph_runs(text):
            key = run[:200]
            if key not in seen:
                seen.add(key)
                out.append(run)
    random.Random(seed).shuffle(out)
    return out[:limit]


if __name__ == "__main__":  # a quick look: python -m rheo.training.passages
    ps = passages(0, 10**9)
    print(len(ps), "passages;", sum(len(p.split()) for p in ps), "words", file=sys.stderr)
    for p in ps[:3]:
        print(p, "\n---")
