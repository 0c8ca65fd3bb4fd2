"""``python -m mpi4py``: run Python code on ipympi's ranks, aborting on an uncaught exception.

mpi4py's answer to a classic deadlock: when one rank dies of an exception while the others
wait for it (in a ``recv``, a collective, or the synchronisation of ``Finalize``), the job
hangs. Run through ``python -m mpi4py``, an uncaught exception prints its traceback and then
ends the whole job with ``MPI.COMM_WORLD.Abort`` (status 1; a ``SystemExit`` with a status
aborts with that status, a ``KeyboardInterrupt`` with 130, as death by SIGINT would).
ipympi's launcher already ends a job whose rank fails, so under ``python -m ipympi.run``
the difference is only which status is reported; the command line is the same as
mpi4py's, for scripts and job files that use it::

    python -m mpi4py [options] <pyfile> [arg] ...
    python -m mpi4py [options] -m <mod> [arg] ...
    python -m mpi4py [options] -c <cmd> [arg] ...
    python -m mpi4py [options] - [arg] ...
"""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import types
from collections.abc import Sequence
from typing import Any, NoReturn

from .._version import __version__ as _ipympi_version
from ..mpi.rc import rc

__all__ = ["main", "run_command_line", "set_abort_status"]

MPI4PY_VERSION = "4.1.2"  # the mpi4py release whose API ipympi implements

_USAGE = """\
usage: python -m mpi4py [options] <pyfile> [arg] ...
   or: python -m mpi4py [options] -m <mod> [arg] ...
   or: python -m mpi4py [options] -c <cmd> [arg] ...
   or: python -m mpi4py [options] - [arg] ...
"""
_HELP = """\
options:
  --prefix             show install path and exit
  --version            show version number and exit
  --mpi-library        show MPI library path and exit
  --mpi-std-version    show MPI standard version and exit
  --mpi-lib-version    show MPI library version and exit
  -h|--help            show this help message and exit
  -rc <key=value,...>  set 'mpi4py.rc.key=value'
"""

_abort_status: int | None = None


def set_abort_status(status: Any) -> None:
    """At exit, end the job with ``MPI.COMM_WORLD.Abort(status)``.

    Call it in an ``except`` block and re-raise. ``status`` follows ``sys.exit``'s rules:
    ``None`` is 0, an int is itself, anything else is 1.
    """
    global _abort_status
    if _abort_status is None:
        atexit.register(_abort_at_exit)  # after MPI's own exit hook, so it runs before it
    _abort_status = _exit_status(status)


def _exit_status(status: Any) -> int:
    if status is None:
        return 0
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return 1


def _abort_at_exit() -> None:
    """``Abort`` the job with the recorded status, if MPI is running and it is not 0."""
    if not _abort_status:
        return
    MPI = sys.modules.get("ipympi.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(_abort_status)


def run_command_line(args: Sequence[str] | None = None) -> None:
    """Run ``[pyfile | -m mod | -c cmd | -] [arg] ...`` as the Python interpreter would.

    ``sys.argv`` becomes what the program would see run by ``python``; the code runs as
    ``__main__``.
    """
    argv = list(sys.argv[1:] if args is None else args)
    if not argv:
        raise ValueError("no program to run")
    first, rest = argv[0], argv[1:]
    if first == "-m":
        if not rest:
            raise ValueError("argument -m: expected a module name")
        sys.argv[:] = [rest[0], *rest[1:]]
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    elif first == "-c":
        if not rest:
            raise ValueError("argument -c: expected a command")
        sys.argv[:] = ["-c", *rest[1:]]
        _run_source(rest[0], "<string>")
    elif first == "-":
        sys.argv[:] = ["-", *rest]
        _run_source(sys.stdin.read(), "<stdin>")
    else:
        sys.argv[:] = [first, *rest]
        if os.path.isfile(first):  # run_path puts a directory or zip file there itself
            sys.path.insert(0, os.path.dirname(os.path.abspath(first)))
        runpy.run_path(first, run_name="__main__")


def _run_source(source: str, filename: str) -> None:
    """Run ``source`` in a fresh ``__main__`` module, as ``python -c`` and ``python -`` do."""
    code = compile(source, filename, "exec")
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.path.insert(0, "")
    exec(code, main.__dict__)


def _set_rc(text: str) -> None:
    """``-rc key=value,...``: set ``mpi4py.rc`` options; values are Python literals."""
    import ast

    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"-rc: expected key=value, got {item!r}")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        setattr(rc, key.strip(), parsed)


def _info(option: str) -> str:
    from .. import MPI

    if option == "--prefix":
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site", "mpi4py")
    if option == "--version":
        return f"mpi4py {MPI4PY_VERSION} (ipympi {_ipympi_version})"
    if option == "--mpi-library":
        return os.path.dirname(os.path.abspath(MPI.__file__))
    if option == "--mpi-std-version":
        major, minor = MPI.Get_version()
        return f"MPI {major}.{minor}"
    return MPI.Get_library_version().rstrip()


def _usage_error(message: str) -> NoReturn:
    sys.stderr.write(f"{message}\n{_USAGE}Try `python -m mpi4py -h` for more information.\n")
    sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """The command line ``python -m mpi4py [options] program [arg] ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    while args and args[0].startswith("-") and args[0] not in ("-", "-m", "-c"):
        option = args.pop(0)
        if option in ("-h", "--help"):
            sys.stdout.write(_USAGE + _HELP)
            sys.exit(0)
        if option in ("--prefix", "--version", "--mpi-library", "--mpi-std-version",
                      "--mpi-lib-version"):  # fmt: skip
            print(_info(option))
            sys.exit(0)
        if option in ("-rc", "--rc"):
            if not args:
                _usage_error(f"Argument expected for option: {option}")
            try:
                _set_rc(args.pop(0))
            except (TypeError, ValueError) as exc:
                _usage_error(f"Invalid -rc option: {exc}")
            continue
        _usage_error(f"Unknown option: {option}")
    if not args:
        _usage_error("No path specified for execution")
    try:
        run_command_line(args)
    except SystemExit as exc:
        set_abort_status(exc.code)
        raise
    except KeyboardInterrupt:  # the status of a death by SIGINT, as mpi4py gives
        set_abort_status(128 + signal.SIGINT)
        raise
    except BaseException:
        set_abort_status(1)
        raise
