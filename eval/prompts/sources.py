"""Where a run's prompts come from: the six suites of ``data_dir`` (:mod:`eval.prompts.suites`), or a user's
prompt set from a local file or folder, or the Hugging Face hub (:func:`load_prompts`).

``dataset.path`` (a local copy, tried first) may be

* a JSON-lines file (``.jsonl``; checked line by line, so errors name ``file:line``),
  a parquet file (``.parquet``) or an Arrow file (``.arrow``),
* a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``,
* a folder in the hub's layout (``hf download <name> --repo-type dataset
  --local-dir <folder>``: data files plus the README's ``configs``), read with
  ``load_dataset(folder, dataset.hub_config)``.

``dataset.hub`` alone (no ``path``) loads ``load_dataset(hub, hub_config)`` from the hub,
for users who have network; when that fails (offline), the error says where to put a
local copy. A ``path`` that does not exist is an error that says what to download
(nothing is fetched behind the user's back).

Suites: with ``dataset.suite_field`` the records are split by that field's value
(SPEED-Bench: its ``category``, the 11 domains), each value kept as it is after
``dataset.suite_prefix`` (its folder name is encoded one-to-one, eval.store.suite_names); ``dataset.suites`` keeps some of them ([] = all, in order of
first appearance). Without it, every record of the split is one suite, named
``dataset.suites[0]``. The six built-in suite names are reserved for ``data_dir``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from eval.prompts.suites import (BUILTIN, BenchmarkDataError, Fields, Item, builtin_datasets, dataset_items, read_files,
                                 read_records, select)
from eval.store.keys import SUITE_FILES
from eval.store.suite_names import check_user_suite

FORMATS = {".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow"}
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes


def is_builtin(conf) -> bool:
    """True for the six suites of data_dir (neither ``path`` nor ``hub`` set)."""
    return conf.get("path") is None and conf.get("hub") is None


def check_dataset(conf, resolve: Callable[[str], Path] = Path) -> None:
    """What can be checked before anything is read (ValueError naming the key and the fix): the
    suite names of the six suites, or a user's prompt set's fields and file."""
    suites = list(conf.suites or [])
    if is_builtin(conf):
        if not suites:
            raise ValueError("dataset.suites is empty; choose from " + str(list(SUITE_FILES)))
        for suite in suites:
            if suite not in SUITE_FILES:
                raise ValueError(f"unknown dataset suite {suite!r}; choose from {list(SUITE_FILES)}")
        return
    if conf.suite_field is None and len(suites) != 1:
        raise ValueError(f"dataset.suites must name the one suite of dataset {conf.name!r} (e.g. "
                         f"dataset.suites=[{conf.name}]), or set dataset.suite_field to split it; got {suites}")
    for suite in suites:
        check_user_suite(suite, "dataset.suites")
    if not conf.turns_field:
        raise ValueError("dataset.turns_field is empty: name the field that holds the turns (e.g. turns, prompt)")
    if conf.path is not None and not resolve(conf.path).exists():
        raise ValueError(_missing(conf, resolve(conf.path)))


def _missing(conf, path: Path) -> str:
    text = f"dataset.path {path} does not exist"
    if conf.hub:
        config = f" (config {conf.hub_config})" if conf.hub_config else ""
        return (f"{text}: download {conf.hub}{config} there where there is network (`hf download "
                f"{conf.hub} --repo-type dataset --local-dir {path}`), or set dataset.path=null to load it from "
                f"the hub")
    return f"{text}: give a .jsonl / .parquet / .arrow file or a save_to_disk folder"


def user_datasets(conf, resolve: Callable[[str], Path]):
    """(DatasetDict with one split per suite, Fields, label per suite) of a user's prompt set."""
    check_dataset(conf, resolve)
    fields = Fields(turns=conf.turns_field, id=conf.id_field, category=conf.category_field, strict=False)
    ds, label = _open(conf, fields, resolve)
    missing = [f for f in (conf.turns_field, conf.suite_field) if f and f not in ds.column_names]
    if missing:
        raise BenchmarkDataError(f"{label}: no field {missing[0]!r} (fields: {ds.column_names}); name the field "
                                 f"that holds it with dataset.{'turns' if missing[0] == conf.turns_field else 'suite'}"
                                 f"_field=...")
    from datasets import DatasetDict

    parts = _by_suite(ds, conf, label)
    return DatasetDict(parts), fields, {s: label for s in parts}


def _by_suite(ds, conf, label: str) -> dict:
    if conf.suite_field is None:
        return {conf.suites[0]: ds}
    order: dict[str, list[int]] = {}
    for i, value in enumerate(ds[conf.suite_field]):
        order.setdefault(conf.suite_prefix + str(value), []).append(i)
    for suite in order:
        check_user_suite(suite, f"{label} ({conf.suite_field} {suite[len(conf.suite_prefix):]!r})")
    wanted = list(conf.suites or []) or list(order)
    absent = [s for s in wanted if s not in order]
    if absent:
        raise BenchmarkDataError(f"{label}: no records of suite(s) {absent} (by {conf.suite_field}); found "
                                 f"{list(order)}")
    return {s: ds.select(order[s]) for s in wanted}


def _open(conf, fields: Fields, resolve):
    """(one Dataset, a label naming it in errors)."""
    if conf.path is None:
        return _from_hub(conf), f"hub dataset {conf.hub}"
    path = resolve(conf.path)
    if path.is_dir():
        return _from_dir(path, conf), str(path)
    builder = FORMATS.get(path.suffix.lower())
    if builder is None:
        raise BenchmarkDataError(f"dataset.path {path}: unsupported file type {path.suffix!r}; use "
                                 f"{' / '.join(FORMATS)} or a save_to_disk folder")
    if builder == "json":
        read_records(path, conf.suites[0] if conf.suites else conf.name, fields)  # file:line errors first
    return read_files(builder, {"train": path})["train"], str(path)


def _from_dir(path: Path, conf):
    from datasets import load_dataset, load_from_disk

    if any((path / marker).is_file() for marker in SAVED_MARKERS):
        return _pick_split(load_from_disk(str(path)), conf, str(path))
    with tempfile.TemporaryDirectory() as cache:  # a hub-layout copy: read from its data files
        try:
            loaded = load_dataset(str(path), conf.hub_config, cache_dir=cache, keep_in_memory=True)
        except (ValueError, FileNotFoundError) as e:
            raise BenchmarkDataError(f"dataset.path {path}: not a save_to_disk folder nor a dataset folder that "
                                     f"datasets can read ({type(e).__name__}: {_first_line(e)})") from None
    return _pick_split(loaded, conf, str(path))


def _from_hub(conf):
    from datasets import load_dataset

    try:
        loaded = load_dataset(conf.hub, conf.hub_config)
    except Exception as e:  # offline: ConnectionError; wrong name: DatasetNotFoundError; ... one line each
        raise BenchmarkDataError(
            f"dataset.hub {conf.hub}: could not load it ({type(e).__name__}: {_first_line(e)}); without network, "
            f"put a local copy in a folder (`hf download {conf.hub} --repo-type dataset --local-dir "
            f"data/{conf.name}` on a machine with network, or `load_dataset(...).save_to_disk(folder)`) and set "
            f"dataset.path=data/{conf.name}") from None
    return _pick_split(loaded, conf, f"hub dataset {conf.hub}")


def _pick_split(loaded, conf, label: str):
    """A Dataset as it is; from a DatasetDict the split ``dataset.split`` (or its only split)."""
    if not hasattr(loaded, "keys"):
        return loaded
    splits = list(loaded.keys())
    if conf.split is None and len(splits) == 1:
        return loaded[splits[0]]
    if conf.split not in splits:
        raise BenchmarkDataError(f"{label} has splits {splits}: choose one with dataset.split=..."
                                 + (f" ({conf.split!r} is not one)" if conf.split is not None else ""))
    return loaded[conf.split]


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


# ---------------------------------------------------------------- a run's prompts
def prompt_datasets(dataset_cfg, data_dir: Path, resolve: Callable[[str], Path] = Path):
    """(DatasetDict with one split per suite, Fields, labels per suite) of a run's ``dataset`` config."""
    if is_builtin(dataset_cfg):
        suites = list(dataset_cfg.suites)
        labels = {s: str(Path(data_dir) / SUITE_FILES[s]) for s in suites}
        return builtin_datasets(data_dir, suites), BUILTIN, labels
    return user_datasets(dataset_cfg, resolve)


def load_prompts(cfg, resolve: Callable[..., Path]) -> dict[str, list[Item]]:
    """suite -> its items (``item_ids``, then ``limit``) of a run config, in suite then record order."""
    data_dir = resolve(cfg.data_dir, must_exist=True)
    dd, fields, labels = prompt_datasets(cfg.dataset, data_dir, lambda p: resolve(p, must_exist=True))
    return {s: select(dataset_items(dd[s], s, fields, labels[s]), cfg.item_ids, cfg.limit) for s in dd}
