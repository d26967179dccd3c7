"""The columns of a result row: one parquet schema for every shard and archive (:mod:`eval.store.storage`).

The method parameters (:func:`rheo.config.method_parameters`) become columns typed from their
annotations; the other columns are fixed here. Older shards may lack the optional columns,
which read back as None.
"""

from __future__ import annotations

import typing

import pyarrow as pa

from eval.store.keys import EVERY_KEY_FIELDS
from rheo.config import SpecConfig, method_parameters

_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def method_columns(spec_type: type = SpecConfig) -> list[tuple[str, pa.DataType]]:
    """The row columns of the method parameters (rheo.config.method_parameters), typed from their
    annotations: int, float, str, bool, a tuple of ints (a list column), each optionally None."""
    hints = typing.get_type_hints(spec_type)
    return [(f.name, _arrow_type(hints[f.name])) for f in method_parameters(spec_type)]


def _arrow_type(annotation) -> pa.DataType:
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return _arrow_type(args[0])
    if typing.get_origin(annotation) is tuple and len(args) == 1:
        return pa.list_(_arrow_type(args[0]))
    if annotation not in _ARROW_TYPES:
        raise TypeError(f"a method parameter of type {annotation} has no row column type (eval/store/row_schema.py)")
    return _ARROW_TYPES[annotation]


#: the columns of a row's config key (eval.store.keys.method_key) other than the method parameters
RUN_KEY_COLUMNS = ("model", "target_path", "head_path", "method", "temperature", "seed", "max_new_tokens",
                   "paired_with", "target_sha", "engine")
METHOD_COLUMNS = tuple(name for name, _ in method_columns())
ROW_SCHEMA = pa.schema([
    ("model", pa.string()), ("target_path", pa.string()), ("head_path", pa.string()), ("dataset", pa.string()),
    ("item_id", pa.int64()), ("turn", pa.int64()), ("category", pa.string()), ("turns_sha", pa.string()),
    ("method", pa.string()), *method_columns(),
    ("temperature", pa.float64()), ("seed", pa.int64()), ("max_new_tokens", pa.int64()), ("gen_seed", pa.int64()),
    ("prompt_tokens", pa.int64()), ("new_tokens", pa.int64()), ("target_calls", pa.int64()),
    ("tau", pa.float64()), ("accept_lengths", pa.list_(pa.int64())),
    ("drafted_nodes_mean", pa.float64()), ("kept_nodes_mean", pa.float64()),
    ("samples_kept", pa.int64()), ("samples_accepted", pa.int64()),
    ("wall_s", pa.float64()), ("tokens_per_s", pa.float64()),
    ("output_tokens", pa.list_(pa.int64())), ("device", pa.string()), ("dtype", pa.string()),
    ("torch_version", pa.string()), ("transformers_version", pa.string()),
    ("rheo_version", pa.string()), ("git_sha", pa.string()), ("config_hash", pa.string()),
    ("paired_with", pa.string()),
    ("status", pa.string()), ("error", pa.string()), ("finished_at", pa.string()),
    # absent from the first shards, read back as None
    ("device_name", pa.string()),  # CPU model / GPU name the row was timed on
    ("phase_draft_ms", pa.float64()), ("phase_build_ms", pa.float64()), ("phase_score_ms", pa.float64()),
    ("phase_verify_ms", pa.float64()), ("phase_commit_ms", pa.float64()), ("phase_other_ms", pa.float64()),
    ("phase_prefill_ms", pa.float64()),  # per-cycle means (ms), prefill: total (rheo.timing)
    ("num_threads", pa.int64()),  # torch intra-op threads the row was generated with
    # record_expected runs: the exact expected emitted tokens per cycle (rheo.expected) and their mean
    ("expected_accept_lengths", pa.list_(pa.float64())), ("expected_tau", pa.float64()),
    # ... and the tokens the last cycle's verification produced before max_new_tokens / EOS cut them
    ("last_cycle_verified", pa.int64()),
    # the content of a target folder the user chose (eval.store.keys.method_key); None: the catalog's own
    ("target_sha", pa.string()),
    # adapt set (rheo_adaptive, rheo_level): the share of cycles drafted with m=0; None for other methods
    ("m0_share", pa.float64()),
    # ... and the mean over its cycles' roots of the acceptance of a child sampled from the draft (1 - TV)
    ("root_accept", pa.float64()),
    # the prompt format of its key when set (chat_format, eos_tokens: eval.store.keys.method_key), in one string
    ("prompt_format", pa.string()),
    # the version of the decoding code that made the row (eval.store.code_version; not in the config hash)
    ("code_version", pa.string()),
    # the engine the row ran on (rheo.engine) when not "eager"; None: eager (and rows older than the column)
    ("engine", pa.string()),
    # graphs compiled inside the row's timed generation (rheo.engine.compile_count; 0 for eager; None: older rows)
    ("compiles", pa.int64()),
    # the generation's peak memory, MiB (eval.measure.rows.peak_memory_mb: CUDA max allocated on a GPU, the
    # process's peak RSS on a CPU; not in the config hash); None in rows older than the column
    ("peak_memory_mb", pa.float64()),
    # the prompt protocol the row was made under (rheo.models.protocol: template | eagle3); None: rows
    # older than the column, all made under template
    ("protocol", pa.string()),
    # the run (one process of eval.run) that timed the row: rows of one run_id were timed in one job, item by
    # item (alongside, paired_baseline); None in rows older than the column
    ("run_id", pa.string()),
])
COLUMNS = tuple(ROW_SCHEMA.names)
#: columns older shards may lack (filled with None when read); every other column is required
#: (turns_sha: hash of the item's turns, eval.prompts.suites.Item.turns_sha; device_name and later: phase timings;
#: the method parameters that are not in every method's key, e.g. a static tree's branching)
OPTIONAL_COLUMNS = (frozenset(COLUMNS[COLUMNS.index("device_name"):]) | {"turns_sha"}
                    | (frozenset(METHOD_COLUMNS) - frozenset(EVERY_KEY_FIELDS)))


def key_row(key: dict) -> dict:
    """A row of every column (None) holding the columns of its config key (a method parameter the
    method does not read stays None)."""
    row = dict.fromkeys(COLUMNS)
    row.update({c: key.get(c) for c in RUN_KEY_COLUMNS + METHOD_COLUMNS})
    row["prompt_format"] = prompt_format(key)
    row["protocol"] = key.get("protocol", "template")
    return row


def prompt_format(key: dict):
    """The prompt format a config key sets, as one string ('chat_format=vicuna_v1.1 eos_tokens=</s>'); None
    when it sets none (the catalog pair's own format: the keys of the committed rows)."""
    parts = [f"chat_format={key['chat_format']}"] if key.get("chat_format") is not None else []
    if key.get("eos_tokens") is not None:
        parts.append("eos_tokens=" + ",".join(str(t) for t in key["eos_tokens"]))
    return " ".join(parts) or None
