"""Routing errors of MPI calls through error handlers, and the runtime's hooks.

:func:`mpi_call` wraps every public method of an MPI object: an
``MPI.Exception`` raised inside goes to the object's ``_raise``, which applies
the attached error handler (raise, end the job, or call the user's function
and raise). The runtime installs the hooks below at ``Init``: what a fatal
error and ``Abort`` do, and why a predefined communicator is unusable before
``Init`` or after ``Finalize``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NoReturn, TypeVar, cast

from ._errors import Exception as MPIException

__all__ = ["mpi_call", "world_call"]

F = TypeVar("F", bound=Callable[..., Any])

# (object, call name, exception) -> never returns: prints and ends the job.
fatal: Callable[[Any, str, MPIException], NoReturn] | None = None
# (error code, reason) -> never returns: ends every rank of the job.
abort: Callable[[int, str], NoReturn] | None = None
# () -> why predefined communicators cannot be used now ("MPI is not initialized").
state: Callable[[], str] | None = None


def world_errhandler() -> Any:
    """The handler of COMM_WORLD: used for calls not tied to a live object."""
    from ._errors import ERRORS_RETURN
    from ._runtime import COMM_WORLD

    impl = COMM_WORLD._impl
    return impl.errhandler if impl is not None else ERRORS_RETURN


def mpi_call(fn: F) -> F:
    """Route ``MPI.Exception`` raised by method ``fn`` through ``self._raise``."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except MPIException as exc:
            self._raise(exc, name)

    return cast(F, wrapper)


def world_call(fn: F) -> F:
    """Route ``MPI.Exception`` raised by module-level function ``fn`` through
    COMM_WORLD's error handler (calls not tied to an object use it)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MPIException as exc:
            from ._runtime import COMM_WORLD

            if COMM_WORLD._impl is None:
                raise
            COMM_WORLD._raise(exc, name)

    return cast(F, wrapper)
