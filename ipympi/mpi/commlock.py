"""Per-communicator locks of lower-case collectives, as mpi4py keeps them.

mpi4py gives each communicator a table of ``threading.Lock`` objects, made on
first use (``MPI._comm_lock_table(comm)``; ``MPI._comm_lock(comm, key)`` gets or
makes one). Its lower-case ``bcast``, ``gather``, ``scatter``, ``allgather`` and
``alltoall`` each hold the lock of their name for the whole call, so that threads
of a rank run those calls on one communicator one at a time: a program (or
a library on top of mpi4py) that holds ``_comm_lock(comm, "bcast")`` keeps the
rank's other threads out of ``comm.bcast`` meanwhile. ipympi keeps the same
table (``CommImpl.locks``; ``MPI._comm_lock*`` are in ``mpi.comm``) and takes the
same locks (:func:`comm_locked`), so such programs behave alike. The table
belongs to the communicator, not to a handle: ``Comm(comm)`` shares it, ``Dup``
starts an empty one, and ``Free`` drops it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Hashable
from typing import Any, Callable, TypeVar, cast

__all__ = ["comm_locked", "lock_of", "table_of"]

F = TypeVar("F", bound=Callable[..., Any])

_making = threading.Lock()  # makes tables and locks one thread at a time


def table_of(impl: Any) -> dict[Hashable, Any]:
    """The lock table of a communicator's state (a ``CommImpl``), made on first use."""
    table = impl.locks
    if table is None:
        with _making:
            table = impl.locks
            if table is None:
                table = impl.locks = {}
    return cast("dict[Hashable, Any]", table)


def lock_of(impl: Any, key: Hashable) -> Any:
    """The lock for ``key`` of a communicator's state, made on first use."""
    table = table_of(impl)
    lock = table.get(key)
    if lock is None:
        with _making:
            lock = table.setdefault(key, threading.Lock())
    return lock


def comm_locked(fn: F) -> F:
    """Run lower-case collective method ``fn`` holding its communicator's lock
    named after it (see the module docstring)."""
    key = fn.__name__

    @functools.wraps(fn)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        impl = self._impl or self._live()
        table = impl.locks  # lock_of, inline once the lock exists: a hot path
        lock = (table.get(key) if table is not None else None) or lock_of(impl, key)
        lock.acquire()  # not ``with``: it costs twice as much
        try:
            return fn(self, *args, **kwargs)
        finally:
            lock.release()

    return cast(F, locked)
