"""``MPI.Comm`` and its subclasses: identity, errors, attributes, naming.

A ``Comm`` is a handle on a :class:`CommImpl` (``None`` for ``COMM_NULL``):
``Free`` nulls the handle, and ``MPI.Comm(other)`` makes a second handle on the
same communicator, as handles behave in C. Point-to-point methods come from
:class:`~ipympi.mpi.p2p.PointToPoint`, attribute caching from
:mod:`~ipympi.mpi.attributes`, constructors (``Dup``, ``Split``, ...), ``Get_group``
and ``Compare`` from :mod:`~ipympi.mpi.commcreate`; collectives and topologies are
added by their own modules.

Every error an MPI call raises goes through the communicator's error handler
(:meth:`Comm._raise`): ``ERRORS_RETURN`` raises the ``MPI.Exception``,
``ERRORS_ARE_FATAL``/``ERRORS_ABORT`` end the job with a message naming rank,
call and error, and a user handler runs before the exception is raised.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Callable, NoReturn

from ..core import constants as K
from ..core.errors import ERR_COMM, ERR_OTHER
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from . import bsend as _bsend
from .args import c_int
from .attributes import CommAttributes
from .coll.intra import Collectives
from .coll.reduce import Reductions
from .commbuild import wait_pending
from .commcreate import CommConstructors, IntraConstructors
from .commimpl import CommImpl, handle_class, topocomm_class
from .commlock import lock_of, table_of
from .errhandling import Errhandler, ErrhandlerMethods, mpi_call
from .intercomm import InterMethods
from .jobs import release
from .p2p import PointToPoint
from .ports import JoinMethod, PortMethods
from .process import PROCESS
from .psend import PartitionedComm
from .request import Request
from .spawn import SpawnMethods, get_parent
from .topology import TopologyConstructors
from .unsupported import CommFeatures

__all__ = ["COMM_NULL", "Comm", "Intercomm", "Intracomm"]


@handle_class
class Comm(
    ErrhandlerMethods,  # first: the mixins below only declare _raise
    PointToPoint,
    PartitionedComm,
    CommAttributes,
    CommConstructors,
    JoinMethod,
    CommFeatures,
    Handle,
):
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
        if self._label in ("COMM_WORLD", "COMM_SELF") and PROCESS.started:
            raise MPIException(ERR_OTHER, f"{self._label}: {PROCESS.why_unusable()}")
        raise MPIException(ERR_COMM, "invalid communicator: COMM_NULL (null or freed handle)")

    @property
    def _engine(self) -> Any:
        return self._live().engine

    # -- error handling ------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Comm, int], None]) -> Errhandler:
        """A new error handler calling ``errhandler_fn(comm, errorcode)``."""
        return Errhandler._create_user(errhandler_fn)

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
        topo = getattr(self._live(), "topo", None)  # see mpi.topology
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

        return Request._of(_bsend.iflush(self._live(), self, "Iflush_buffer"))

    # -- process management --------------------------------------------------
    def Abort(self, errorcode: int = 0) -> NoReturn:
        """End every rank of the job; the launcher exits with ``errorcode``."""
        name = self._impl.name if self._impl is not None else "COMM_NULL"
        code = c_int(errorcode)
        PROCESS.abort(code, f"MPI_Abort({name}, {code})")

    @classmethod
    def Get_parent(cls) -> Intercomm:
        """The intercommunicator to the processes that spawned this one (``Spawn``), else
        ``COMM_NULL``."""
        return get_parent()

    @mpi_call
    def Disconnect(self) -> None:
        """Collective ``Free`` that first waits for the communication still in progress
        on the communicator, then for every member to get there."""
        impl = self._live()
        if impl.predefined:
            raise MPIException(ERR_COMM, f"Disconnect: {impl.name} is predefined")
        wait_pending(impl, "Disconnect")
        # Processes of another job are no longer watched: one that leaves the barrier
        # first may end before this one has left it.
        release(impl.engine, impl.remote_world_ranks)
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


@handle_class
class Intracomm(
    Comm,
    Collectives,
    Reductions,
    IntraConstructors,
    TopologyConstructors,
    PortMethods,
    SpawnMethods,
):
    """A communicator within one group of ranks."""

    __slots__ = ()


@handle_class
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
    """Internal communicator lock table: mpi4py's, made on first use (see ``mpi.commlock``)."""
    return table_of(_communicator(comm, "_comm_lock_table"))


def _comm_lock(comm: Comm, key: Hashable = None) -> Any:
    """Create/get communicator lock: the ``threading.Lock`` of ``key`` in the table."""
    return lock_of(_communicator(comm, "_comm_lock"), key)


COMM_NULL = Comm()
register(globals(), __all__)  # the module's constants (see core.handle)
