"""Pack a results directory (one parquet shard per row) into one parquet archive for git.

    python scripts/export_results.py --results results/runs --out results/runs.parquet

The archive holds every row (failed ones too) with the row schema of eval/storage.py;
`make tables RESULTS=results/runs.parquet` (and figures, the notebook) read it like the
directory. `make reproduce` writes both archives at its end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval.storage import OutputDirError, export_results, require_results_dir  # noqa: E402
from rheo.cli import ArgumentParser, run_main  # noqa: E402


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True, help="a results directory")
    ap.add_argument("--out", type=Path, required=True, help="the archive to write (.parquet)")
    args = ap.parse_args(argv)
    if args.out.suffix != ".parquet":
        print(f"error: --out {args.out} must end in .parquet", file=sys.stderr)
        return 2
    try:
        require_results_dir(args.results)
        n = export_results(args.results, args.out)
    except (FileNotFoundError, OutputDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {n} rows, {args.out.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    run_main(main)
