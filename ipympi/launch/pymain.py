"""Run a Python program in a forked process as ``python PROG ...`` would run it.

A rank forked from the launcher's template (:mod:`ipympi.launch.template`) is a Python
process already, with what ranks need imported. :func:`plan` decides whether a rank's
command line can run that way: it must start this very interpreter (``sys.executable``,
or another name of it in the same folder, not some other Python or a venv's) with no
interpreter option, followed by a script, ``-m MODULE`` or ``-c CODE``. Anything else
(``-O``, ``-X dev``, ``-u``, ``-I``, another Python, a non-Python program, a folder or
zip to run, a program read from stdin) returns None and is started with exec, as before.

:func:`run` then does in the child what the interpreter's own start does: ``sys.argv``;
``sys.orig_argv``, ``sys.path[0]`` (the script's folder with symbolic links resolved, the working
directory for ``-m``, ``''`` for ``-c``); a fresh ``__main__`` module the program runs
in (so ``if __name__ == "__main__"`` and pickling classes defined there work); the exit
status of ``sys.exit(n)`` (an uncaught exception prints its traceback through
``sys.excepthook`` and gives 1, an uncaught ``KeyboardInterrupt`` ends the process by
SIGINT as Python does); and at the end what ``Py_Finalize`` does that users see:
non-daemon threads are joined, ``atexit`` handlers run, a real mpi4py's MPI is finalized,
and stdout and stderr are flushed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["Plan", "plan", "run", "same_interpreter"]

# {"kind": "script" | "module" | "code", "target": str, "argv": sys.argv, "orig_argv": [...]},
# and "cwd" (str) to run in another folder
Plan = dict[str, Any]


def same_interpreter(program: str, environ: dict[str, str] | None = None) -> bool:
    """Whether ``program`` (a path or a name on ``PATH``) starts this interpreter.

    The same file, or another name of it in the same folder (``python`` beside
    ``python3.11``): a venv's ``python`` links to the system's, but is another Python.
    """
    path = program if os.sep in program else shutil.which(program, path=(environ or {}).get("PATH"))
    if path is None:
        return False
    mine = os.path.abspath(sys.executable)
    path = os.path.abspath(path)
    if path == mine:
        return True
    return os.path.dirname(path) == os.path.dirname(mine) and os.path.realpath(
        path
    ) == os.path.realpath(mine)


def plan(argv: Sequence[str], environ: dict[str, str] | None = None) -> Plan | None:
    """How to run ``argv`` in a forked rank, or None when it must be exec'd (see above)."""
    if len(argv) < 2 or not same_interpreter(argv[0], environ):
        return None
    first, rest = argv[1], list(argv[2:])
    if first in ("-m", "-c"):
        if not rest or not rest[0]:
            return None
        kind = "module" if first == "-m" else "code"
        return {"kind": kind, "target": rest[0], "argv": [first, *rest[1:]], "orig_argv": [*argv]}
    if first.startswith("-"):  # an interpreter option, or "-" (the program on stdin)
        return None
    if os.path.isdir(first) or (os.path.isfile(first) and _is_zip(first)):
        return None
    return {"kind": "script", "target": first, "argv": [first, *rest], "orig_argv": [*argv]}


def _is_zip(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _fresh_main() -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    return main


def _start(spec: Plan) -> int | None:
    """Run the program; None when it ran to its end, else the status it could not start with."""
    kind, target = spec["kind"], spec["target"]
    if spec.get("cwd"):  # a spawned process's working directory (``wdir``)
        os.chdir(spec["cwd"])
    sys.argv = list(spec["argv"])
    if hasattr(sys, "orig_argv"):  # Python 3.10 and later
        sys.orig_argv = list(spec["orig_argv"])  # type: ignore[attr-defined,unused-ignore]
    main = _fresh_main()
    if kind == "module":
        import runpy

        sys.path[0] = os.getcwd()
        # What ``python -m`` itself calls: runs in __main__, sets sys.argv[0] to the file.
        runpy._run_module_as_main(target)  # type: ignore[attr-defined]
        return None
    if kind == "code":
        sys.path[0] = ""
        exec(compile(target, "<string>", "exec"), main.__dict__)
        return None
    try:
        with open(target, "rb") as file:
            source = file.read()
    except OSError as exc:
        name, path = os.path.basename(sys.executable), os.path.abspath(target)
        reason = f"[Errno {exc.errno}] {exc.strerror}"
        print(f"{name}: can't open file {path!r}: {reason}", file=sys.stderr)
        return 2
    sys.path[0] = os.path.dirname(os.path.realpath(target))
    from importlib.machinery import SourceFileLoader

    path = os.path.abspath(target)  # as Python 3.9 and later name the script
    main.__file__ = path
    main.__dict__["__cached__"] = None
    main.__loader__ = SourceFileLoader("__main__", path)
    exec(compile(source, path, "exec"), main.__dict__)
    return None


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def run(spec: Plan) -> int:
    """Run the program of ``spec`` (from :func:`plan`) here; the process's exit status.

    Call it as the body of a forked child, which then ends with ``os._exit``.
    """
    interrupted = False
    try:
        status = _start(spec)
        status = 0 if status is None else status
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        with contextlib.suppress(BaseException):
            exc.__traceback__ = _program_frames(exc.__traceback__)
            sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    status = _finalize(status)
    if interrupted:  # as Python does: die by SIGINT, so the shell sees the interrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def _program_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without this module's own frames at its head: the traceback starts where
    ``python PROG`` would start it, in the program (or in runpy for ``-m``)."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _finalize(status: int) -> int:
    """What the interpreter does at exit: join threads, run ``atexit``, flush. An
    exception there (SystemExit included) is reported and changes nothing else."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            sys.excepthook(type(exc), exc, exc.__traceback__)
    atexit._run_exitfuncs()
    _finalize_real_mpi()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            if stream is sys.stdout:
                status = 120  # as Python does when stdout cannot be flushed at exit
    return status


def _finalize_real_mpi() -> None:
    """End a real mpi4py's MPI as the interpreter's end would (``--no-mpi4py-name``).

    mpi4py calls ``MPI_Finalize`` from a ``Py_AtExit`` function, which a process that
    ends with ``os._exit`` never runs: without it, MPICH keeps the shared-memory file in
    ``/dev/shm`` that each of its worlds maps. mpi4py's ``rc.finalize = False`` is obeyed,
    and ipympi's own ``mpi4py.MPI`` (``ipympi.MPI``) is left alone: ``atexit`` ended it.
    """
    module = sys.modules.get("mpi4py.MPI")
    if module is None or getattr(module, "__name__", None) != "mpi4py.MPI":
        return
    rc = getattr(sys.modules.get("mpi4py"), "rc", None)
    if getattr(rc, "finalize", None) is False:
        return
    with contextlib.suppress(Exception):
        if module.Is_initialized() and not module.Is_finalized():
            module.Finalize()
