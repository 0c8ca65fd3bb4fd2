"""``MPI.Comm`` and its subclasses: identity, errors, attributes, naming.

A ``Comm`` is a handle on a :class:`CommImpl` (``None`` for ``COMM_NULL``):
``Free`` nulls the handle, and ``MPI.Comm(other)`` makes a second handle on the
same communicator, as handles behave in C. Point-to-point methods come from
:class:`~ipympi._p2p.PointToPoint`, attribute caching from
:mod:`~ipympi._attributes`, constructors (``Dup``, ``Split``, ...), ``Get_group``
and ``Compare`` from :mod:`~ipympi._commcreate`; collectives and topologies are
added by their own modules.

Every error an MPI call raises goes through the communicator's error handler
(:meth:`Comm._raise`): ``ERRORS_RETURN`` raises the ``MPI.Exception``,
``ERRORS_ARE_FATAL``/``ERRORS_ABORT`` end the job with a message naming rank,
call and error, and a user handler runs before the exception is raised.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any, Callable, NoReturn

from . import _bsend, _errors
from . import _constants as K
from . import _errhandling as hooks
from ._args import c_int
from ._attributes import CommAttributes
from ._coll import Collectives
from ._coll_reduce import Reductions
from ._commcreate import CommConstructors, IntraConstructors
from ._commlock import lock_of, table_of
from ._errhandling import mpi_call
from ._errors import ERR_COMM, ERR_OTHER
from ._errors import Exception as MPIException
from ._handle import Handle, Kind, register
from ._intercomm import InterMethods
from ._p2p import PointToPoint
from ._topology import TopologyConstructors
from ._unsupported import CommFeatures

__all__ = ["COMM_NULL", "Comm", "CommImpl", "Intercomm", "Intracomm"]


class CommImpl:
    """The state behind a communicator handle."""

    __slots__ = (
        "__weakref__",
        "attrs",
        "bsend",
        "context",
        "engine",
        "errhandler",
        "info",
        "lane",
        "locks",
        "name",
        "predefined",
        "rank",
        "remote_world_ranks",
        "size",
        "world_ranks",
    )

    def __init__(
        self,
        engine: Any,
        context: int,
        world_ranks: list[int],
        rank: int,
        name: str,
        errhandler: Any,
        predefined: bool = False,
    ) -> None:
        self.engine = engine
        self.context = context  # point-to-point context; context + 1 is collective
        self.world_ranks = world_ranks  # comm rank -> world rank (local group)
        self.remote_world_ranks = world_ranks  # differs for intercommunicators
        self.rank = rank
        self.size = len(world_ranks)
        self.name = name
        self.errhandler = errhandler
        self.predefined = predefined
        # keyval -> (Keyval, value), in the order set (see _attributes)
        self.attrs: dict[int, tuple[Any, Any]] = {}
        self.lane: Any = None  # the straight path's view of it (``_collfast.Lane``)
        self.bsend: Any = None  # its own buffer for buffered sends (``_bsend.Pool``)
        self.info: dict[str, str] = {}  # hints (``Set_info``; see ``_commcreate.hints_of``)
        self.locks: Any = None  # mpi4py's lock table, once asked for (``_commlock``)

    @property
    def label(self) -> str:
        """The name for messages: ``Get_name``, or what the communicator is when unnamed."""
        if self.name:
            return self.name
        if self.remote_world_ranks is not self.world_ranks:
            return f"an unnamed intercommunicator ({self.size} local ranks)"
        return f"an unnamed communicator ({self.size} ranks)"


class Comm(PointToPoint, CommAttributes, CommConstructors, CommFeatures, Handle):
    """A communication context and the group of ranks that share it.

    ``Comm(comm)`` is a new handle to ``comm``'s communicator; the subclass asked
    for must suit it (``Intercomm(COMM_WORLD)`` is a ``TypeError``).
    """

    __slots__ = ("_impl", "_label")
    _mpi_kind = Kind("Comm", 1, ERR_COMM, None)
    _impl: CommImpl | None

    @classmethod
    def _from_impl(cls, impl: CommImpl | None, label: str = "") -> Comm:
        comm = object.__new__(cls)
        comm._impl = impl
        comm._label = label or (impl.name if impl is not None else "COMM_NULL")
        return comm

    # -- handle identity -----------------------------------------------------
    def _become(self, target: CommImpl | None) -> None:
        self._impl = target
        self._label = target.name if target is not None else "COMM_NULL"

    def _copy(self, other: Handle) -> None:
        self._impl = other._impl
        self._label = other._label  # type: ignore[attr-defined]

    @classmethod
    def _class_for(cls, target: Any) -> type:
        """The class a communicator's handles have: ``Intercomm``, the class of its
        topology (``Cartcomm``, ...) or ``Intracomm``."""
        if getattr(target, "remote_world_ranks", None) is not getattr(target, "world_ranks", None):
            return Intercomm
        topo = getattr(target, "topo", None)
        if topo is not None:
            from ._neighbor import topocomm_class

            return topocomm_class(topo.kind)
        return Intracomm

    def __bool__(self) -> bool:
        return self._impl is not None

    def __repr__(self) -> str:
        if self._impl is None:
            return f"<MPI.{type(self).__name__} {self._label or 'COMM_NULL'}>"
        return f"<MPI.{type(self).__name__} {self._impl.name!r} size={self._impl.size}>"

    def _live(self) -> CommImpl:
        """The communicator's state, or ``ERR_COMM`` for a null or unusable handle."""
        impl = self._impl
        if impl is not None:
            return impl
        if self._label in ("COMM_WORLD", "COMM_SELF") and hooks.state is not None:
            raise MPIException(ERR_OTHER, f"{self._label}: {hooks.state()}")
        raise MPIException(ERR_COMM, "invalid communicator: COMM_NULL (null or freed handle)")

    @property
    def _engine(self) -> Any:
        return self._live().engine

    # -- error handling ------------------------------------------------------
    def _raise(self, exc: MPIException, call: str, code: int | None = None) -> NoReturn:
        """Apply this communicator's error handler to ``exc`` raised by ``call``.

        A user handler gets ``code`` when given: for ``ERR_IN_STATUS`` the standard
        passes the failing request's own error code (MPI-3.0 §2.3.1).
        """
        impl = self._impl
        handler = hooks.world_errhandler() if impl is None else impl.errhandler
        kind = getattr(handler, "_kind", "return")
        if kind in ("fatal", "abort") and hooks.fatal is not None:
            hooks.fatal(self, call, exc)
        if kind == "user":
            handler._fn(self, exc.Get_error_code() if code is None else code)
        raise exc

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Comm, int], None]) -> Any:
        """A new error handler calling ``errhandler_fn(comm, errorcode)``."""
        return _errors.Errhandler._create_user(errhandler_fn)

    @mpi_call
    def Get_errhandler(self) -> Any:
        return _errors.Errhandler(self._live().errhandler)

    @mpi_call
    def Set_errhandler(self, errhandler: Any) -> None:
        impl = self._live()
        if not isinstance(errhandler, _errors.Errhandler):
            raise TypeError(
                f"Set_errhandler: expected an MPI.Errhandler, got {type(errhandler).__name__}"
            )
        if not errhandler:
            raise MPIException(
                _errors.ERR_ERRHANDLER, "Set_errhandler: ERRHANDLER_NULL cannot be attached"
            )
        impl.errhandler = _errors.Errhandler(errhandler)

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the error handler as if an MPI call had failed with ``errorcode``."""
        errorcode = operator.index(errorcode)
        impl = self._live()
        kind = getattr(impl.errhandler, "_kind", "return")
        if kind in ("fatal", "abort") and hooks.fatal is not None:
            hooks.fatal(self, "Call_errhandler", MPIException(errorcode))
        if kind == "user":
            impl.errhandler._fn(self, errorcode)

    # -- inquiry -------------------------------------------------------------
    @mpi_call
    def Get_size(self) -> int:
        return self._live().size

    @mpi_call
    def Get_rank(self) -> int:
        return self._live().rank

    @property
    def size(self) -> int:
        return self.Get_size()

    @property
    def rank(self) -> int:
        return self.Get_rank()

    def Is_inter(self) -> bool:
        self._live()
        return False

    def Is_intra(self) -> bool:
        return not self.Is_inter()

    @property
    def is_inter(self) -> bool:
        return self.Is_inter()

    @property
    def is_intra(self) -> bool:
        return self.Is_intra()

    def Get_topology(self) -> int:
        topo = getattr(self._live(), "topo", None)  # see _topology
        return K.UNDEFINED if topo is None else int(topo.kind)

    @property
    def topology(self) -> int:
        return self.Get_topology()

    @property
    def is_topo(self) -> bool:
        """Whether the communicator has a process topology."""
        return self.Get_topology() != K.UNDEFINED

    # -- naming --------------------------------------------------------------
    @mpi_call
    def Get_name(self) -> str:
        """The communicator's name; a null handle is named ``MPI_COMM_NULL``, as in mpi4py."""
        if self._impl is None and self._label == "COMM_NULL":
            return "MPI_COMM_NULL"
        return self._live().name

    @mpi_call
    def Set_name(self, name: str) -> None:
        impl = self._live()
        impl.name = str(name)[: K.MAX_OBJECT_NAME - 1]  # longer names are truncated

    @property
    def name(self) -> str:
        return self.Get_name()

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    # -- buffered sends (MPI 4.1: a buffer of the communicator's own) ---------
    @mpi_call
    def Attach_buffer(self, buf: Any) -> None:
        """Attach a buffer (or ``BUFFER_AUTOMATIC``) for this communicator's buffered
        sends; without one they use the process's (``MPI.Attach_buffer``)."""
        _bsend.attach(self._live(), buf)

    @mpi_call
    def Detach_buffer(self) -> Any:
        """Wait until this communicator's buffered messages have left; return its buffer."""
        impl = self._live()
        return _bsend.detach(impl.engine, impl)

    @mpi_call
    def Flush_buffer(self) -> None:
        """Wait until every message in this communicator's buffer has left."""
        impl = self._live()
        _bsend.flush(impl.engine, impl)

    @mpi_call
    def Iflush_buffer(self) -> Any:
        """Nonblocking ``Flush_buffer``: a request completing once the buffer is empty."""
        from ._request import Request

        return Request._of(_bsend.iflush(self._live(), self, "Iflush_buffer"))

    # -- process management --------------------------------------------------
    def Abort(self, errorcode: int = 0) -> NoReturn:
        """End every rank of the job; the launcher exits with ``errorcode``."""
        assert hooks.abort is not None
        name = self._impl.name if self._impl is not None else "COMM_NULL"
        code = c_int(errorcode)
        hooks.abort(code, f"MPI_Abort({name}, {code})")

    @classmethod
    def Get_parent(cls) -> Intercomm:
        """The intercommunicator to the job that spawned this one: ``COMM_NULL``, since
        ipympi starts no processes dynamically (``Spawn`` is not available)."""
        return Intercomm._from_impl(None, "COMM_NULL")  # type: ignore[return-value]

    @mpi_call
    def Disconnect(self) -> None:
        """Collective ``Free`` that first waits for the communication still in progress
        on the communicator, then for every member to get there."""
        impl = self._live()
        if impl.predefined:
            raise MPIException(ERR_COMM, f"Disconnect: {impl.name} is predefined")
        from ._commcreate import wait_pending

        wait_pending(impl, "Disconnect")
        self.Barrier()  # type: ignore[attr-defined]
        self.Free()

    # -- freeing -------------------------------------------------------------
    @mpi_call
    def Free(self) -> None:
        impl = self._live()
        if impl.predefined:
            raise MPIException(ERR_COMM, f"Free: {impl.name} is predefined and cannot be freed")
        self._free(impl)  # delete callbacks, then the context is released
        self._impl = None
        self._label = "COMM_NULL"


class Intracomm(Comm, Collectives, Reductions, IntraConstructors, TopologyConstructors):
    """A communicator within one group of ranks."""

    __slots__ = ()


class Intercomm(InterMethods, Comm):
    """A communicator between two disjoint groups of ranks."""

    __slots__ = ()

    def Is_inter(self) -> bool:
        self._live()
        return True


def _communicator(comm: Any, call: str) -> CommImpl:
    """The state of communicator ``comm``: ``TypeError`` for anything else,
    ``ERR_COMM`` for a null or freed one (as mpi4py's calls on MPICH)."""
    if not isinstance(comm, Comm):
        raise TypeError(
            f"{call}: argument 'comm' has incorrect type "
            f"(expected MPI.Comm, got {type(comm).__name__})"
        )
    return comm._live()


def _comm_lock_table(comm: Comm) -> dict[Hashable, Any]:
    """Internal communicator lock table: mpi4py's, made on first use (see ``_commlock``)."""
    return table_of(_communicator(comm, "_comm_lock_table"))


def _comm_lock(comm: Comm, key: Hashable = None) -> Any:
    """Create/get communicator lock: the ``threading.Lock`` of ``key`` in the table."""
    return lock_of(_communicator(comm, "_comm_lock"), key)


COMM_NULL = Comm()
register(globals(), __all__)  # the module's constants (see _handle)
