"""Where the weights of a catalog entry are on this machine; nothing is ever downloaded.

Each part (target, head) is looked up, in this order:

1. the explicit ``target_path`` / ``head_path`` argument of ``load_model_pair``;
2. ``$RHEO_<NAME>_TARGET`` / ``$RHEO_<NAME>_HEAD`` (e.g. ``RHEO_LLAMA31_8B_INSTRUCT_HEAD``);
3. ``$RHEO_MODEL_DIR/<name>/target`` / ``$RHEO_MODEL_DIR/<name>/head``;
4. the entry's default: the Hugging Face cache (``local_files_only=True``; honours
   ``HF_HUB_CACHE`` / ``HF_HOME``) for hub ids, the project folder for committed
   assets, the project loader for the built-in SmolLM2 GGUF.

A path given by 1 or 2 must exist (no silent fall-through). When a part is not
found, one :class:`ModelWeightsNotFoundError` says how to fix it first (its first line alone says
where to put the folder and what to set; then the ``hf download`` lines of rheo.models.sources),
then every place looked, one a line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rheo.models.catalog import BUILTIN_SMOLLM2, ModelEntry, get_entry
from rheo.models.sources import RECIPES, fix_lines
from rheo.models.weights import sampled_fingerprint, weights_fingerprint
from rheo.paths import REPO_ROOT, folder

__all__ = ["ModelWeightsNotFoundError", "ResolvedPaths", "resolve_paths", "head_fingerprint"]

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


class ModelWeightsNotFoundError(FileNotFoundError):
    """Weights of a registry entry are not available locally (a message of several lines: the command
    line prints them as they are, rheo.cli)."""

    multi_line = True

    def __init__(self, message: str, entry: str, missing: tuple[str, ...]) -> None:
        super().__init__(message)
        self.entry = entry
        self.missing = missing


@dataclass(frozen=True)
class ResolvedPaths:
    target: Optional[Path]  # None: the built-in loader
    head: Path


#: repo-relative sources: committed assets, and heads built into .cache/ by a make recipe (RECIPES)
LOCAL_PREFIXES = ("rheo/", f"{folder('cache')}/")


def resolve_paths(entry: ModelEntry, target_path: Optional[str] = None,
                  head_path: Optional[str] = None) -> ResolvedPaths:
    """Find both parts or raise one ModelWeightsNotFoundError listing every missing part."""
    found: dict[str, Optional[Path]] = {}
    problems: list[str] = []
    for part, given in (("target", target_path), ("head", head_path)):
        path, report = _resolve_part(entry, part, given)
        if report:
            problems.append(report)
        else:
            found[part] = path
    if problems:
        missing = tuple(p.split(" ", 1)[0] for p in problems)
        raise ModelWeightsNotFoundError(_message(entry, missing, problems), entry.name, missing)
    return ResolvedPaths(target=found["target"], head=found["head"])


def head_fingerprint(name: str, head_path: Optional[str] = None) -> Optional[str]:
    """First 12 hex digits of the SHA-256 of the head's weight files that ``load_model_pair``
    would read for model ``name`` (None when the head is not found locally).

    Result rows are keyed by it, so replacing a head at the same path (a retrained default)
    never lets a rerun resume from the old head's rows. Cached per (file, size, mtime).
    """
    entry = get_entry(name)
    path, report = _resolve_part(entry, "head", head_path)
    if report or path is None:
        return None
    return weights_fingerprint(path)


def target_fingerprint(name: str, target_path: Optional[str] = None) -> Optional[str]:
    """The sampled fingerprint (rheo.models.weights.sampled_fingerprint) of the target folder that
    ``load_model_pair`` would read for model ``name`` when that folder is one the user chose: the
    ``target_path`` argument, ``$RHEO_<NAME>_TARGET`` or ``$RHEO_MODEL_DIR/<name>/target``. None for the
    catalog's own target (embedded, a project asset or the hub id), whose rows' keys stay as they were,
    and when the folder is not found. Rows are keyed by it: a target replaced in place is not resumed."""
    entry = get_entry(name)
    env = os.environ.get(entry.env_var("target"))
    root = os.environ.get("RHEO_MODEL_DIR")
    path, report = _resolve_part(entry, "target", target_path)
    if report or path is None:
        return None
    chosen = target_path or env or (root and path == Path(root).expanduser() / entry.name / "target")
    return sampled_fingerprint(path) if chosen else None


def _resolve_part(entry: ModelEntry, part: str, given: Optional[str]) -> tuple[Optional[Path], str]:
    """Returns (path, "") when found, (None, report) otherwise."""
    source = getattr(entry, part)
    env = entry.env_var(part)
    need_config = part == "target"
    looked: list[str] = []
    explicit = [(f"{part}_path argument", given), (f"${env}", os.environ.get(env))]
    for label, value in explicit:
        if value:
            problem = _check_dir(Path(value).expanduser(), need_config)
            if problem:
                return None, _report(entry, part, [f"{label} = {value}: {problem}"], env)
            return Path(value).expanduser(), ""
        looked.append(f"{label}: not set")
    root = os.environ.get("RHEO_MODEL_DIR")
    if root:
        candidate = Path(root).expanduser() / entry.name / part
        problem = _check_dir(candidate, need_config)
        if not problem:
            return candidate, ""
        looked.append(f"$RHEO_MODEL_DIR/{entry.name}/{part} = {candidate}: {problem}")
    else:
        looked.append(f"$RHEO_MODEL_DIR/{entry.name}/{part}: RHEO_MODEL_DIR not set")
    if source == BUILTIN_SMOLLM2:
        return None, ""
    if source.startswith(LOCAL_PREFIXES):
        candidate = REPO_ROOT / source
        problem = _check_dir(candidate, need_config)
        if not problem:
            return candidate, ""
        hint = RECIPES.get(source, "not trained/committed yet?")
        looked.append(f"project asset {candidate}: {problem} ({hint})")
    else:
        cache = _hf_cache_dir()
        path = _hf_cached(source, cache)
        problem = "not in the cache" if path is None else _check_dir(path, need_config)
        if not problem:
            return path, ""
        looked.append(f"Hugging Face cache {cache} (local_files_only): {problem}")
    return None, _report(entry, part, looked, env)


def _report(entry: ModelEntry, part: str, looked: list[str], env: str) -> str:
    """'<part> (<source>) not found; looked at:' and one line per place."""
    source = getattr(entry, part)
    hub = f"hub id {source}" if not source.startswith((*LOCAL_PREFIXES, "builtin:")) else source
    return f"{part} ({hub}) not found; looked at:\n" + "\n".join(f"    - {x}" for x in looked)


def _message(entry: ModelEntry, missing: tuple[str, ...], problems: list[str]) -> str:
    """The fix first (a self-contained first line, then the download lines and the variable to set),
    then every place looked, one a line (rheo.models.sources; docs/models.md)."""
    parts = " and ".join(missing)
    where = ", ".join(f"$RHEO_MODEL_DIR/{entry.name}/{p}" for p in missing)
    first = (f"model {entry.name!r}: {parts} weights not found on this machine (nothing is downloaded): put "
             f"{'them' if len(missing) > 1 else 'it'} at {where} or set {' / '.join(entry.env_var(p) for p in missing)}"
             f" (docs/models.md)")
    return "\n".join([first, "  fix:", *(f"    {x}" for x in fix_lines(entry, missing)), *(f"  {p}" for p in problems)])


def _check_dir(path: Path, need_config: bool) -> str:
    """'' if path is a usable weights folder, else what is wrong with it."""
    if not path.is_dir():
        return "no such folder"
    if need_config and not (path / "config.json").is_file():
        return "no config.json"
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in path.iterdir()):
        return f"no weights file ({'/'.join(_WEIGHT_SUFFIXES)})"
    return ""


def _hf_cache_dir() -> Path:
    """The hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


def _hf_cached(repo_id: str, cache: Path) -> Optional[Path]:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError is a FileNotFoundError
        return None
