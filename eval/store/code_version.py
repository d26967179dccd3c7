"""The version of the decoding code a row was made by, and the resume policy that reads it.

A row's value (its tokens, tau, expected tokens, timings) is decided by its configuration, which the
config hash covers (eval.store.keys), and by the code that decodes it, which it does not: the
decoding loop, the trees, the verifiers, the method plug-ins, the model adapters, the baselines, the
prompt construction (chat messages, chat formats and turn ends, the prompt protocol) and the
measurement that turns a generation into a row. :data:`DECODING_FILES` lists those files (the one
list); :func:`code_version` hashes them into the row column ``code_version`` (12 hex digits, not in
the config hash). Comments and blank lines are not hashed (a tokenized reading of each file), so
rewording a comment does not make rows stale; any change to code or docstrings does. Documentation,
reports, command lines and tests are not in the list: they change no row. Every other module that the
harness's decoding imports is named in :data:`OUTSIDE`, with why it decides no row's value;
tests/test_code_version.py walks the import graph of the decoding path and fails on a module in
neither list, so a new module on that path is placed on purpose.

A method registered by a plug-in from outside the checkout (rheo.methods.plugins) decides its rows with
its own files too: its rows record :func:`method_code_version`, the hash of the checkout's version and
the plug-in's source files, so that editing the plug-in makes its rows (and only its rows) stale.

On resume (:class:`VersionCheck`) a stored row of another version is recomputed, and the run says
so in one line, unless ``keep_stale_rows=true`` keeps it (then it says how many were kept). A row
stored before the column existed (every committed archive of today) is of *unknown* version: it is
kept, and the run says how many, so that committed evidence restored into a folder is not
recomputed by default. Reports only read rows and never recompute them.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import tokenize
from pathlib import Path
from typing import Optional

from rheo.methods.plugins import plugin_files
from rheo.paths import REPO_ROOT

log = logging.getLogger("eval.store.code_version")

#: the files whose content decides a row's value, relative to the repository root (globs within one
#: folder; a new method module under rheo/methods/ or baselines/ is in without an edit here)
DECODING_FILES = (
    # the decoding loop and its mechanisms
    "rheo/decode.py", "rheo/tree.py", "rheo/tree_union.py", "rheo/verify.py", "rheo/candidates.py",
    "rheo/probs.py", "rheo/random.py", "rheo/expected.py", "rheo/mechanism.py", "rheo/ot.py",
    "rheo/adaptive.py", "rheo/same_state.py", "rheo/timing.py", "rheo/config.py", "rheo/spec.py",
    "rheo/placement.py", "rheo/cpu_dtype.py", "rheo/engine.py", "rheo/captured_build.py", "rheo/warmup.py",
    "rheo/traversal.py", "rheo/hsd.py",
    # the method plug-ins and the reference methods
    "rheo/methods/*.py", "baselines/*.py",
    # the model adapters a generation runs through
    "rheo/models/base.py", "rheo/models/hf_target.py", "rheo/models/kv_arena.py", "rheo/models/processed.py",
    "rheo/models/eagle3.py", "rheo/models/eagle3_head.py", "rheo/models/eagle3_fast.py",
    "rheo/models/eagle3_checkpoint.py", "rheo/models/loading.py", "rheo/models/smollm2.py",
    "rheo/models/mixture.py", "rheo/models/scaled.py", "rheo/models/static_*.py",
    # the prompt a model receives: chat messages, chat formats and turn ends, the prompt protocol
    "eval/prompts/suites.py", "rheo/models/catalog.py", "rheo/models/protocol.py",
    # the measurements that turn a generation into rows (and the harness-only test pair)
    "eval/measure/generation.py", "eval/measure/realized.py", "eval/measure/same_states.py",
    "eval/measure/rows.py", "eval/measure/pairs.py", "eval/measure/loop.py", "rheo/models/tiny.py",
    "rheo/models/toy.py",
)
#: the other modules the decoding path imports: what each decides instead of a row's value (globs as above)
OUTSIDE = {
    "eval/conf/*.py": "the run configuration and its key (the config hash covers it)",
    "eval/store/*.py": "storage, keys and resume (the config hash, turns_sha, this file)",
    "rheo/presets.py": "method settings by preset name (the config hash)",
    "eval/prompts/sources.py": "reading prompt records (their text is hashed in turns_sha)",
    "eval/measure/summary.py": "a run's counts and closing lines",
    "rheo/models/locate.py": "where weights are (their content: head_sha, target_sha)",
    "rheo/models/weights.py": "weight-file checks and fingerprints (head_sha, target_sha)",
    "rheo/models/pair_check.py": "refusing a head that does not fit its target",
    "rheo/models/config_checks.py": "refusing a config that does not fit",
    "rheo/models/target_shapes.py": "refusing target weights of the wrong shapes",
    "rheo/models/sources.py": "where a catalog model is downloaded from",
    "rheo/paths.py": "folders", "rheo/files.py": "writing files", "rheo/io.py": "reading files",
    "rheo/cli.py": "command-line errors",
    "rheo/__init__.py": "re-exports", "rheo/models/__init__.py": "re-exports",
    "eval/__init__.py": "a package", "eval/measure/__init__.py": "a package", "eval/prompts/__init__.py": "a package",
}
#: the version of a row stored before the column existed
UNKNOWN = None


def decoding_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files of :data:`DECODING_FILES` under ``root``, sorted (a glob that matches nothing adds nothing)."""
    found: set[Path] = set()
    for pattern in DECODING_FILES:
        found.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def source_digest(text: str) -> str:
    """The code of one Python file as hashed: its tokens without comments and layout (NL, INDENT as
    written), one per line; a file that does not tokenize is hashed as it is."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    try:
        tokens = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    return "\n".join(tokens)


@functools.lru_cache(maxsize=None)
def code_version(root: Path = REPO_ROOT) -> str:
    """12 hex digits of a SHA-256 over :func:`decoding_files` (path and :func:`source_digest` of each)."""
    digest = hashlib.sha256()
    for path in decoding_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(source_digest(path.read_text(encoding="utf-8")).encode() + b"\0")
    return digest.hexdigest()[:12]


def method_code_version(method: Optional[str] = None, base: Optional[str] = None) -> str:
    """The version of the code that decides the rows of ``method``, given the checkout's ``base`` version
    (default :func:`code_version`): ``base`` for a method of the checkout (and for None); for a plug-in's
    method, 12 hex digits of a SHA-256 over ``base`` and the :func:`source_digest` of each of the
    plug-in's files (rheo.methods.plugins.plugin_files)."""
    base = code_version() if base is None else base
    files = plugin_files(method) if method else ()
    return _with_files(base, files) if files else base


def _with_files(base: str, files: tuple[Path, ...]) -> str:
    digest = hashlib.sha256(base.encode() + b"\0")
    for path in files:
        digest.update(path.name.encode() + b"\0" + source_digest(path.read_text(encoding="utf-8")).encode() + b"\0")
    return digest.hexdigest()[:12]


class VersionCheck:
    """The resume policy of one run: whether a stored row's ``code_version`` lets it be reused
    (module docstring), and the one line that says what was found."""

    def __init__(self, keep_stale: bool = False, current: Optional[str] = None) -> None:
        """``current``: the checkout's version (default :func:`code_version`); a plug-in's rows are checked
        against their method's (:func:`method_code_version`)."""
        self.keep_stale = bool(keep_stale)
        self.current = current if current is not None else code_version()
        self.stale: dict[Path, str] = {}  # place -> the other version found there
        self.unknown: set[Path] = set()

    def reusable(self, version: Optional[str], where: Path, method: Optional[str] = None) -> bool:
        """Whether a row (or shard) at ``where`` of ``method`` (None: a method of the checkout) made by
        ``version`` may be reused (counted once per place)."""
        if version is UNKNOWN or version != version:  # None / NaN: before the column
            self.unknown.add(where)
            return True
        version = str(version)  # a number in a hand-edited or foreign row is a version too, not a TypeError
        if version == method_code_version(method, self.current):
            return True
        self.stale[where] = version
        return self.keep_stale

    def lines(self, unit: str = "row(s)") -> list[str]:
        """What the check found, one line each ([] when every stored row is of this version)."""
        out = []
        if self.stale:
            versions = ", ".join(sorted(set(self.stale.values())))
            what = ("kept as asked (keep_stale_rows=true): their numbers are the older code's" if self.keep_stale
                    else "recomputing them (keep_stale_rows=true keeps them)")
            out.append(f"{len(self.stale)} stored {unit} were made by another version of the decoding code "
                       f"({versions}; now {self.current}): {what}")
        if self.unknown:
            out.append(f"{len(self.unknown)} stored {unit} predate the code_version column (unknown version): "
                       f"kept; delete them to recompute with this code ({self.current})")
        return out

    def report(self, unit: str = "row(s)") -> None:
        """Log :meth:`lines`: stale rows as a warning, rows of unknown version as information."""
        for line in self.lines(unit):
            (log.warning if "another version" in line else log.info)(line)
