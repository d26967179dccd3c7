"""Run a command-line entry point inside the test process: its exit status, stdout and stderr.

A subprocess pays the imports of torch, transformers and the harness (seconds) once per call; the
user-error checks only need what the entry point prints and the status it exits with. The process
state an entry point may change (sys.argv, sys.path, the program name of rheo.cli, torch's thread
count, the working folder) is put back afterwards. What only a real process shows (a warning
printed while importing, a C-level write to the stream) stays covered by the subprocess tests in
``make test-slow`` and by one subprocess case per test file in the default suite.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Done:
    """What a finished entry point left: as subprocess.CompletedProcess names it."""

    returncode: int
    stdout: str
    stderr: str


def _exit_status(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits with 1
    return 1


def run_entry(target: str, args: Sequence[str], env: Optional[dict] = None) -> Done:
    """Run ``target`` (``scripts/NAME.py`` or a module name run as ``python -m``) with ``args``, from
    the repository root, with ``env`` added to os.environ for the call."""
    import torch

    import rheo.cli

    saved = (list(sys.argv), list(sys.path), list(rheo.cli._PROGRAM), torch.get_num_threads(), os.getcwd())
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    # the module (a package's __main__) runs afresh, as in a new process (a test may have imported it already)
    mains = {name: sys.modules.pop(name) for name in list(sys.modules) if name.endswith(".__main__") or name == target}
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        os.environ.update(env or {})
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # runpy's note that a module it runs was imported before (by a test): a new process would not see it
            warnings.filterwarnings("ignore", "'.*' found in sys.modules after import of package", RuntimeWarning)
            try:
                if target.endswith(".py"):
                    sys.argv = [str(ROOT / target), *args]
                    sys.path.insert(0, str((ROOT / target).parent))  # as `python scripts/NAME.py` does
                    runpy.run_path(str(ROOT / target), run_name="__main__")
                else:
                    sys.argv = [target, *args]
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
            except SystemExit as stop:
                code = _exit_status(stop)
    finally:
        sys.argv[:], sys.path[:], rheo.cli._PROGRAM[:] = saved[0], saved[1], saved[2]
        torch.set_num_threads(saved[3])
        for name in [name for name in sys.modules if name.endswith(".__main__") or name == target]:
            del sys.modules[name]
        sys.modules.update(mains)
        os.chdir(saved[4])
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Done(code, out.getvalue(), err.getvalue())
