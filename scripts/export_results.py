"""Pack a results directory (one parquet shard per row) into one parquet archive for git.

    python scripts/export_results.py --results outputs/runs --out outputs/runs.parquet

The archive holds every row (failed ones too) with the row schema of eval/store/storage.py;
`make tables RESULTS=results/runs.parquet` (and figures, the notebook) read it like the
directory. `make reproduce` writes both archives at its end.

Nothing is lost by mistake: --results must be a results directory (not an archive), --out
must not lie inside it, an export of no rows writes nothing, and an existing archive whose rows
are not all in the new one is kept unless --replace; a committed archive is never written (`make
publish` copies an archive into the committed results, checked there). The archive is written
atomically; an --out that is a symlink is written through (the link stays), one that is a device or
FIFO is streamed into, never replaced (eval.store.export_out). A shard that cannot be read fails the
export, naming it.
With --if-present a missing or empty --results folder is no error: the archive stays as it is
(a study's reports, which read the archive when the folder is gone, export this way).
"""

from __future__ import annotations

import sys
from pathlib import Path

from eval.store.committed import CommittedOutputsError, refuse_committed
from eval.store.export_out import check_out
from eval.store.storage import (CorruptShardError, OutputDirError, export_results, is_archive, iter_shards, load_results,
                                require_results_dir)
from rheo.cli import ArgumentParser, one_line, path_arg, run_main

ROW_KEY = ["config_hash", "dataset", "item_id", "turn"]


def check_paths(results: Path, out: Path) -> None:
    """Refuse an archive as --results and an --out that is, or lies inside, --results."""
    if out.suffix != ".parquet":
        raise OutputDirError(f"--out {out} must end in .parquet")
    if is_archive(results) or results.is_file():
        raise OutputDirError(f"--results {results} is an archive (a file), not a results directory: export reads "
                             f"the shards of a folder written by eval.run (e.g. --results results/runs)")
    if not results.is_dir():
        raise FileNotFoundError(f"--results {results}: no such results directory (a folder written by eval.run)")
    require_results_dir(results)
    if out.resolve() == results.resolve() or results.resolve() in out.resolve().parents:
        raise OutputDirError(f"--out {out} lies inside --results {results}: write the archive beside it "
                             f"(e.g. --out {results}.parquet)")
    try:
        check_out(out, [results], replace=True)  # a folder; a device or a link is written as export_out says
    except ValueError as e:
        raise OutputDirError(str(e)) from None


def check_export(results: Path, out: Path, replace: bool) -> None:
    """Everything :func:`main` refuses, before the archive is touched."""
    check_paths(results, out)
    refuse_committed(out, source=results)  # the committed archives change only by `make publish`
    if not any(iter_shards(results)):
        raise OutputDirError(f"--results {results} holds no rows: nothing to export ({out} left as it is)")
    if replace:
        return
    lost = lost_rows(results, out)
    if lost:
        raise OutputDirError(f"--out {out} holds {lost} row(s) that are not under {results}: exporting would "
                             f"lose them; choose another --out, or pass --replace to overwrite it")


def lost_rows(results: Path, out: Path) -> int:
    """Rows of the archive ``out`` (if any) that are not under ``results``."""
    if not out.is_file():
        return 0
    old = load_results(out, include_failed=True)[ROW_KEY]
    new = load_results(results, include_failed=True)[ROW_KEY]
    return len(old.merge(new.drop_duplicates(), on=ROW_KEY, how="left", indicator=True).query("_merge == 'left_only'"))


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=path_arg, required=True, help="a results directory")
    ap.add_argument("--out", type=path_arg, required=True, help="the archive to write (.parquet)")
    ap.add_argument("--replace", action="store_true", help="replace an archive even if some of its rows are not "
                                                           "under --results (they are lost)")
    ap.add_argument("--if-present", action="store_true", help="a missing or empty --results folder is no error: "
                                                              "nothing is written")
    args = ap.parse_args(argv)
    if args.if_present and not (args.results.is_dir() and any(iter_shards(args.results))):
        print(f"{args.results}: no rows to export; {args.out} left as it is")
        return 0
    try:
        check_export(args.results, args.out, args.replace)
        n = export_results(args.results, args.out)
    except (FileNotFoundError, OutputDirError, CommittedOutputsError) as e:
        print(f"export_results.py: error: {one_line(e)}", file=sys.stderr)
        return 2
    except CorruptShardError as e:
        print(f"export_results.py: error: {one_line(e)}: nothing written; rerun its config (eval.run recomputes "
              f"a corrupt shard), or delete it to export the other rows", file=sys.stderr)
        return 2
    size = f", {args.out.stat().st_size / 1e3:.0f} kB" if args.out.is_file() else ""
    print(f"wrote {args.out}: {n} rows{size}")
    return 0


if __name__ == "__main__":
    run_main(main)
