"""``rheo export``: a results folder's (or archive's) rows as CSV or JSON, for spreadsheets and
tools that read neither Parquet nor Markdown (Spec-Bench-style scripts).

    rheo export --results results/runs.parquet                # -> outputs/exports/runs.csv
    rheo export --results outputs/mine --out outputs/mine.json  # --format from the suffix

One line per row (failed rows only with ``--include-failed``), the columns of
docs/results-columns.md. Columns that hold lists (``accept_lengths``, ``output_tokens``,
``depth_accept``, ...) are JSON arrays: in a CSV cell as text, in JSON as arrays. JSON is one array
of records. The file is written atomically; an existing one is replaced only with ``--replace``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from eval.store.storage import load_results, require_results_dir
from rheo.cli import ArgumentParser, path_arg, run_main
from rheo.io import atomic_write
from rheo.paths import announce, output

FORMATS = ("csv", "json")


def plain(value):
    """A cell as JSON can hold it: arrays as lists, NaN/NA as None, numpy scalars as Python ones."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def export_rows(rows: pd.DataFrame, out: Path, fmt: str) -> int:
    """Write ``rows`` to ``out`` as ``fmt``; returns the number of rows."""
    records = [{k: plain(v) for k, v in rec.items()} for rec in rows.to_dict(orient="records")]
    if fmt == "json":
        data = json.dumps(records, ensure_ascii=False).encode()
    else:
        flat = pd.DataFrame([{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in records],
                            columns=list(rows.columns))
        data = flat.to_csv(index=False).encode()
    atomic_write(out, lambda f: f.write(data))
    return len(records)


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=path_arg, required=True, help="a results folder or archive (X.parquet)")
    ap.add_argument("--out", type=path_arg, default=None, help="the file to write (.csv or .json; default: "
                    "<output root>/exports/<results name>.csv, or .json with --format json)")
    ap.add_argument("--format", choices=FORMATS, default=None, help="csv or json (default: --out's suffix)")
    ap.add_argument("--include-failed", action="store_true", help="also the rows stored as failed")
    ap.add_argument("--replace", action="store_true", help="replace an existing --out")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = output("exports", f"{Path(args.results).name.split('.')[0] or 'rows'}.{args.format or 'csv'}")
    fmt = args.format or args.out.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"--out {args.out}: give --format csv or --format json (or an --out ending in .csv/.json)")
    if args.out.exists() and not args.replace:
        raise ValueError(f"--out {args.out} exists: choose another file, or pass --replace to overwrite it")
    if not str(args.results).endswith(".parquet"):
        require_results_dir(args.results)
    rows = load_results(args.results, include_failed=args.include_failed)
    if rows.empty:
        raise ValueError(f"--results {args.results} holds no rows: nothing to export")
    announce()
    n = export_rows(rows, args.out, fmt)
    print(f"wrote {args.out}: {n} rows, {fmt}")
    return 0


if __name__ == "__main__":
    run_main(main)
