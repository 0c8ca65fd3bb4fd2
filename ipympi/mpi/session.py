"""The sessions model (MPI 4, §11.3): ``MPI.Session`` and its process sets.

A session is a handle to local state: its hints, its error handler and its own
buffer for buffered sends. ``Session.Init`` works with or without the world
model: the first session of a program that never called ``MPI.Init`` joins the
other ranks (:func:`ipympi.mpi.runtime.start_engine`) without making
``COMM_WORLD`` usable, and ``MPI.Is_initialized()`` stays false. The engine of a
program that uses sessions only is closed at exit (:func:`_end_at_exit`), once its
outgoing messages have left.

Two process sets exist, as the standard mandates: ``mpi://WORLD`` (every rank the
launcher started) and ``mpi://SELF`` (this process). ``Create_group`` makes their
groups, and ``Intracomm.Create_from_group`` (:mod:`ipympi.mpi.groupcreate`) the
communicators. A name that is neither is ``ERR_ARG``; a call on a finalized or null
session is ``ERR_SESSION``; errors of a session's calls go through its handler.

Not done: ipympi cannot restart its engine, so a session cannot begin after the
world model's ``Finalize`` (``ERR_OTHER``).
"""

from __future__ import annotations

import atexit
import operator
from typing import Any, Callable

from ..core.constants import THREAD_MULTIPLE
from ..core.errors import ERR_ARG, ERR_ERRHANDLER, ERR_OTHER, ERR_SESSION
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from . import bsend as _bsend
from . import runtime as _runtime
from .commbuild import hints_of
from .errhandling import ERRORS_RETURN, Errhandler, ErrhandlerMethods, mpi_call
from .group import Group
from .info import INFO_NULL, new_info
from .process import PROCESS
from .request import Request

__all__ = ["SESSION_NULL", "Session"]

WORLD, SELF = "mpi://WORLD", "mpi://SELF"
PSETS = (WORLD, SELF)
THREAD_LEVEL_KEY = "mpi_thread_support_level"
_LEVEL_NAMES = ("MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED")


class _SessionImpl:
    """What a session is: its hints, error handler and buffer for buffered sends."""

    __slots__ = ("__weakref__", "bsend", "errhandler", "hints", "name")

    def __init__(self, hints: dict[str, str], errhandler: Errhandler) -> None:
        self.hints = hints
        self.errhandler = errhandler
        self.bsend: Any = None  # its attached buffer (``mpi.bsend.Pool``)
        self.name = "a session"


def pset_ranks(name: str, call: str) -> list[int]:
    """The world ranks of process set ``name``, or ``ERR_ARG`` for an unknown name."""
    engine = PROCESS.live_engine(call)
    if name == WORLD:
        return list(PROCESS.world_ranks)
    if name == SELF:
        return [engine.rank]
    raise MPIException(
        ERR_ARG, f"{call}: unknown process set {name!r} (the process sets are {', '.join(PSETS)})"
    )


class Session(ErrhandlerMethods, Handle):
    """An MPI session: access to MPI without the world model."""

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Session", 14, ERR_SESSION, None)
    _impl: _SessionImpl | None

    def _live(self) -> _SessionImpl:
        impl = self._impl
        if impl is None:
            raise MPIException(ERR_SESSION, "invalid session: SESSION_NULL (null or finalized)")
        return impl

    def _null_errhandler(self) -> Errhandler:
        return ERRORS_RETURN  # SESSION_NULL's calls return their errors

    def __repr__(self) -> str:
        return "MPI.SESSION_NULL" if self._impl is None else "<MPI.Session>"

    # -- starting and ending ---------------------------------------------------------
    @classmethod
    def Init(cls, info: Any = INFO_NULL, errhandler: Any = None) -> Any:
        """A new session with the hints of ``info`` and ``errhandler`` (by default the
        one ``rc.errors`` gives, ``ERRORS_RETURN`` unless set otherwise, as in mpi4py:
        :func:`~ipympi.mpi.runtime.default_errhandler`); joins the other ranks if MPI is
        not running yet."""
        handler = _runtime.default_errhandler() if errhandler is None else errhandler
        if not isinstance(handler, Errhandler):
            raise TypeError(f"Init: expected an MPI.Errhandler, got {type(handler).__name__}")
        session = object.__new__(cls)
        session._impl = _SessionImpl({}, Errhandler(handler))
        try:
            if not handler:
                raise MPIException(ERR_ERRHANDLER, "Init: ERRHANDLER_NULL cannot be attached")
            session._impl.hints = hints = hints_of(info, "Init")
            if PROCESS.finalized:
                raise MPIException(
                    ERR_OTHER, "Session.Init: MPI has been finalized and cannot be restarted"
                )
            if not PROCESS.started:
                _runtime.start_engine()
                atexit.register(_end_at_exit)
        except MPIException as exc:
            if not handler:
                raise
            session._raise(exc, "Init")  # the handler of Init's errors is its argument
        level = PROCESS.thread_level if PROCESS.initialized else THREAD_MULTIPLE
        hints[THREAD_LEVEL_KEY] = (
            _LEVEL_NAMES[level] if level < len(_LEVEL_NAMES) else "MPI_THREAD_MULTIPLE"
        )
        PROCESS.sessions += 1
        return session

    @mpi_call
    def Finalize(self) -> None:
        """End the session (its buffer's messages leave first); the handle becomes null."""
        impl = self._live()
        _bsend.detach(PROCESS.engine, impl)
        PROCESS.sessions -= 1
        self._impl = None

    def free(self) -> None:
        """``Finalize`` the session unless the handle is null (or a constant)."""
        if self and self is not SESSION_NULL:
            self.Finalize()

    # -- process sets ------------------------------------------------------------------
    @mpi_call
    def Get_num_psets(self, info: Any = INFO_NULL) -> int:
        """How many process sets there are: ``mpi://WORLD`` and ``mpi://SELF``."""
        self._live()
        return len(PSETS)

    @mpi_call
    def Get_nth_pset(self, n: int, info: Any = INFO_NULL) -> str:
        """The name of process set ``n`` (from 0)."""
        self._live()
        n = operator.index(n)
        if not 0 <= n < len(PSETS):
            raise MPIException(
                ERR_ARG, f"Get_nth_pset: n={n} is out of range (there are {len(PSETS)} sets)"
            )
        return PSETS[n]

    @mpi_call
    def Get_pset_info(self, pset_name: str) -> Any:
        """A new ``MPI.Info`` about process set ``pset_name``: its ``mpi_size``."""
        self._live()
        return new_info({"mpi_size": str(len(pset_ranks(pset_name, "Get_pset_info")))})

    @mpi_call
    def Create_group(self, pset_name: str) -> Group:
        """The group of process set ``pset_name``."""
        self._live()
        return Group._from_ranks(pset_ranks(pset_name, "Create_group"))

    @mpi_call
    def Get_info(self) -> Any:
        """A new ``MPI.Info`` with the session's hints (the caller frees it)."""
        return new_info(self._live().hints)

    # -- buffered sends ----------------------------------------------------------------
    @mpi_call
    def Attach_buffer(self, buf: Any) -> None:
        """Attach the session's buffer for buffered sends (or ``BUFFER_AUTOMATIC``)."""
        _bsend.attach(self._live(), buf)

    @mpi_call
    def Detach_buffer(self) -> Any:
        """Wait until the session's buffered messages have left, then give the buffer back."""
        return _bsend.detach(PROCESS.engine, self._live())

    @mpi_call
    def Flush_buffer(self) -> None:
        """Wait until every message in the session's buffer has left."""
        _bsend.flush(PROCESS.engine, self._live())

    @mpi_call
    def Iflush_buffer(self) -> Request:
        """Nonblocking ``Flush_buffer``."""
        impl = self._live()
        return Request._of(_bsend.iflush(impl, PROCESS.self_comm, "Iflush_buffer"))

    # -- error handling ----------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Session, int], None]) -> Errhandler:
        """A new error handler calling ``errhandler_fn(session, errorcode)``."""
        return Errhandler._create_user(errhandler_fn)


def _end_at_exit() -> None:
    """Close the engine a sessions-only program started (the world's ``Finalize``
    does it when the program also used the world model)."""
    if not PROCESS.initialized and not PROCESS.finalized:
        _runtime.close_engine()


SESSION_NULL: Session = Session()
register(globals(), ("SESSION_NULL",))  # constants (see core.handle)
