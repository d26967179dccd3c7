"""Suite names as folder names: reversible, so two suites never share a folder.

A suite's name is what its rows carry in ``dataset``; a user's prompt set may name suites by
any value of ``dataset.suite_field`` (``数学``, ``代码``, ``Q&A``). Its shards live under
:func:`suite_folder` of that name: letters, digits and ``_`` stay as they are (so every
built-in and every earlier plain name keeps its folder), and every other character becomes
``%XX`` per UTF-8 byte. ``%`` is itself encoded, so the mapping is one-to-one and
:func:`suite_of_folder` inverts it. The six built-in suites are reserved for ``data_dir``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from eval.store.keys import SUITE_FILES

PLAIN = re.compile(r"[A-Za-z0-9_]")
#: longest folder name of a suite, in bytes (file systems allow 255; the shards' temporary names need room)
MAX_FOLDER_BYTES = 200


def suite_folder(suite: str) -> str:
    """The folder name of ``suite`` (one-to-one; ValueError for an empty or over-long name)."""
    folder = "".join(c if PLAIN.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in suite)
    if not folder:
        raise ValueError("an empty suite name: give every record a non-empty suite value (dataset.suite_field)")
    if len(folder) > MAX_FOLDER_BYTES:
        raise ValueError(f"suite name {_short(suite)} is too long for a folder name ({len(folder)} bytes encoded, "
                         f"at most {MAX_FOLDER_BYTES}): shorten the values of dataset.suite_field (or "
                         f"dataset.suite_prefix)")
    return folder


def suite_of_folder(folder: str) -> str:
    """The suite name stored in the folder ``folder`` (the inverse of :func:`suite_folder`)."""
    return unquote(folder, errors="strict") if "%" in folder else folder


def check_user_suite(suite: str, where: str) -> str:
    """``suite`` if a user's prompt set may use it: not a built-in suite, non-empty, not too long.
    ValueError naming ``where`` and the fix otherwise."""
    if suite in SUITE_FILES:
        raise ValueError(f"{where}: suite name {suite!r} is reserved: a user's suites may be none of the built-in suites "
                         f"{list(SUITE_FILES)} (they are data_dir's; its rows would mix with the benchmark's): set "
                         f"dataset.suite_prefix (e.g. 'my_') or rename the suite")
    try:
        suite_folder(suite)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return suite


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")
