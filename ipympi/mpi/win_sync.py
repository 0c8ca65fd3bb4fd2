"""Synchronisation of windows: fence, post/start/complete/wait, locks, flushes (§12.5).

Operations complete when their call returns (``win_ops`` copies the data at once), so
what the synchronisation calls add is ordering between ranks:

* ``Fence`` is a barrier of the window's ranks; it opens a fence epoch unless the
  assertion says ``MODE_NOSUCCEED``. On x86, when the window has its shared mutexes
  (``progress.shmlock``), the barrier is a counter per rank in shared memory: each
  rank stores its count of fences, rings the others' doorbells, and waits until every
  counter has reached its own (a few looks, then sleeping on its doorbell): a
  microsecond or two when the ranks arrive together, instead of a round of messages.
  What a rank stored into a window before its counter (a ``Put``'s copy) is seen by
  any rank that sees the counter: x86 makes stores visible to other processors in
  program order (TSO), and the copies are C stores made by calls that return before
  the counter's store (a copy with string instructions is ordered before a later
  store to another variable, the C library ends a copy made of non-temporal stores
  with ``sfence``, and the doorbells' ``sem_post`` after the counter is a full
  barrier). Elsewhere ``Fence`` is a ``Barrier`` on the private communicator. A rank
  interrupted while it waits takes its arrival back (unless all had arrived), so the
  ranks' counts of fences stay paired.
* ``Post`` sends each origin of its group a message and posts receives for their
  ``Complete`` messages; ``Start`` waits for the targets' post messages (unless
  ``MODE_NOCHECK``); ``Complete`` sends its message to each target; ``Wait``/``Test``
  wait for/test the receives. All of it on the private communicator, so a rank stuck
  there is reported as a rank waiting for its peer.
* ``Lock``/``Lock_all`` take POSIX byte-range locks on the window's segment, byte
  ``t`` for target ``t`` (shared or exclusive); ``MODE_NOCHECK`` takes none.
  The kernel detects a cycle of ranks waiting for each other's locks: that is
  ``ERR_RMA_CONFLICT`` rather than a hang.
* ``Flush*`` and ``Sync`` have nothing left to wait for, but must be called inside a
  passive-target epoch, as the standard says (``ERR_RMA_SYNC`` otherwise).

A window whose ranks span hosts (``impl.remote``, see ``win_remote``) takes its locks
from each target's lock manager, and ``Fence``, ``Complete``, ``Unlock*``, ``Flush``
and ``Flush_all`` also wait until the targets have applied this rank's operations.

While tracing is on, each call adds one ``rma_sync`` record (``progress.tracing``); the
barrier and messages it exchanges on the private communicator are not recorded.
"""

from __future__ import annotations

import errno
import platform
import threading
import time
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core.errors import (
    ERR_ASSERT,
    ERR_GROUP,
    ERR_LOCKTYPE,
    ERR_OTHER,
    ERR_RANK,
    ERR_RMA_CONFLICT,
    ERR_RMA_SYNC,
)
from ..core.errors import Exception as MPIException
from ..progress import tracing
from ..progress.engine import WaitInfo
from ..progress.shm import process_alive
from .args import c_int
from .datatype import BYTE
from .errhandling import mpi_call
from .group import Group
from .process import PROCESS
from .request import Request

if TYPE_CHECKING:
    from .winimpl import WinImpl

__all__ = ["WinSynchronization"]

_MODES = K.MODE_NOCHECK | K.MODE_NOSTORE | K.MODE_NOPUT | K.MODE_NOPRECEDE | K.MODE_NOSUCCEED
_POST_TAG = 1
_COMPLETE_TAG = 2
_NOTHING: list[Any] = [None, 0, BYTE]
# Stores become visible to other processes in program order (TSO): a rank that sees
# another's barrier counter sees what that rank stored before it (see Fence).
_TSO = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


_now = time.perf_counter


def _traced(
    impl: WinImpl,
    call: str,
    t0: float,
    mode: int = 0,
    peer: int | None = None,
    group: Any = None,
    lock: int | None = None,
    done: bool = True,
) -> None:
    """Record the synchronisation call ``call`` that started at ``t0`` (tracing on)."""
    record = impl.traced()
    record.update(
        call=call,
        peer=None if peer is None else impl.world_rank(peer),
        group=None if group is None else [impl.world_rank(r) for r in group],
        lock=None if lock is None else ("exclusive" if lock == K.LOCK_EXCLUSIVE else "shared"),
        assertion=mode,
        done=done,
    )
    tracing.rma_sync(record, t0)


def _dead_rank(impl: WinImpl) -> int | None:
    """A rank of the window whose process has died (the lowest), if any."""
    engine = PROCESS.engine
    dead = engine.dead_peers if engine is not None else {}
    world = impl.comm._live().world_ranks
    for target in impl.targets:
        if int(world[target.rank]) in dead or not process_alive(target.pid):
            return target.rank
    return None


def _assertion(assertion: Any, call: str) -> int:
    value = c_int(assertion)
    if value & ~_MODES:
        raise MPIException(ERR_ASSERT, f"{call}: invalid assertion {value:#x}")
    return value


def _group_ranks(impl: WinImpl, group: Any, call: str) -> list[int]:
    """The window ranks of ``group``'s members (``ERR_GROUP`` for a stranger)."""
    if not isinstance(group, Group):
        raise TypeError(f"{call}: group must be an MPI.Group, not {type(group).__name__}")
    members = group._ranks
    if members is None:
        raise MPIException(ERR_GROUP, f"{call}: invalid group GROUP_NULL")
    world = impl.comm._live().world_ranks
    index = {int(w): r for r, w in enumerate(world)}
    ranks = []
    for w in members:
        r = index.get(int(w))
        if r is None:
            raise MPIException(ERR_GROUP, f"{call}: the group has a process outside the window")
        ranks.append(r)
    return ranks


class WinSynchronization:
    """The synchronisation methods of ``MPI.Win``."""

    __slots__ = ()

    def _live(self) -> WinImpl:  # provided by Win
        raise NotImplementedError

    def _settle_sends(self, impl: WinImpl) -> None:
        if impl.sends:
            sends, impl.sends = impl.sends, []
            Request.Waitall(sends)

    def _passive(self, impl: WinImpl, call: str) -> None:
        if not impl.locks and not impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, f"{call}: no passive-target epoch (call Lock first)")

    def _target_rank(self, impl: WinImpl, rank: Any, call: str) -> int:
        rank = c_int(rank)
        if rank != K.PROC_NULL and not 0 <= rank < impl.size:
            raise MPIException(ERR_RANK, f"{call}: invalid rank {rank} (window of {impl.size})")
        return rank

    def _take(self, impl: WinImpl, start: int, length: int, exclusive: bool, call: str) -> None:
        """Take the byte-range lock; while it waits, the rank reports itself blocked in
        ``call`` for the target (hang reports, the controller's status queries)."""
        segment = impl.segment
        assert segment is not None
        if segment.try_lock(start, length, exclusive):
            return
        engine = PROCESS.engine
        me = threading.get_ident()
        if engine is not None:
            peer = start if length == 1 else None  # Lock: the target; Lock_all: all
            name = impl.comm._live().name

            def info() -> WaitInfo:  # no tag: reports show "Win.Lock(peer=1)"
                return WaitInfo(f"Win.{call}", name, peer, None)  # type: ignore[arg-type]

            engine.shared.blocked[me] = (info, time.monotonic())
        try:
            segment.lock(start, length, exclusive)
        except OSError as exc:
            if exc.errno == errno.EDEADLK:
                raise MPIException(
                    ERR_RMA_CONFLICT,
                    f"{call}: taking this lock would deadlock with locks other ranks hold",
                ) from None
            raise
        finally:
            if engine is not None:
                engine.shared.blocked.pop(me, None)

    def _fence_barrier(self, impl: WinImpl) -> None:
        """The barrier of ``Fence`` through the window's shared counters (see the
        module docstring). Past its first looks the rank reports itself blocked in
        ``Win.Fence`` (hang reports, the controller's status queries), and a rank of
        the window that died ends the wait with ``ERR_OTHER``. While an operation in
        flight awaits a frame (``Engine.awaits_frames``: a posted receive whose sender
        may wait for this rank's answer), its looks read the socket now and then, as a
        wait on a board does; once it sleeps, the progress thread reads it."""
        mutexes = impl.mutexes
        assert mutexes is not None
        engine = PROCESS.engine
        me = threading.get_ident()
        blocked = False

        def slow() -> None:
            nonlocal blocked
            if not blocked and engine is not None:
                name = impl.comm._live().name

                def info() -> WaitInfo:
                    return WaitInfo("Win.Fence", name, None, None)  # type: ignore[arg-type]

                engine.shared.blocked[me] = (info, time.monotonic())
                blocked = True
            dead = _dead_rank(impl)
            if dead is not None:
                raise MPIException(
                    ERR_OTHER, f"Fence: rank {dead} of the window has died (it never fenced)"
                )

        def between() -> None:
            if engine is not None and engine.awaits_frames():
                engine.enter()
                try:
                    engine.poll_once()
                finally:
                    engine.leave()

        try:
            mutexes.barrier(impl.rank, slow, between)
        finally:
            if blocked and engine is not None:
                engine.shared.blocked.pop(me, None)

    # -- active target: fence ---------------------------------------------------------
    @mpi_call
    def Fence(self, assertion: int = 0) -> None:
        """End the current fence epoch and (unless ``MODE_NOSUCCEED``) start one; collective."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        mode = _assertion(assertion, "Fence")
        if impl.locks or impl.lock_all or impl.access is not None or impl.exposure is not None:
            raise MPIException(ERR_RMA_SYNC, "Fence: a lock or post/start epoch is still open")
        self._settle_sends(impl)
        if impl.remote is not None:
            impl.remote.flush_all("Fence")
        if impl.mutexes is not None and _TSO:
            self._fence_barrier(impl)
        else:
            impl.comm.Barrier()
        impl.fence = not mode & K.MODE_NOSUCCEED
        if t0:
            _traced(impl, "Fence", t0, mode)

    # -- active target: post/start/complete/wait --------------------------------------
    @mpi_call
    def Start(self, group: Group, assertion: int = 0) -> None:
        """Start an access epoch to the ranks of ``group`` (they must ``Post``)."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        mode = _assertion(assertion, "Start")
        ranks = _group_ranks(impl, group, "Start")
        if impl.access is not None:
            raise MPIException(ERR_RMA_SYNC, "Start: an access epoch is already open")
        if impl.locks or impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, "Start: a passive-target epoch is open")
        if not mode & K.MODE_NOCHECK:
            for rank in ranks:
                impl.comm.Recv(_NOTHING, source=rank, tag=_POST_TAG)
        impl.access = frozenset(ranks)
        impl.fence = False
        if t0:
            _traced(impl, "Start", t0, mode, group=ranks)

    @mpi_call
    def Complete(self) -> None:
        """End the access epoch that ``Start`` opened."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        if impl.access is None:
            raise MPIException(ERR_RMA_SYNC, "Complete: no access epoch (call Start first)")
        if impl.remote is not None:
            impl.remote.flush(impl.access, "Complete")
        for rank in sorted(impl.access):
            impl.sends.append(impl.comm.Isend(_NOTHING, dest=rank, tag=_COMPLETE_TAG))
        if t0:
            _traced(impl, "Complete", t0, group=sorted(impl.access))
        impl.access = None

    @mpi_call
    def Post(self, group: Group, assertion: int = 0) -> None:
        """Start an exposure epoch for the ranks of ``group`` (they ``Start``)."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        mode = _assertion(assertion, "Post")
        ranks = _group_ranks(impl, group, "Post")
        if impl.exposure is not None:
            raise MPIException(ERR_RMA_SYNC, "Post: an exposure epoch is already open")
        if not mode & K.MODE_NOCHECK:
            for rank in ranks:
                impl.sends.append(impl.comm.Isend(_NOTHING, dest=rank, tag=_POST_TAG))
        impl.exposure = [
            impl.comm.Irecv(_NOTHING, source=rank, tag=_COMPLETE_TAG) for rank in ranks
        ]
        if t0:
            _traced(impl, "Post", t0, mode, group=ranks)

    @mpi_call
    def Wait(self) -> bool:
        """End the exposure epoch: wait until every origin called ``Complete``."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        if impl.exposure is None:
            raise MPIException(ERR_RMA_SYNC, "Wait: no exposure epoch (call Post first)")
        Request.Waitall(impl.exposure)
        impl.exposure = None
        if t0:
            _traced(impl, "Wait", t0)
        return True

    @mpi_call
    def Test(self) -> bool:
        """Like ``Wait`` when every origin called ``Complete``; else False, epoch still open."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        if impl.exposure is None:
            raise MPIException(ERR_RMA_SYNC, "Test: no exposure epoch (call Post first)")
        done = Request.Testall(impl.exposure)
        if done:
            impl.exposure = None
        if t0:
            _traced(impl, "Test", t0, done=done)
        return done

    # -- passive target ---------------------------------------------------------------
    @mpi_call
    def Lock(self, rank: int, lock_type: int = K.LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Start an access epoch to ``rank``, holding its lock shared or exclusive."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        kind = c_int(lock_type)
        if kind not in (K.LOCK_EXCLUSIVE, K.LOCK_SHARED):
            raise MPIException(ERR_LOCKTYPE, f"Lock: invalid lock type {kind}")
        mode = _assertion(assertion, "Lock")
        rank = self._target_rank(impl, rank, "Lock")
        if rank == K.PROC_NULL:
            return
        if rank in impl.locks or impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, f"Lock: rank {rank} is already locked")
        if impl.access is not None:
            raise MPIException(ERR_RMA_SYNC, "Lock: a post/start access epoch is open")
        held = 0
        if not mode & K.MODE_NOCHECK and impl.remote is not None:
            impl.remote.lock([rank], kind == K.LOCK_EXCLUSIVE, "Lock")
            held = 1
        elif not mode & K.MODE_NOCHECK:
            self._take(impl, impl.lock_byte(rank), 1, kind == K.LOCK_EXCLUSIVE, "Lock")
            held = 1
        impl.locks[rank] = held
        impl.fence = False
        if t0:
            _traced(impl, "Lock", t0, mode, peer=rank, lock=kind)

    @mpi_call
    def Unlock(self, rank: int) -> None:
        """End the access epoch to ``rank`` that ``Lock`` started."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        rank = self._target_rank(impl, rank, "Unlock")
        if rank == K.PROC_NULL:
            return
        if rank not in impl.locks:
            raise MPIException(ERR_RMA_SYNC, f"Unlock: rank {rank} is not locked")
        held = impl.locks.pop(rank)
        if impl.remote is not None:
            if held:
                impl.remote.unlock(rank, "Unlock")
            else:
                impl.remote.flush([rank], "Unlock")
        elif held and impl.segment is not None:
            impl.segment.unlock(impl.lock_byte(rank), 1)
        if t0:
            _traced(impl, "Unlock", t0, peer=rank)

    @mpi_call
    def Lock_all(self, assertion: int = 0) -> None:
        """Start an access epoch to every rank, holding their locks shared."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        mode = _assertion(assertion, "Lock_all")
        if impl.lock_all or impl.locks:
            raise MPIException(ERR_RMA_SYNC, "Lock_all: ranks are already locked")
        if impl.access is not None:
            raise MPIException(ERR_RMA_SYNC, "Lock_all: a post/start access epoch is open")
        impl.lock_all_nocheck = bool(mode & K.MODE_NOCHECK)
        if not impl.lock_all_nocheck and impl.remote is not None:
            impl.remote.lock(list(range(impl.size)), False, "Lock_all")
        elif not impl.lock_all_nocheck:
            self._take(impl, 0, impl.size, False, "Lock_all")
        impl.lock_all = True
        impl.fence = False
        if t0:
            _traced(impl, "Lock_all", t0, mode, lock=K.LOCK_SHARED)

    @mpi_call
    def Unlock_all(self) -> None:
        """End the access epoch that ``Lock_all`` started."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        if not impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, "Unlock_all: Lock_all was not called")
        if impl.remote is not None:
            impl.remote.flush_all("Unlock_all")
            if not impl.lock_all_nocheck:
                for rank in range(impl.size):
                    impl.remote.unlock(rank, "Unlock_all")
        elif not impl.lock_all_nocheck and impl.segment is not None:
            impl.segment.unlock(0, impl.size)
        impl.lock_all = False
        if t0:
            _traced(impl, "Unlock_all", t0)

    @mpi_call
    def Flush(self, rank: int) -> None:
        """Complete the operations to ``rank`` at origin and target (they already are)."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        rank = self._target_rank(impl, rank, "Flush")
        if rank != K.PROC_NULL and rank not in impl.locks and not impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, f"Flush: rank {rank} is not locked")
        if impl.remote is not None and rank != K.PROC_NULL:
            impl.remote.flush([rank], "Flush")
        if t0 and rank != K.PROC_NULL:
            _traced(impl, "Flush", t0, peer=rank)

    @mpi_call
    def Flush_all(self) -> None:
        """Complete every operation of this passive-target epoch."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        self._passive(impl, "Flush_all")
        if impl.remote is not None:
            impl.remote.flush_all("Flush_all")
        if t0:
            _traced(impl, "Flush_all", t0)

    @mpi_call
    def Flush_local(self, rank: int) -> None:
        """Complete the operations to ``rank`` at the origin (they already are)."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        rank = self._target_rank(impl, rank, "Flush_local")
        if rank != K.PROC_NULL and rank not in impl.locks and not impl.lock_all:
            raise MPIException(ERR_RMA_SYNC, f"Flush_local: rank {rank} is not locked")
        if t0 and rank != K.PROC_NULL:
            _traced(impl, "Flush_local", t0, peer=rank)

    @mpi_call
    def Flush_local_all(self) -> None:
        """Complete every operation of this passive-target epoch at the origin."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        self._passive(impl, "Flush_local_all")
        if t0:
            _traced(impl, "Flush_local_all", t0)

    @mpi_call
    def Sync(self) -> None:
        """Synchronise the window's public and private copies (one copy here: unified)."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        if t0:
            _traced(impl, "Sync", t0)
