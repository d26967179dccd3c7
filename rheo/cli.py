"""Command-line entry points: how a run ends on bad input (one place for every script).

A user error (a bad argument, a missing or corrupt file, a value the code refuses) ends with
one line on stderr, ``<prog>: error: <message>``, and exit status 2; the message names the
input and the fix. Any other exception is one line too, with its type and a hint, and exit
status 1. ``RHEO_DEBUG=1`` in the environment shows the full traceback instead. Ctrl-C is
exit status 130. A reader that stops reading (``| head -c 10``) ends the command quietly, with the
status of a process ended by SIGPIPE (141), as ``cat`` does: the output was cut on purpose.

    from rheo.cli import ArgumentParser, run_main
    ...
    if __name__ == "__main__":
        run_main(main)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Callable, Iterator, NoReturn, Optional

DEBUG_ENV = "RHEO_DEBUG"
#: the name a script run by the ``rheo`` command goes by ("rheo tables"): set_program
_PROGRAM: list[str] = []
PIPE_CLOSED = 141  # 128 + SIGPIPE: the exit status of a writer whose reader went away
#: exceptions that mean "the input is wrong": reported as one line with exit status 2
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError)


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def one_line(message: object) -> str:
    """``message`` on one line (whitespace runs collapsed; Hydra's config search path dropped)."""
    text = str(message).split("\nConfig search path:")[0]
    return " ".join(text.split())


def is_user_error(error: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """A wrong input rather than a bug: one of :data:`USER_ERRORS` or ``extra``, or a project error
    whose class says so (``user_error = True``: corrupt files, unusable output folders)."""
    return isinstance(error, USER_ERRORS + extra) or bool(getattr(error, "user_error", False))


def set_program(name: str) -> None:
    """Call the script about to run ``name`` in its usage line and errors (``rheo tables`` runs
    scripts/make_tables.py, whose --help then says "usage: rheo tables ...")."""
    _PROGRAM[:] = [name]


def program_name() -> str:
    """The name errors and usage lines give the running program."""
    return _PROGRAM[0] if _PROGRAM else Path(sys.argv[0]).name


def fail(message: object, prog: Optional[str] = None, code: int = 2) -> NoReturn:
    """Print ``<prog>: error: <message>`` (one line) to stderr and exit with ``code``."""
    prog = prog or program_name()
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def fail_lines(message: str, prog: Optional[str] = None, code: int = 2) -> NoReturn:
    """``<prog>: error: <first line>`` then the message's other lines as they are (an error whose class
    sets ``multi_line = True``: its first line is self-contained, the rest are the fix's details)."""
    first, *rest = str(message).splitlines() or [""]
    print(f"{prog or program_name()}: error: {one_line(first)}", *rest, sep="\n", file=sys.stderr, flush=True)
    raise SystemExit(code)


@contextlib.contextmanager
def errors_as_one_line(prog: Optional[str] = None,
                       user_errors: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Inside the block, an exception ends the process as described in the module doc
    (KeyboardInterrupt and SystemExit pass through)."""
    try:
        yield
    except BrokenPipeError:
        quiet_pipe_end()
    except Exception as e:  # noqa: BLE001 -- the one place where every error becomes one line
        if debug():
            raise
        message = str(e)
        if e.__cause__ is not None and str(e.__cause__) not in message:  # Hydra: "Error merging override x"
            message += f": {e.__cause__}"
        if _yaml_message(e):
            fail(_yaml_message(e), prog)
        if is_user_error(e, user_errors):
            if getattr(e, "multi_line", False):  # a fix and a list of places: the first line stands alone
                fail_lines(str(e), prog)
            fail(message, prog)
        fail(f"{type(e).__name__}: {message} (an unexpected error: rerun with {DEBUG_ENV}=1 for the traceback)",
             prog, 1)


def quiet_pipe_end() -> NoReturn:
    """The reader of stdout went away: end without a message (stdout pointed at /dev/null, so that
    the interpreter's last flush does not complain) and with status PIPE_CLOSED."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(PIPE_CLOSED)


def _yaml_message(error: BaseException) -> Optional[str]:
    """A YAML file that cannot be read (an experiment or config file) as ``FILE:LINE: what``: a user
    error, not an unexpected one; None for any other error."""
    mark = getattr(error, "problem_mark", None)
    if type(error).__module__.split(".")[0] != "yaml" or mark is None:
        return None
    fix = "give each key once" if "duplicate key" in str(error.problem) else "fix the YAML"
    return f"{mark.name}:{mark.line + 1}: {error.problem}: {fix} in that file"


def run_main(main: Callable[[], Optional[int]], prog: Optional[str] = None,
             user_errors: tuple[type[BaseException], ...] = ()) -> NoReturn:
    """Run ``main()`` and exit with its return value; errors end as described in the module doc."""
    try:
        with errors_as_one_line(prog, user_errors):
            code = main()
    except KeyboardInterrupt:
        fail("interrupted (Ctrl-C)", prog, 130)
    except SystemExit as stop:  # raise SystemExit("message"): the scripts' own refusals
        if isinstance(stop.code, str):
            fail(stop.code, prog)
        raise
    raise SystemExit(code or 0)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line naming the argument (``--help`` lists them all)."""

    def __init__(self, *args, **kwargs) -> None:
        if not args and "prog" not in kwargs and _PROGRAM:
            kwargs["prog"] = _PROGRAM[0]
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see --help)", self.prog)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _number(text, float)
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


#: the seeds torch.Generator.manual_seed takes: [-2**63, 2**64 - 1]
SEED_RANGE = (-(2**63), 2**64 - 1)


def seed_arg(text: str) -> int:
    """An integer seed torch accepts (argparse type), refused before anything loads otherwise."""
    value = _number(text, int)
    if not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
        raise argparse.ArgumentTypeError(f"seed {text} is outside [{SEED_RANGE[0]}, {SEED_RANGE[1]}] (what "
                                         f"torch.Generator.manual_seed takes): give a smaller seed")
    return value


def text_input(value: str, what: str = "prompt") -> str:
    """A text argument of a command line, the one place such input is read: ``-`` is stdin, ``@FILE`` a
    file (for text longer than the shell passes), ``@@text`` the text ``@text`` (a text that starts with
    ``@``), anything else the text itself. The text must be UTF-8: other bytes are refused in one line
    naming where they are."""
    if value == "-":
        data, source = sys.stdin.buffer.read(), "stdin"
    elif value.startswith("@@"):  # the escape: one @ dropped, the rest is the text
        data, source = value[1:].encode("utf-8", "surrogateescape"), f"the {what} argument"
    elif value.startswith("@") and len(value) > 1:
        path = Path(value[1:]).expanduser()
        if not path.is_file():
            raise ValueError(f"{what} file {path} does not exist (or is not a file): give @FILE of a text file, "
                             f"- for stdin, or the {what} itself (a {what} that starts with @ is written @@..., "
                             f"e.g. @{value} for {value})")
        data, source = path.read_bytes(), str(path)
    else:
        data, source = value.encode("utf-8", "surrogateescape"), f"the {what} argument"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} from {source} is not UTF-8 text (byte 0x{data[e.start]:02x} at position "
                         f"{e.start}): convert it to UTF-8 (e.g. iconv -t utf-8)") from None


def path_arg(text: str) -> Path:
    """argparse type: a non-empty path (``make tables RESULTS=`` passes an empty one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (a make variable set to nothing, e.g. RESULTS=?): give a path")
    return Path(text)


def _number(text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
