"""``python -m ipympi.run -n N PROGRAM [ARGS...]``: run an MPI program on N ranks.

The same command as ``ipympi run`` and ``python -m ipympi run``, and used like
``mpiexec -n N``. This module only reads the command line; :mod:`ipympi._launcher`
runs the job.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Callable

from ._launcher import DEADLOCK_STATUS, PROG, TIMEOUT_STATUS, run_job

__all__ = ["main", "program_argv"]

_DESCRIPTION = """\
Run PROGRAM on N ranks of ipympi's built-in MPI, like mpiexec -n N. PROGRAM is
a .py file (run with this Python), -m MODULE or -c CODE (likewise), or any
executable. The output of every rank is forwarded line by line. When a rank
fails or calls Abort, the other ranks are ended and the exit status is that
rank's (128+n for death by signal n, the error code for Abort); Ctrl-C is
forwarded to every rank.
"""

_EPILOG = f"""\
deadlocks: when no rank can progress (every running rank has been blocked in
one MPI call for a while, with no message moving: the ranks wait on each other
or on ranks that have exited), the job is ended within about a second: the
launcher prints the wait-for graph, e.g. "deadlock: rank 0 waits in
recv(source=1, tag=7) on MPI_COMM_WORLD; rank 1 waits in recv(source=0, tag=7)
on MPI_COMM_WORLD", and what every rank is doing, interrupts the ranks and
exits with status {DEADLOCK_STATUS}. A rank that computes, a long transfer or
a loop of short waits is not a deadlock. --no-deadlock-check turns this off.

exit status: 0 when every rank exits 0; else the first failing rank's status,
the error code of Abort, {TIMEOUT_STATUS} after --timeout, {DEADLOCK_STATUS} for a deadlock,
126 (127) when PROGRAM cannot be run (found), 128+n after signal n.
"""

# Launcher options that take a value in the next argument.
_VALUED = frozenset({"-n", "-np", "--np", "--timeout"})


def program_argv(command: Sequence[str]) -> list[str]:
    """The argv that runs ``command`` (``PROGRAM [ARGS...]``) on each rank.

    ``x.py``, ``-m MODULE`` and ``-c CODE`` run with this Python (like
    ``mpi4py.run``); anything else is an executable run as given.
    """
    if not command:
        raise ValueError("missing PROGRAM (a .py file, -m MODULE, -c CODE or an executable)")
    first, rest = command[0], list(command[1:])
    if first in ("-m", "-c"):
        if not rest:
            raise ValueError(f"argument {first}: expected one argument")
        return [sys.executable, first, *rest]
    if first.endswith(".py"):
        return [sys.executable, first, *rest]
    return [first, *rest]


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` into the launcher's options and ``PROGRAM [ARGS...]``.

    Launcher options end at ``--``, at ``-m``/``-c``, or at the first argument
    that is not an option; everything after belongs to the program.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return list(argv[:i]), list(argv[i + 1 :])
        if arg in ("-m", "-c") or not arg.startswith("-") or arg == "-":
            return list(argv[:i]), list(argv[i:])
        i += 2 if arg in _VALUED else 1
    return list(argv), []


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: ``kind`` of the text, which must be positive."""

    def convert(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    convert.__name__ = getattr(kind, "__name__", "value")  # argparse names it in errors
    return convert


def make_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of the launcher's own options."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [-h] [-n N] [--tag-output] [--timeout S] [--no-deadlock-check] [--] "
        "(PROGRAM | -m MODULE | -c CODE) [ARGS...]",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n", "-np", "--np", dest="np", metavar="N", type=_positive(int), default=1,
        help="number of ranks (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--tag-output", action="store_true",
        help="prefix every line of output (stdout and stderr) with [RANK]",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", metavar="S", type=_positive(float), default=None,
        help="after S seconds, report what every rank is doing, end the job "
        f"and exit with status {TIMEOUT_STATUS}",
    )  # fmt: skip
    parser.add_argument(
        "--no-deadlock-check", dest="deadlock_check", action="store_false",
        help="do not end the job when no rank can progress (a deadlock then "
        "lasts until --timeout, if any)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = make_parser(prog)
    options, command = _split(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(options)
    try:
        program = program_argv(command)
    except ValueError as exc:
        parser.error(str(exc))
    return run_job(
        program,
        args.np,
        tag_output=args.tag_output,
        timeout=args.timeout,
        deadlock_check=args.deadlock_check,
    )


if __name__ == "__main__":
    sys.exit(main())
