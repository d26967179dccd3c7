"""Names of the compared methods of same-state rows (eval.measure.same_states), for tables and figures.

* **variant**, **driver** - as the row's method labels them today (rheo.methods.current_label: a
  same-state archive written before presets named their rows says 'rheo m=1 proxy=tempered' for
  'rheo_auto').
* **label** - the registry's display name of the row's variant (``eval.report.analysis.display_name``:
  'Top-K', 'Rheo m=1', 'RSD (4,2,1,1,1,1,1,1)', 'SpecInfer (6,3,1,1)', 'Chain d=8'); when two
  compared configs of the rows share a display name but differ in their method parameters
  (Top-K at two tree budgets), the parameters that differ are appended ('Top-K k=4 depth=3'); when
  the dynamic configs differ in their node budget (k, depth, tree_size, sparse_top), every dynamic
  label names it ('Top-K tree_size=60' against 'Rheo m=1 tree_size=6').
* **family** - 'dynamic' (a context-aware, pruned tree), 'static' (a fixed shape that branches)
  or 'chain' (a fixed shape of one child per node): the registry's kind, a static method
  without branching being a chain.
* **order** - Top-K first, then the other dynamic methods (Rheo by m), static shapes, chains.
* **head_sha** - None (test models without a head) becomes 'none', so that it keys a group.
* **dial** - the draft-quality dial ``draft_mix`` as text ('none' when unset, else the value, one-to-one),
  so that rows of different dial values never share a group.
"""

from __future__ import annotations

import math

import pandas as pd

from eval.report.analysis import display_name
from eval.store.storage import METHOD_COLUMNS
from rheo.methods import current_label, reads
from rheo.methods.plugins import UNKNOWN_KIND, kind_of
from rheo.methods.registry import label_number

BASELINE_METHOD = "topk"
FAMILIES = ("dynamic", "static", "chain")
NO_HEAD = "none"
NO_DTYPE = "unrecorded"  # rows from before the dtype column, read from an archive
NO_DIAL = "none"  # rows without the draft-quality dial (draft_mix unset)


def _plain(value):
    """A method-parameter cell as a hashable, comparable value (lists and arrays as tuples, NaN as None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "__len__") and not isinstance(value, str):
        return tuple(int(v) for v in value)
    return value.item() if hasattr(value, "item") else value


def _fmt(value) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(map(str, value)) + ")"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _current(label):
    return current_label(label) if isinstance(label, str) else label


def family_of(method: str, branching) -> str:
    kind = kind_of(method)  # "unknown": a plug-in's rows read without it
    if kind == "static":
        return "static" if branching is not None and any(b > 1 for b in branching) else "chain"
    return kind


def with_labels(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` plus the columns label, family, order and dial (module docstring); head_sha and dtype filled;
    ``variant`` and ``driver`` as their methods label them today (rows stored before a preset was named by
    its rows: 'rheo m=1 proxy=tempered' is 'rheo_auto')."""
    rows = rows.copy()
    for col in ("variant", "driver"):
        if col in rows.columns:
            today = {v: _current(v) for v in rows[col].dropna().unique()}
            rows[col] = rows[col].map(lambda v: today.get(v, v))
    rows["head_sha"] = rows["head_sha"].fillna(NO_HEAD).astype(str)
    rows["dtype"] = (rows["dtype"] if "dtype" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
                     ).fillna(NO_DTYPE).astype(str)
    mix = rows["draft_mix"] if "draft_mix" in rows.columns else pd.Series(None, index=rows.index, dtype=float)
    rows["dial"] = [NO_DIAL if _plain(a) is None else label_number(a) for a in mix]
    params = [c for c in METHOD_COLUMNS if c in rows.columns]
    ident = [tuple(_plain(v) for v in values) for values in zip(*(rows[c] for c in ["method", "variant"] + params))]
    table = pd.DataFrame({"ident": ident}).drop_duplicates()
    names = {i: display_name(i[1]) for i in table["ident"]}
    for name in set(names.values()):
        same = [i for i in names if names[i] == name]
        if len(same) > 1:  # append the parameters that tell them apart
            differ = [j for j, c in enumerate(params) if len({i[2 + j] for i in same}) > 1]
            for i in same:
                names[i] = name + "".join(f" {params[j]}={_fmt(i[2 + j])}" for j in differ if i[2 + j] is not None)
    budgets = _differing_budgets(table["ident"], params)
    if budgets:  # a comparison across tree budgets names them on every tree label
        names = {i: names[i] + "".join(f" {params[j]}={_fmt(i[2 + j])}" for j in budgets
                                       if i[2 + j] is not None and f" {params[j]}=" not in names[i]) for i in names}
    rows["label"] = [names[i] for i in ident]
    rows["family"] = [family_of(i[0], i[2 + params.index("branching")] if "branching" in params else None)
                      for i in ident]
    rows["order"] = [_order_key(i, params) for i in ident]
    return rows


#: the node budget of a dynamic tree: labels name it when the compared dynamic configs differ in it
BUDGET = ("k", "depth", "tree_size", "sparse_top")


def _differing_budgets(idents, params: list[str]) -> list[int]:
    """Positions (in ``params``) of the BUDGET fields whose values differ among the dynamic configs."""
    dynamic = [i for i in idents if kind_of(i[0]) == "dynamic"]
    return [j for j, c in enumerate(params) if c in BUDGET and len({i[2 + j] for i in dynamic}) > 1]


def _order_key(ident: tuple, params: list[str]) -> tuple:
    method = ident[0]
    cell = dict(zip(params, ident[2:]))
    rank = (0 if method == BASELINE_METHOD else 1) if kind_of(method) == "dynamic" else 2
    rank += family_of(method, cell.get("branching")) == "chain"
    numbers = tuple(-1 if cell.get(c) is None else cell[c] for c in ("m", "k", "depth", "tree_size"))
    return (rank, method, numbers, str(cell.get("branching")), str(cell.get("replacement")))


def ordered_labels(rows: pd.DataFrame) -> list[str]:
    """The labels of labelled ``rows`` in table order."""
    first = rows.drop_duplicates("label")
    return [lab for _, lab in sorted(zip(first["order"], first["label"]))]


def baseline_label(rows: pd.DataFrame) -> str | None:
    """The Top-K label of labelled ``rows`` (the driver's own config when several), or None."""
    top = rows[rows["method"] == BASELINE_METHOD]
    if top.empty:
        return None
    own = top[top["config_hash"] == top["driver_hash"]] if "driver_hash" in top.columns else top.iloc[:0]
    return str((own if not own.empty else top).sort_values("order")["label"].iloc[0])


def rheostat_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of methods that read the rheostat m (the registry's fields: rheo.methods.reads)."""
    return rows[rows["method"].map(lambda name: kind_of(name) != UNKNOWN_KIND and reads(name, "m"))]


def rheo_m1_label(rows: pd.DataFrame) -> str | None:
    """The label of Rheo m=1 when the rows hold it and another Rheo m (an m ablation), else None."""
    rheo = rheostat_rows(rows)
    if rheo["m"].nunique() < 2 or not (rheo["m"] == 1).any():
        return None
    return str(rheo[rheo["m"] == 1].sort_values("order")["label"].iloc[0])
