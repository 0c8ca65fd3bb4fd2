"""The state of one window on one rank (:class:`WinImpl`), how it reaches each
target's memory (:class:`Target`), and what each rank of a dynamic window has attached
(:class:`AttachTable`).

``MPI.Win`` (``win``) is a handle on a :class:`WinImpl`; its synchronisation calls
(``win_sync``) and communication calls (``win_ops``) work on this state, which lives
here, below all three, so that they need not know the handle class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errhandling import Errhandler
from .memory import buffer
from .runtime import default_errhandler

if TYPE_CHECKING:
    from ..progress.shm import Segment
    from ..progress.shmlock import HostMutexes
    from .comm import Intracomm

__all__ = ["AttachTable", "Target", "WinImpl"]

# Hints a window understands (MPI-4.1 §12.2.1); others are kept but not acted on.
_DEFAULT_INFO = {
    "no_locks": "false",
    "accumulate_ordering": "rar,raw,war,waw",
    "accumulate_ops": "same_op_no_op",
    "same_size": "false",
    "same_disp_unit": "false",
    "mpi_accumulate_granularity": "0",
}


class AttachTable:
    """The regions each rank of a dynamic window on one host has attached, in shared
    memory (a row per rank at the end of the window's segment), so that an origin can
    refuse an address its target has not attached (``ERR_RMA_RANGE``) without the
    target's help, instead of writing into whatever memory the address names.

    A row is ``count, start0, size0, start1, size1, ...`` as int64; a rank that has
    more than :attr:`REGIONS` regions attached writes ``count = -1`` and its regions
    are then not checked (writes to unmapped memory still fail, as ``EFAULT``). Only
    the owner writes its row (``Attach``/``Detach``); the standard has the program
    order an ``Attach`` before any access to it by a synchronisation, which orders the
    row's stores too.
    """

    REGIONS = 32
    ROW = 8 * (1 + 2 * REGIONS)  # bytes per rank

    def __init__(self, memory: Any, size: int) -> None:
        self.rows = memory.view("<i8").reshape(size, 1 + 2 * self.REGIONS)

    def publish(self, rank: int, regions: list[tuple[int, int, Any]]) -> None:
        """Write ``rank``'s attached regions ``(start, size, obj)`` into its row."""
        row = self.rows[rank]
        if len(regions) > self.REGIONS:
            row[0] = -1
            return
        row[0] = 0  # readers see no half-written region list
        for index, (start, size, _) in enumerate(regions):
            row[1 + 2 * index] = start
            row[2 + 2 * index] = size
        row[0] = len(regions)

    def covers(self, rank: int, low: int, high: int) -> bool:
        """Whether ``rank`` has bytes ``[low, high)`` attached (True when its regions
        are too many to be listed)."""
        row = self.rows[rank]
        count = int(row[0])
        if count < 0:
            return True
        for index in range(count):
            start = int(row[1 + 2 * index])
            if start <= low and high <= start + int(row[2 + 2 * index]):
                return True
        return False


class Target:
    """How one rank of a window reaches the memory of rank ``rank``.

    ``array`` is a ``uint8`` view of that memory when this process can address it (a
    shared segment, or its own memory); otherwise ``pid``/``base`` name it in the other
    process, reached with ``process_vm_readv``/``writev``.
    """

    __slots__ = ("array", "base", "disp_unit", "nbytes", "pid", "rank")

    def __init__(
        self, rank: int, pid: int, base: int, nbytes: int, disp_unit: int, array: Any
    ) -> None:
        self.rank = rank
        self.pid = pid
        self.base = base
        self.nbytes = nbytes
        self.disp_unit = disp_unit
        self.array = array


class WinImpl:
    """The state of one window on one rank (see the module docstring)."""

    def __init__(self, comm: Intracomm, flavor: int, info: dict[str, str]) -> None:
        self.comm = comm  # private duplicate: synchronisation traffic
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.flavor = flavor
        self.info = {**_DEFAULT_INFO, **info}
        self.name = ""
        self.errhandler: Any = Errhandler(default_errhandler())
        self.attrs: dict[int, Any] = {}
        self.memory: buffer = buffer()  # this rank's window memory
        self.disp_unit = 1
        self.targets: list[Target] = []
        self.segment: Segment | None = None
        self.mutexes: HostMutexes | None = None  # accumulate locks, if not fcntl's
        self.keep: Any = None  # the program's object whose memory the window exposes
        self.attached: list[tuple[int, int, Any]] = []  # dynamic: (address, size, obj)
        self.attach_table: AttachTable | None = None  # dynamic, on one host
        # epochs (see win_sync)
        self.fence = False  # a fence epoch is open (a Fence without MODE_NOSUCCEED)
        self.access: frozenset[int] | None = None  # Start's group, until Complete
        self.exposure: list[Any] | None = None  # Post's pending receives, until Wait
        self.locks: dict[int, int] = {}  # target -> lock type held
        self.lock_all = False
        self.lock_all_nocheck = False
        self.sends: list[Any] = []  # synchronisation messages still leaving
        # The ranks span hosts: a ``win_remote.Remote`` (typed loosely here, since that
        # module works on this one's state).
        self.remote: Any = None

    def traced(self) -> dict[str, Any]:
        """The fields of this rank's trace records of this window (``progress.tracing``)."""
        comm = self.comm._live()
        return {
            "rank": comm.world_ranks[self.rank],
            "crank": self.rank,
            "win": comm.context,
            "window": self.name or comm.label,
        }

    def world_rank(self, rank: int) -> int:
        """The COMM_WORLD rank of the window's rank ``rank``."""
        return int(self.comm._live().world_ranks[rank])

    def lock_byte(self, target: int) -> int:
        return target

    def mutex_byte(self, target: int) -> int:
        return self.size + target
