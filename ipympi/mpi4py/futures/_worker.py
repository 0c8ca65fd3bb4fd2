"""The worker side of :mod:`ipympi.mpi4py.futures`: serve the tasks a master sends.

A worker belongs to the remote group of the master's intercommunicator. It waits for a
message from the master (rank 0 of that remote group) and answers each with one
message: the outcome of the task ``("task", fn, args, kwargs)``, or of the preparation
``("init", number, options)`` for an executor's tasks; ``("stop",)`` ends it. An outcome
is ``(True, result)`` or ``(False, exception)``; one that cannot be pickled is replaced
by an exception saying so. The exception reaches the master with the worker's traceback
as its cause (a :class:`RemoteTraceback`), so that what the master prints when the task's
result is asked for shows where in the worker the task failed. A master whose
``__main__`` is a notebook's packs its messages by value (:mod:`ipympi.mpi.byvalue`):
the functions and classes of its cells are rebuilt here, in a namespace of their own.

While a worker serves, :func:`get_comm_workers` returns the intracommunicator of all the
workers, for tasks that communicate among themselves.

Under ``python -m mpi4py.futures`` the workers first run the program under the module
name ``__worker__`` (which is also made ``__main__``), so that the functions it defines
can be unpickled; its ``if __name__ == '__main__':`` part does not run there.
"""

from __future__ import annotations

import builtins
import pickle
import runpy
import sys
import traceback
import types
from collections.abc import Sequence
from typing import Any, cast

from ... import MPI
from ...mpi import byvalue
from ._pools import PACKED, RESULT_TAG, TASK_TAG, run_initializer

__all__ = ["RemoteTraceback", "get_comm_workers", "import_main", "serve"]

_comm_workers: list[MPI.Intracomm] = []
_notebook: list[types.ModuleType] = []  # what a notebook master sent by value (see below)


def _notebook_namespace(own_main: bool) -> dict[str, Any]:
    """The globals of the functions a notebook master sends by value, and of what they
    read: a ``__main__`` module of their own. In a process that is only a worker
    (``own_main``: the spawned server) it becomes this process's ``__main__``, so that
    results made of the notebook's classes go back by reference, as the notebook's own
    ``__main__`` names them; a process serving besides a program of its own (a rank of
    ``MPICommExecutor``, a notebook's engine) keeps its ``__main__``."""
    if not _notebook:
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = builtins
        if own_main:
            sys.modules["__main__"] = module
        _notebook.append(module)
    return _notebook[0].__dict__


def get_comm_workers() -> MPI.Intracomm:
    """Access an intracommunicator grouping MPI worker processes.

    ``MPI.COMM_NULL`` outside a worker.
    """
    return _comm_workers[-1] if _comm_workers else cast(MPI.Intracomm, MPI.COMM_NULL)


def serve(comm: MPI.Intercomm, workers: MPI.Intracomm, own_main: bool = False) -> None:
    """Serve the master across ``comm`` until it says stop (``own_main``: this process
    does nothing else, see :func:`_notebook_namespace`)."""
    _comm_workers.append(workers)
    try:
        while True:
            try:
                message = comm.recv(None, 0, TASK_TAG)
                if message[0] == PACKED:
                    message = byvalue.loads(message[1], _notebook_namespace(own_main))
            except MPI.Exception:
                raise
            except Exception as exc:  # a task that cannot be unpickled here: its outcome
                _answer(comm, (False, _Raised(exc, workers)))
                continue
            if message[0] == "stop":
                return
            try:
                if message[0] == "init":
                    run_initializer(message[2])
                    outcome: tuple[bool, Any] = (True, None)
                else:
                    _, fn, args, kwargs = message
                    outcome = (True, fn(*args, **kwargs))
            except BaseException as exc:
                outcome = (False, _Raised(exc, workers))
            _answer(comm, outcome)
    finally:
        _comm_workers.pop()


class RemoteTraceback(Exception):
    """The traceback, as text, of an exception that a task raised in a worker."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _Raised:
    """An exception raised by a task, on its way to the master with its traceback.

    Tracebacks cannot be pickled, nor is an exception's ``__cause__``: the traceback
    travels as text and is attached again where the exception is unpickled.
    """

    def __init__(self, exc: BaseException, workers: MPI.Intracomm) -> None:
        where = f"Worker {workers.Get_rank()} of {workers.Get_size()} on {MPI.Get_processor_name()}"
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.exc = exc
        self.text = f'\n### {where}\n"""\n{text}"""'

    def __reduce__(self) -> tuple[Any, tuple[BaseException, str]]:
        return _with_cause, (self.exc, self.text)


def _with_cause(exc: BaseException, text: str) -> BaseException:
    exc.__cause__ = RemoteTraceback(text)
    return exc


def _answer(comm: MPI.Intercomm, outcome: tuple[bool, Any]) -> None:
    try:
        comm.send(outcome, 0, RESULT_TAG)
    except Exception as exc:  # the result or exception cannot be pickled
        error = pickle.PicklingError(f"cannot send the outcome of a task: {exc!r}")
        comm.send((False, error), 0, RESULT_TAG)


def import_main(argv: Sequence[str]) -> None:
    """Run the program that ``argv`` names (``file``, ``-m module`` or ``-c code``) as
    the module ``__worker__``, and make it ``__main__`` too."""
    if not argv or argv[0] == "-":
        return
    sys.argv[:] = list(argv)
    if argv[0] == "-m":
        namespace = runpy.run_module(argv[1], run_name="__worker__", alter_sys=False)
        module = types.ModuleType("__worker__")
        module.__dict__.update(namespace)
    elif argv[0] == "-c":
        module = types.ModuleType("__worker__")
        sys.modules["__worker__"] = module
        exec(compile(argv[1], "<string>", "exec"), module.__dict__)
    else:
        namespace = runpy.run_path(argv[0], run_name="__worker__")
        module = types.ModuleType("__worker__")
        module.__dict__.update(namespace)
        module.__file__ = argv[0]
    sys.modules["__worker__"] = module
    sys.modules["__main__"] = module
