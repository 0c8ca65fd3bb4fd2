"""``MPI.Win``: windows for one-sided communication (MPI-4.1 chapter 12).

A window is the memory each rank of a communicator exposes to the others. When every
rank of a window shares one host, the window's ranks reach each other's memory
directly, without the target's help, so a target busy in numpy (or idle at a notebook
prompt) never stalls an origin (passive target progress needs no progress thread).
A window whose ranks span hosts is served instead by each target's engine, for every
target (``win_remote``); ``Allocate_shared`` across hosts is ``ERR_RMA_SHARED``.
The rest of this docstring is about windows on one host.

* Memory that ipympi allocates (``Allocate``, ``Allocate_shared``) lives in one shared
  segment (``progress.shm``) that every rank of the window maps: moving data is a
  plain copy between the origin's buffer and the mapping, and ``Shared_query`` gives
  numpy-ready views that alias across ranks (a store on one rank is a load on another).
* Memory the program owns (``Create``, and regions attached to ``Create_dynamic``
  windows) is reached with one ``process_vm_readv``/``process_vm_writev`` copy
  (``progress.largebuf``); a rank reaches its own memory directly.
* Every window has a segment, if only for its locks: bytes ``0..n-1`` of its file are
  the per-target locks of ``Lock``/``Lock_all`` (POSIX byte-range locks, released by
  the kernel if a rank dies). The accumulate operations on each target are serialised
  (element-wise atomicity, and the default ordering of accumulates) by one mutex per
  target shared by the window's ranks (``progress.shmlock``: a named semaphore, taken
  without a system call, freed when its holder dies), or, where the host has no named
  semaphores, by the segment's bytes ``n..2n-1``.
* The window keeps a private duplicate of its communicator: post/start/complete/wait
  are messages on it, so a rank stuck there is reported by the machinery that reports
  stuck communication. ``Fence`` is a barrier of shared counters next to the mutexes
  (a rank waiting there reports itself blocked in ``Win.Fence``), or a ``Barrier`` on
  the private communicator where they are not available (see ``win_sync``).

The synchronisation calls are in ``win_sync``, the communication calls in ``win_ops``,
the window's state in ``winimpl``; this module holds creation, the window's properties
and freeing.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Callable

from ..core import constants as K
from ..core.errors import (
    ERR_COMM,
    ERR_DISP,
    ERR_INFO,
    ERR_KEYVAL,
    ERR_NO_MEM,
    ERR_RANK,
    ERR_RMA_ATTACH,
    ERR_RMA_FLAVOR,
    ERR_RMA_SHARED,
    ERR_RMA_SYNC,
    ERR_SIZE,
    ERR_WIN,
)
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from ..core.lazynumpy import np
from ..progress import tracing
from ..progress.largebuf import buffer_address
from ..progress.shm import Segment
from ..progress.shmlock import HostMutexes
from .args import c_int
from .attributes import (
    create_keyval,
    delete_attr,
    delete_attributes,
    free_keyval,
    lookup,
    set_attr,
)
from .comm import Comm, Intracomm
from .errhandling import Errhandler, ErrhandlerMethods, mpi_call, world_call
from .group import Group
from .info import INFO_NULL, Info, info_items, new_info
from .memory import buffer
from .process import PROCESS
from .rawmem import BOTTOM, acquire
from .runtime import COMM_SELF
from .win_ops import WinOperations
from .win_remote import Remote
from .win_sync import WinSynchronization
from .winimpl import AttachTable, Target, WinImpl

__all__ = ["WIN_NULL", "Win"]

_FLAVOR_NAMES = {
    K.WIN_FLAVOR_CREATE: "create",
    K.WIN_FLAVOR_ALLOCATE: "allocate",
    K.WIN_FLAVOR_DYNAMIC: "dynamic",
    K.WIN_FLAVOR_SHARED: "shared",
}


def _host_mutexes(make: Callable[[], HostMutexes]) -> HostMutexes | None:
    """The accumulate locks ``make`` creates or opens, or None where the host has no
    named semaphores (the segment's ``fcntl`` locks serve then)."""
    try:
        return make()
    except (OSError, ValueError):
        return None


def _flavor_error(call: str, impl: WinImpl) -> MPIException:
    flavor = _FLAVOR_NAMES.get(impl.flavor, "?")
    return MPIException(ERR_RMA_FLAVOR, f"{call}: not for a window of flavor {flavor}")


class Win(ErrhandlerMethods, WinOperations, WinSynchronization, Handle):
    """A window: memory of each rank of a group, open to one-sided communication.

    ``Win(win)`` is a new handle to ``win``'s window; ``Win()`` is a null handle.
    """

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Win", 8, ERR_WIN, None)
    _impl: WinImpl | None

    @classmethod
    def _from_impl(cls, impl: WinImpl) -> Any:
        win = object.__new__(cls)
        win._impl = impl
        return win

    def _live(self) -> WinImpl:
        impl = self._impl
        if impl is None:
            raise MPIException(ERR_WIN, "invalid window: WIN_NULL (null or freed handle)")
        return impl

    def __repr__(self) -> str:
        impl = self._impl
        if impl is None:
            return "<MPI.Win WIN_NULL>"
        flavor = _FLAVOR_NAMES.get(impl.flavor, "?")
        return f"<MPI.{type(self).__name__} flavor={flavor} size={impl.memory.nbytes}>"

    # -- creation (§12.2) -------------------------------------------------------------
    @classmethod
    def _start(cls, comm: Any, info: Any, call: str, flavor: int) -> WinImpl:
        if not isinstance(comm, Comm):
            raise TypeError(f"{call}: comm must be an MPI.Intracomm, not {type(comm).__name__}")
        if not comm:
            raise MPIException(ERR_COMM, f"{call}: invalid communicator COMM_NULL")
        if comm.Is_inter():
            raise MPIException(ERR_COMM, f"{call}: windows need an intracommunicator")
        if not isinstance(info, Info):
            raise MPIException(ERR_INFO, f"{call}: info must be an MPI.Info")
        hints = info_items(info, call)
        private = Intracomm(comm.Dup())
        private._impl.name = f"{call} window"  # type: ignore[union-attr]
        hosts = private.allgather(PROCESS.host_name())
        if len(set(hosts)) > 1 and flavor == K.WIN_FLAVOR_SHARED:
            private.Free()
            raise MPIException(
                ERR_RMA_SHARED,
                f"{call}: the ranks of a shared window must share one host; this "
                f"communicator spans {len(set(hosts))} hosts ({', '.join(sorted(set(hosts)))})",
            )
        impl = WinImpl(private, flavor, hints)
        if len(set(hosts)) > 1:
            impl.remote = Remote(impl)
        return impl

    @staticmethod
    def _check_unit(disp_unit: Any, call: str) -> int:
        unit = operator.index(disp_unit)
        if unit <= 0:
            raise MPIException(ERR_DISP, f"{call}: disp_unit must be positive, got {unit}")
        return unit

    @classmethod
    def _share(
        cls, impl: WinImpl, local_size: int, shared: bool, call: str, extra: int = 0
    ) -> tuple[list[tuple[int, int, int, int]], int]:
        """Agree on the ranks' sizes, map the window's segment (holding the memory of
        every rank when ``shared``, and ``extra`` more bytes at its end); returns
        ``(pid, base, size, unit)`` per rank and this rank's offset in the segment."""
        comm = impl.comm
        sizes = comm.allgather((os.getpid(), local_size, impl.disp_unit))
        if impl.remote is not None:  # across hosts: no segment, each target serves
            return [(pid, 0, size, unit) for (pid, size, unit) in sizes], 0
        offsets = [0]
        noncontig = impl.info.get("alloc_shared_noncontig", "false") == "true"
        for _, size, _ in sizes:
            step = 0
            if shared:
                step = -(-size // 4096) * 4096 if noncontig else size
            offsets.append(offsets[-1] + step)
        total = offsets[-1] + extra
        segment = None
        error = ""
        pids = [pid for pid, _, _ in sizes]
        mutexes = None
        if impl.rank == 0:
            try:
                segment = Segment.create(total, prefix="ipympi-win")
                name = segment.name
            except OSError as exc:
                name, error = "", str(exc)
            mutexes = _host_mutexes(lambda: HostMutexes.create(impl.size, pids)) if name else None
        else:
            name = ""
        names = (name, error, mutexes.name if mutexes is not None else "")
        name, error, mutex_name = comm.bcast(names if impl.rank == 0 else None, root=0)
        if error:
            comm.Free()
            raise MPIException(ERR_NO_MEM, f"{call}: cannot create shared memory: {error}")
        opened = False
        try:
            if segment is None:
                segment = Segment.open(name, total)
            if mutex_name and mutexes is None:
                mutexes = _host_mutexes(lambda: HostMutexes.open(mutex_name, impl.size, pids))
            opened = mutexes is not None
        finally:
            everywhere = all(comm.allgather(opened))  # also: every rank has them open
            if impl.rank == 0 and segment is not None:
                segment.unlink()
            if impl.rank == 0 and mutexes is not None:
                mutexes.unlink()
        if mutexes is not None and not everywhere:  # fcntl locks then, on every rank
            mutexes.close()
            mutexes = None
        impl.segment = segment
        impl.mutexes = mutexes
        table = [(pid, 0, size, unit) for (pid, size, unit) in sizes]
        if shared:
            base = segment.address
            table = [
                (pid, base + offsets[r] if size else 0, size, unit)
                for r, (pid, size, unit) in enumerate(sizes)
            ]
        return table, offsets[impl.rank]

    @classmethod
    def _finish(cls, impl: WinImpl, table: list[tuple[int, int, int, int]], shared: bool) -> None:
        segment = impl.segment
        for rank, (pid, base, size, unit) in enumerate(table):
            array = None
            if shared:
                assert segment is not None
                start = base - segment.address if size else 0
                array = segment.array[start : start + size]
            elif rank == impl.rank:
                array = impl.memory.view(np.ndarray)
            impl.targets.append(Target(rank, pid, base, size, unit, array))
        # From now on the window's synchronisation traffic is traced as its own calls.
        tracing.quiet.add(impl.comm._live().context)
        if impl.remote is not None:
            impl.remote.open()

    @classmethod
    @world_call
    def Create(
        cls, memory: Any, disp_unit: int = 1, info: Info = INFO_NULL, comm: Any = None
    ) -> Any:
        """A window over memory the program owns (``None``/``BOTTOM``: none), collective."""
        call = "Create"
        comm = COMM_SELF if comm is None else comm
        unit = cls._check_unit(disp_unit, call)
        mem = buffer() if memory is None or memory is BOTTOM else buffer.frombuffer(memory)
        impl = cls._start(comm, info, call, K.WIN_FLAVOR_CREATE)
        impl.disp_unit = unit
        impl.memory = mem
        impl.keep = memory
        address = mem.address if mem.nbytes else 0
        table, _ = cls._share(impl, mem.nbytes, False, call)
        bases = impl.comm.allgather(address)
        table = [(pid, bases[r], size, u) for r, (pid, _, size, u) in enumerate(table)]
        cls._finish(impl, table, False)
        return cls._from_impl(impl)

    @classmethod
    def _allocate(
        cls, size: Any, disp_unit: Any, info: Any, comm: Any, call: str, flavor: int
    ) -> Any:
        comm = COMM_SELF if comm is None else comm
        nbytes = operator.index(size)
        if nbytes < 0:
            raise MPIException(ERR_SIZE, f"{call}: size must not be negative, got {nbytes}")
        unit = cls._check_unit(disp_unit, call)
        impl = cls._start(comm, info, call, flavor)
        impl.disp_unit = unit
        if impl.remote is not None:  # across hosts: memory of this rank's own
            memory = np.zeros(nbytes, np.uint8)
            impl.memory = buffer.frombuffer(memory) if nbytes else buffer()
            impl.keep = memory
            table, _ = cls._share(impl, nbytes, False, call)
            cls._finish(impl, table, False)
            return cls._from_impl(impl)
        table, offset = cls._share(impl, nbytes, True, call)
        segment = impl.segment
        assert segment is not None
        view = segment.array[offset : offset + nbytes]
        impl.memory = buffer.frombuffer(view) if nbytes else buffer()
        impl.keep = segment
        cls._finish(impl, table, True)
        return cls._from_impl(impl)

    @classmethod
    @world_call
    def Allocate(
        cls, size: int, disp_unit: int = 1, info: Info = INFO_NULL, comm: Any = None
    ) -> Any:
        """A window over ``size`` new bytes on each rank, collective."""
        return cls._allocate(size, disp_unit, info, comm, "Allocate", K.WIN_FLAVOR_ALLOCATE)

    @classmethod
    @world_call
    def Allocate_shared(
        cls, size: int, disp_unit: int = 1, info: Info = INFO_NULL, comm: Any = None
    ) -> Any:
        """A window over new memory every rank can load and store (``Shared_query``)."""
        return cls._allocate(size, disp_unit, info, comm, "Allocate_shared", K.WIN_FLAVOR_SHARED)

    @mpi_call
    def Shared_query(self, rank: int) -> tuple[buffer, int]:
        """The memory of ``rank`` (the lowest rank with memory for ``PROC_NULL``) as this
        process sees it, and its displacement unit."""
        impl = self._live()
        rank = c_int(rank)
        if rank == K.PROC_NULL:
            rank = next((t.rank for t in impl.targets if t.nbytes), 0)
        elif not 0 <= rank < impl.size:
            raise MPIException(ERR_RANK, f"Shared_query: invalid rank {rank}")
        target = impl.targets[rank]
        if impl.flavor == K.WIN_FLAVOR_DYNAMIC:
            raise _flavor_error("Shared_query", impl)
        if target.array is None or not target.nbytes:
            return buffer(), target.disp_unit
        return buffer.frombuffer(target.array), target.disp_unit

    @classmethod
    @world_call
    def Create_dynamic(cls, info: Info = INFO_NULL, comm: Any = None) -> Any:
        """A window without memory; ranks ``Attach`` regions and origins address them
        by their absolute address (``MPI.Get_address``), collective."""
        call = "Create_dynamic"
        comm = COMM_SELF if comm is None else comm
        impl = cls._start(comm, info, call, K.WIN_FLAVOR_DYNAMIC)
        rows = AttachTable.ROW * impl.size
        table, _ = cls._share(impl, 0, False, call, extra=rows)
        if impl.segment is not None:  # one host: what each rank attached, for origins
            impl.attach_table = AttachTable(impl.segment.array[-rows:], impl.size)
        cls._finish(impl, table, False)
        for target in impl.targets:
            target.array = None
        return cls._from_impl(impl)

    @mpi_call
    def Attach(self, memory: Any) -> None:
        """Expose ``memory`` through this dynamic window."""
        impl = self._live()
        if impl.flavor != K.WIN_FLAVOR_DYNAMIC:
            raise _flavor_error("Attach", impl)
        mem = acquire(memory, True)[0]
        address = buffer_address(mem)
        for start, size, _ in impl.attached:
            if address < start + size and start < address + mem.nbytes:
                raise MPIException(ERR_RMA_ATTACH, "Attach: memory overlaps an attached region")
        impl.attached.append((address, mem.nbytes, memory))
        if impl.attach_table is not None:
            impl.attach_table.publish(impl.rank, impl.attached)

    @mpi_call
    def Detach(self, memory: Any) -> None:
        """Stop exposing memory attached before."""
        impl = self._live()
        if impl.flavor != K.WIN_FLAVOR_DYNAMIC:
            raise _flavor_error("Detach", impl)
        mem = acquire(memory, False)[0]
        address = buffer_address(mem)
        for index, (start, _, _) in enumerate(impl.attached):
            if start == address:
                del impl.attached[index]
                if impl.attach_table is not None:
                    impl.attach_table.publish(impl.rank, impl.attached)
                return
        raise MPIException(ERR_RMA_ATTACH, "Detach: memory is not attached to this window")

    @mpi_call
    def Free(self) -> None:
        """Free the window (collective); every epoch must be closed first."""
        impl = self._live()
        if impl.locks or impl.lock_all or impl.access is not None or impl.exposure is not None:
            raise MPIException(ERR_RMA_SYNC, "Free: an access or exposure epoch is still open")
        delete_attributes(self, impl, "Free")  # type: ignore[arg-type]
        self._settle_sends(impl)
        if impl.remote is not None:
            impl.remote.flush_all("Free")
        tracing.quiet.discard(impl.comm._live().context)
        impl.comm.Barrier()  # nobody accesses this memory any more
        if impl.remote is not None:
            impl.remote.close()
        impl.comm.Free()
        if impl.segment is not None:
            impl.segment.close()
        if impl.mutexes is not None:
            impl.mutexes.close()
        impl.targets = []
        self._impl = None

    # -- memory -----------------------------------------------------------------------
    @mpi_call
    def tomemory(self) -> buffer:
        """This rank's window memory as an ``MPI.buffer``."""
        return self._live().memory

    # -- group, info, name ------------------------------------------------------------
    @mpi_call
    def Get_group(self) -> Group:
        """The group of the window's communicator."""
        return self._live().comm.Get_group()

    @property
    def group(self) -> Group:
        return self.Get_group()

    @property
    def group_size(self) -> int:
        return self._live().size

    @property
    def group_rank(self) -> int:
        return self._live().rank

    @mpi_call
    def Set_info(self, info: Info) -> None:
        """Set hints (only those the window understands take effect)."""
        impl = self._live()
        impl.info.update(info_items(info, "Set_info"))

    @mpi_call
    def Get_info(self) -> Info:
        """A new ``Info`` with the hints in use."""
        return new_info(self._live().info)

    @property
    def info(self) -> Info:
        return self.Get_info()

    @info.setter
    def info(self, info: Info) -> None:
        self.Set_info(info)

    def Get_name(self) -> str:
        """The window's name (``MPI_WIN_NULL`` for a null handle)."""
        if self._impl is None:
            return "MPI_WIN_NULL"
        return self._impl.name

    @mpi_call
    def Set_name(self, name: str) -> None:
        self._live().name = str(name)[: K.MAX_OBJECT_NAME - 1]

    @property
    def name(self) -> str:
        return self.Get_name()

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    # -- attributes -------------------------------------------------------------------
    _PREDEFINED = (K.WIN_BASE, K.WIN_SIZE, K.WIN_DISP_UNIT, K.WIN_CREATE_FLAVOR, K.WIN_MODEL)

    @classmethod
    @world_call
    def Create_keyval(
        cls,
        copy_fn: Callable[[Any, int, Any], Any] | None = None,
        delete_fn: Callable[[Any, int, Any], None] | None = None,
        nopython: bool = False,
    ) -> int:
        """A new attribute key for windows."""
        return create_keyval("win", copy_fn, delete_fn, nopython)

    @classmethod
    @world_call
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key; returns ``KEYVAL_INVALID``."""
        return free_keyval("win", keyval)

    @mpi_call
    def Get_attr(self, keyval: int) -> Any:
        """The value of attribute ``keyval`` (the predefined ``WIN_*`` ones included)."""
        impl = self._live()
        keyval = c_int(keyval)
        if keyval in self._PREDEFINED:
            base, size, unit = self._attrs(impl)
            return {
                K.WIN_BASE: base,
                K.WIN_SIZE: size,
                K.WIN_DISP_UNIT: unit,
                K.WIN_CREATE_FLAVOR: impl.flavor,
                K.WIN_MODEL: K.WIN_UNIFIED,
            }[keyval]
        kv = lookup("win", keyval, "Get_attr")
        entry = impl.attrs.get(kv.number)
        return None if entry is None else entry[1]

    @mpi_call
    def Set_attr(self, keyval: int, attrval: Any) -> None:
        impl = self._live()
        if c_int(keyval) in self._PREDEFINED:
            raise MPIException(ERR_KEYVAL, f"Set_attr: predefined attribute {keyval}")
        set_attr(self, impl, "win", keyval, attrval)  # type: ignore[arg-type]

    @mpi_call
    def Delete_attr(self, keyval: int) -> None:
        impl = self._live()
        if c_int(keyval) in self._PREDEFINED:
            raise MPIException(ERR_KEYVAL, f"Delete_attr: predefined attribute {keyval}")
        delete_attr(self, impl, "win", keyval)  # type: ignore[arg-type]

    @staticmethod
    def _attrs(impl: WinImpl) -> tuple[int, int, int]:
        if impl.flavor == K.WIN_FLAVOR_DYNAMIC:
            return 0, 0, 1
        mem = impl.memory
        return (mem.address if mem.nbytes else 0), mem.nbytes, impl.disp_unit

    @property
    def attrs(self) -> tuple[int, int, int]:
        """``(base, size, disp_unit)`` of this rank's window memory."""
        return self._attrs(self._live())

    @property
    def flavor(self) -> int:
        return int(self.Get_attr(K.WIN_CREATE_FLAVOR))

    @property
    def model(self) -> int:
        return int(self.Get_attr(K.WIN_MODEL))

    # -- error handling ---------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[Any, int], None]) -> Errhandler:
        """A new error handler calling ``errhandler_fn(win, errorcode)``."""
        return Errhandler._create_user(errhandler_fn)


WIN_NULL: Win = Win()
register(globals(), ("WIN_NULL",))  # the module's constants (see core.handle)
