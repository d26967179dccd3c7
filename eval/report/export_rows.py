"""``rheo export``: the rows of a results folder or archive as CSV or JSON, for spreadsheets and tools
that read neither Parquet nor Markdown (Spec-Bench-style scripts).

    rheo export --results results/runs.parquet                # -> outputs/exports/runs.csv
    rheo export --results outputs/mine --out outputs/mine.json  # --format from the suffix
    rheo export --results outputs/mine --out - | head          # CSV on standard output

One line per row (failed rows only with ``--include-failed``): the stored columns of
docs/results-columns.md, then the columns ``eval.report.analysis.load`` adds (``variant``,
``ar_partner``, ``ar_new_tokens``, ``ar_wall_s``, ``speedup``; empty on failed rows). Columns that hold
lists (``accept_lengths``, ``output_tokens``, ``depth_accept``, ...) are JSON arrays: in a CSV cell as
text, in JSON as arrays. JSON is one array of records.

Where it writes (eval.store.export_out): a file atomically, an existing one only with ``--replace``;
through a symlink (the link stays); into a device, a FIFO, ``/dev/stdout`` or ``-`` (standard output)
as a stream, never replacing it (the summary then goes to standard error). Refused before anything is written: an
``--out`` that is the input (the same file under any name) or lies inside the results folder, and a
committed results file. A shard that cannot be read (truncated, corrupt) fails the export, naming the
shards, unless ``--skip-bad``: then the others are exported and the summary names the skipped ones.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from eval.store.export_out import check_out, is_stream, write_out
from eval.store.storage import load_results, require_results_dir
from rheo.cli import ArgumentParser, path_arg, run_main
from rheo.paths import announce, output

FORMATS = ("csv", "json")
#: what --help says of the command (the module doc's first paragraph, whole)
DESCRIPTION = ("Write the rows of a results folder or archive as CSV or JSON (one line per row, with the variant "
               "and speedup columns the tables use).")


def plain(value):
    """A cell as JSON can hold it: arrays as lists, NaN/NA as None, numpy scalars as Python ones."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def encode(rows: pd.DataFrame, fmt: str) -> bytes:
    """``rows`` as the bytes of a ``fmt`` file."""
    records = [{k: plain(v) for k, v in rec.items()} for rec in rows.to_dict(orient="records")]
    if fmt == "json":
        return json.dumps(records, ensure_ascii=False).encode()
    flat = pd.DataFrame([{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in records],
                        columns=list(rows.columns))
    return flat.to_csv(index=False).encode()


def export_rows(rows: pd.DataFrame, out: Path, fmt: str) -> int:
    """Write ``rows`` to ``out`` as ``fmt`` (eval.store.export_out.write_out); returns the number of rows."""
    data = encode(rows, fmt)
    write_out(out, lambda f: f.write(data))
    return len(rows)


def with_derived(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (stored columns, as stored) plus the columns analysis.load adds, computed over the ok rows
    (a failed row gets its variant, and no speedup)."""
    from eval.report.analysis import DERIVED_COLUMNS, add_speedup, add_variant

    ok = rows["status"] == "ok"
    derived = pd.DataFrame(index=rows.index, columns=list(DERIVED_COLUMNS), dtype=object)
    if ok.any():
        derived.loc[ok, :] = add_speedup(add_variant(rows[ok]))[list(DERIVED_COLUMNS)]
    if (~ok).any():
        derived.loc[~ok, "variant"] = add_variant(rows[~ok])["variant"]
    for col in ("ar_new_tokens", "ar_wall_s", "speedup"):
        derived[col] = pd.to_numeric(derived[col], errors="coerce")
    return pd.concat([rows, derived], axis=1)


def format_of(out: Path, given) -> str:
    """--format, else --out's suffix; a stream without one is CSV."""
    fmt = given or Path(str(out)).suffix.lstrip(".").lower()
    if fmt not in FORMATS and is_stream(out) and not given:
        return "csv"
    if fmt not in FORMATS:
        raise ValueError(f"--out {out}: give --format csv or --format json (or an --out ending in .csv/.json)")
    return fmt


def main(argv=None) -> int:
    ap = ArgumentParser(description=DESCRIPTION)
    ap.add_argument("--results", type=path_arg, required=True, help="a results folder or archive (X.parquet)")
    ap.add_argument("--out", type=path_arg, default=None, help="the file to write (.csv or .json; default: "
                    "<output root>/exports/<results name>.csv, or .json with --format json); - is standard output; "
                    "a device or FIFO is streamed into")
    ap.add_argument("--format", choices=FORMATS, default=None, help="csv or json (default: --out's suffix; csv "
                    "for - and devices)")
    ap.add_argument("--include-failed", action="store_true", help="also the rows stored as failed")
    ap.add_argument("--replace", action="store_true", help="replace an existing --out file")
    ap.add_argument("--skip-bad", action="store_true", help="export the readable rows when some shards cannot be "
                    "read (truncated, corrupt); the summary names the skipped ones")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = output("exports", f"{Path(args.results).name.split('.')[0] or 'rows'}.{args.format or 'csv'}")
    fmt = format_of(args.out, args.format)
    if not str(args.results).endswith(".parquet"):
        require_results_dir(args.results)
    check_out(args.out, [args.results], args.replace, committed=True)
    rows = load_results(args.results, include_failed=True)
    bad = rows.attrs.get("corrupt_shards", [])
    if bad and not args.skip_bad:
        raise ValueError(f"--results {args.results}: {len(bad)} shard(s) under it cannot be read ({', '.join(bad[:3])}"
                         f"{', ...' if len(bad) > 3 else ''}): nothing written; rerun their configs to recompute "
                         f"them, or pass --skip-bad to export the other rows")
    rows = rows if args.include_failed else rows[rows["status"] == "ok"].reset_index(drop=True)
    if rows.empty:
        raise ValueError(f"--results {args.results} holds no rows: nothing to export")
    if not is_stream(args.out):
        announce()  # on stdout: never into a stream that stdout may be
    n = export_rows(with_derived(rows), args.out, fmt)
    skipped = f"; skipped {len(bad)} unreadable shard(s): {', '.join(bad)}" if bad else ""
    print(f"wrote {args.out}: {n} rows, {fmt}{skipped}", file=sys.stderr if is_stream(args.out) else sys.stdout)
    return 0


if __name__ == "__main__":
    run_main(main)
