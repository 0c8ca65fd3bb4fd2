"""Error handlers: ``MPI.Errhandler`` handles, and how MPI calls route errors through them.

:class:`Errhandler` is a handle to a handler object: a predefined one (``ERRORS_RETURN``,
``ERRORS_ARE_FATAL``, ``ERRORS_ABORT``) or a user function. As with every MPI handle, here
a handler is only data; the object it is attached to applies it.

:func:`mpi_call` wraps every public method of an MPI object: an
``MPI.Exception`` raised inside goes to the object's ``_raise``, which applies
the attached error handler (raise, end the job, or call the user's function
and raise); a fatal handler ends the job through ``process.PROCESS``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NoReturn, TypeVar, cast

from ..core.errors import ERR_ERRHANDLER
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, UserLimit, register
from .process import PROCESS

__all__ = [
    "ERRHANDLER_NULL",
    "ERRORS_ABORT",
    "ERRORS_ARE_FATAL",
    "ERRORS_RETURN",
    "Errhandler",
]  # what the MPI module exports; mpi_call and world_call serve the other modules

F = TypeVar("F", bound=Callable[..., Any])


def world_errhandler() -> Any:
    """The handler of COMM_WORLD: used for calls not tied to a live object."""
    world = PROCESS.world
    impl = world._impl if world is not None else None
    return impl.errhandler if impl is not None else ERRORS_RETURN


def raise_through_world(exc: MPIException, call: str) -> NoReturn:
    """Apply COMM_WORLD's error handler to ``exc`` of ``call``, a call not tied to an
    object; before ``Init`` and after ``Finalize``, raise it as it is."""
    world = PROCESS.world
    if world is None or world._impl is None:
        raise exc
    world._raise(exc, call)


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
            raise_through_world(exc, name)

    return cast(F, wrapper)


# --- Error handlers ----------------------------------------------------------------------

_HANDLER_KINDS = ("return", "fatal", "abort", "user", "null")


class _ErrhandlerImpl:
    """The error-handler object that handles refer to.

    ``kind`` is one of ``"return"``, ``"fatal"``, ``"abort"``, ``"user"``, ``"null"``;
    ``fn`` is the user function for ``"user"``; ``name`` is for display.
    """

    __slots__ = ("__weakref__", "fn", "kind", "name")

    def __init__(self, kind: str, fn: Callable[..., Any] | None, name: str) -> None:
        assert kind in _HANDLER_KINDS
        self.kind = kind
        self.fn = fn
        self.name = name


_NULL_IMPL = _ErrhandlerImpl("null", None, "ERRHANDLER_NULL")
_USER_HANDLERS = UserLimit(32, "error handlers")


class Errhandler(Handle):
    """A handle to an error handler.

    Several handles may refer to the same handler object: ``Errhandler(eh)`` and
    ``Comm.Get_errhandler()`` return new handles that compare equal to the one they copy.
    ``Free()`` turns this handle into ``ERRHANDLER_NULL`` and leaves other handles and the
    objects using the handler untouched (MPI-3.0 §2.3.4).
    """

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Errhandler", 5, ERR_ERRHANDLER, _NULL_IMPL)
    _impl: _ErrhandlerImpl

    @classmethod
    def _create_user(cls, fn: Callable[..., Any]) -> Errhandler:
        """Return a handle to a new user handler calling ``fn(obj, errorcode)``.

        As with mpi4py, at most 32 user handlers may be alive at once (``RuntimeError``).
        """
        if not callable(fn):
            raise TypeError(f"error handler function must be callable, not {type(fn).__name__}")
        name = getattr(fn, "__qualname__", None) or repr(fn)
        impl = _ErrhandlerImpl("user", fn, name)
        _USER_HANDLERS.take(impl)
        handle = object.__new__(cls)
        handle._impl = impl
        return handle

    @classmethod
    def _predefined(cls, kind: str, name: str) -> Errhandler:
        handle = object.__new__(cls)
        handle._impl = _NULL_IMPL if kind == "null" else _ErrhandlerImpl(kind, None, name)
        return handle

    @property
    def _kind(self) -> str:
        return self._impl.kind

    @property
    def _fn(self) -> Callable[..., Any] | None:
        return self._impl.fn

    @property
    def _name(self) -> str:
        return self._impl.name

    def Free(self) -> None:
        """Release this handle; it becomes ``ERRHANDLER_NULL``.

        Handles to predefined handlers may be freed too (``Get_errhandler`` returns new
        ones, MPI-2.2 §8.3.4); the module's constants (``MPI.ERRORS_RETURN``, ...) stay
        as they are. Freeing ``ERRHANDLER_NULL`` is ``ERR_ERRHANDLER``.
        """
        if self._impl is _NULL_IMPL:
            raise MPIException(ERR_ERRHANDLER, "cannot free the null error handler")
        self._drop()

    def _reduce_created(self) -> Any:
        raise ValueError(f"cannot pickle {self!r}: user-defined error handlers are local")

    def __repr__(self) -> str:
        impl = self._impl
        if impl.kind != "user":
            return f"MPI.{impl.name}"
        return f"<MPI.Errhandler user: {impl.name}>"


ERRHANDLER_NULL: Errhandler = Errhandler._predefined("null", "ERRHANDLER_NULL")
ERRORS_RETURN: Errhandler = Errhandler._predefined("return", "ERRORS_RETURN")
ERRORS_ARE_FATAL: Errhandler = Errhandler._predefined("fatal", "ERRORS_ARE_FATAL")
ERRORS_ABORT: Errhandler = Errhandler._predefined("abort", "ERRORS_ABORT")
register(globals(), ["ERRHANDLER_NULL", "ERRORS_RETURN", "ERRORS_ARE_FATAL", "ERRORS_ABORT"])
