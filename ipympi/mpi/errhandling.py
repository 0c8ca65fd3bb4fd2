"""Error handlers: ``MPI.Errhandler`` handles, and how MPI calls route errors through them.

:class:`Errhandler` is a handle to a handler object: a predefined one (``ERRORS_RETURN``,
``ERRORS_ARE_FATAL``, ``ERRORS_ABORT``) or a user function. As with every MPI handle, here
a handler is only data; the object it is attached to applies it.

:func:`mpi_call` wraps every public method of an MPI object: an
``MPI.Exception`` raised inside goes to the object's ``_raise``, which applies
the attached error handler (raise, end the job, or call the user's function
and raise); a fatal handler ends the job through ``process.PROCESS``.
:class:`ErrhandlerMethods` gives the objects a handler attaches to (communicators,
windows, files, sessions) their ``_raise`` and ``Get``/``Set``/``Call_errhandler``.
"""

from __future__ import annotations

import functools
import inspect
import operator
import os
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
    return cast(F, _routed(fn, method=True))


def world_call(fn: F) -> F:
    """Route ``MPI.Exception`` raised by module-level function ``fn`` through
    COMM_WORLD's error handler (calls not tied to an object use it)."""
    return cast(F, _routed(fn, method=False))


def _routed(fn: Callable[..., Any], method: bool) -> Callable[..., Any]:
    """``fn`` wrapped so that an ``MPI.Exception`` it raises goes to its object's
    handler (``method``: ``self._raise``, its first argument's) or COMM_WORLD's.

    The wrapper takes exactly ``fn``'s parameters, names and defaults (not ``*args,
    **kwargs``, whose packing cost ~200 ns in every MPI call): its code is made once
    per shape of parameter list (:func:`_maker`) and closed over ``fn`` and its
    defaults."""
    code = getattr(fn, "__code__", None)
    if code is None or (method and not code.co_argcount):
        raise TypeError(f"{fn!r}: an MPI call is a plain function (a method: self first)")
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    positional, keyword = names[:npos], names[npos : npos + nkw]
    rest = names[npos + nkw :]
    varargs = rest[0] if code.co_flags & inspect.CO_VARARGS else None
    if varargs is not None:
        rest = rest[1:]
    varkw = rest[0] if code.co_flags & inspect.CO_VARKEYWORDS else None
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    has_default = tuple(k in kwdefaults for k in keyword)
    shape = (method, positional, code.co_posonlyargcount, len(defaults), keyword, has_default)
    make = _maker(*shape, varargs, varkw)
    given = [kwdefaults[k] for k in keyword if k in kwdefaults]
    wrapper = make(fn, fn.__name__, raise_through_world, MPIException, *defaults, *given)
    return functools.update_wrapper(wrapper, fn)


# The file name of the wrappers' code: within the package, so that tracebacks and
# hang reports pass over their frames as ipympi's own (``core.tracebacks``).
_WRAPPERS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "<MPI call>")


@functools.cache
def _maker(
    method: bool,
    positional: tuple[str, ...],
    posonly: int,
    ndefaults: int,
    keyword: tuple[str, ...],
    has_default: tuple[bool, ...],
    varargs: str | None,
    varkw: str | None,
) -> Callable[..., Any]:
    """The factory of wrappers of one parameter list (see :func:`_routed`)."""
    params, args, given = [], [], []
    first_default = len(positional) - ndefaults
    for i, name in enumerate(positional):
        if i >= first_default:
            given.append(f"__d{i}")
            params.append(f"{name}=__d{i}")
        else:
            params.append(name)
        args.append(name)
        if i + 1 == posonly:
            params.append("/")
    if varargs is not None:
        params.append(f"*{varargs}")
        args.append(f"*{varargs}")
    elif keyword:
        params.append("*")
    for i, (name, default) in enumerate(zip(keyword, has_default)):
        if default:
            given.append(f"__k{i}")
        params.append(f"{name}=__k{i}" if default else name)
        args.append(f"{name}={name}")
    if varkw is not None:
        params.append(f"**{varkw}")
        args.append(f"**{varkw}")
    handle = f"{positional[0]}._raise(__exc, __name)" if method else "__world(__exc, __name)"
    source = (
        f"def make(__fn, __name, __world, __error, {', '.join(given)}):\n"
        f"    def wrapper({', '.join(params)}):\n"
        f"        try:\n"
        f"            return __fn({', '.join(args)})\n"
        f"        except __error as __exc:\n"
        f"            {handle}\n"
        f"    return wrapper\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, _WRAPPERS_FILE, "exec"), namespace)
    return namespace["make"]


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


class ErrhandlerMethods:
    """``_raise`` and ``Get``/``Set``/``Call_errhandler`` of an object a handler attaches
    to (a mixin of ``Comm``, ``Win``, ``File`` and ``Session``).

    The object's ``_impl`` (None for its null handle) holds the ``errhandler``;
    ``_live()`` returns the impl or raises the null handle's error. A null handle
    applies :meth:`_null_errhandler` (COMM_WORLD's unless the class says otherwise);
    :meth:`_errhandler_holder` is what ``Get``/``Set``/``Call_errhandler`` work on (the
    live impl; ``FILE_NULL`` keeps the default of new files instead).
    """

    __slots__ = ()
    _impl: Any
    _live: Callable[[], Any]
    _call_prefix = ""  # how a fatal error names the class's calls ("File." for files)
    _null_handler_class = ERR_ERRHANDLER  # the class of Set_errhandler(ERRHANDLER_NULL)

    def _null_errhandler(self) -> Any:
        return world_errhandler()

    def _errhandler_holder(self) -> Any:
        return self._live()

    def _apply_errhandler(self, handler: Any, call: str, exc: MPIException, code: int) -> None:
        kind = getattr(handler, "_kind", "return")
        if kind in ("fatal", "abort") and PROCESS.started:
            PROCESS.fatal(self, self._call_prefix + call, exc)
        fn = getattr(handler, "_fn", None)
        if kind == "user" and fn is not None:
            fn(self, code)

    def _raise(self, exc: MPIException, call: str, code: int | None = None) -> NoReturn:
        """Apply this object's error handler to ``exc`` raised by ``call``, then raise it.

        A user handler gets ``code`` when given: for ``ERR_IN_STATUS`` the standard
        passes the failing request's own error code (MPI-3.0 §2.3.1).
        """
        impl = self._impl
        handler = self._null_errhandler() if impl is None else impl.errhandler
        self._apply_errhandler(handler, call, exc, exc.Get_error_code() if code is None else code)
        raise exc

    @mpi_call
    def Get_errhandler(self) -> Errhandler:
        """A new handle to the error handler attached to this object."""
        return Errhandler(self._errhandler_holder().errhandler)

    @mpi_call
    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Attach ``errhandler`` to this object."""
        holder = self._errhandler_holder()
        if not isinstance(errhandler, Errhandler):
            raise TypeError(
                f"Set_errhandler: expected an MPI.Errhandler, got {type(errhandler).__name__}"
            )
        if not errhandler:
            raise MPIException(
                self._null_handler_class, "Set_errhandler: ERRHANDLER_NULL cannot be attached"
            )
        holder.errhandler = Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the error handler as if a call on this object had failed with ``errorcode``."""
        errorcode = operator.index(errorcode)
        handler = self._errhandler_holder().errhandler
        self._apply_errhandler(handler, "Call_errhandler", MPIException(errorcode), errorcode)
