"""Mutexes and a barrier that the processes of one host share, without system calls.

A :class:`HostMutexes` is ``n`` mutexes, each a POSIX named semaphore (the standard
library's ``_multiprocessing.SemLock``): taking a free one and giving it back are one
atomic instruction each in the C library (``sem_trywait``/``sem_post``, futex based),
about a tenth of a ``fcntl`` byte-range lock's two system calls. One process creates
them, the others open them by name, and once all have them open the creator unlinks
the names, as with :class:`~ipympi.progress.shm.Segment`: nothing is left behind.

A semaphore is not released when its holder dies, as a ``fcntl`` lock is, so each mutex
has a holder slot in a small shared segment (the holder's pid, 0 when free). A process
that waits for a mutex waits in slices of :data:`SLICE` seconds (the wait is
interruptible); after each slice it looks at the slot, and when the holder has died
(no such process, or a zombie) it posts the semaphore for it, once (see :meth:`_free`).
A holder that died between taking the semaphore and writing its pid (or between
clearing it and posting) leaves no pid in the slot: such a mutex is freed too once the
slot showed the same non-pid value at every look for :data:`ORPHANED` seconds while the
semaphore stayed taken, and one of the ``peers`` (the processes that share the
mutexes) is dead; a live holder is in that state for nanoseconds, not at twenty looks
in a row. So no process waits forever for a dead one;
a live holder is waited for as long as it holds.

The same segment holds a barrier of the ``n`` processes (:meth:`HostMutexes.barrier`):
each process has a counter on a cache line of its own, which only it writes. To arrive,
a process stores its count of barriers into it and rings every other process's
doorbell (one more named semaphore each); the barrier is passed when every counter
has reached that count. A waiter looks :data:`SPINS` times (yielding the processor
between looks), then drains its doorbell, looks again and sleeps on it: a ring that
comes after the look was posted after the counter it announces, so no arrival is
missed. Counters only grow, so a process that passed a barrier and arrives at the
next one early does not confuse one still leaving the last.

Memory ordering: what a holder stores to shared memory before :meth:`release` is seen
by the next process after its :meth:`acquire` returns. ``sem_post`` is an atomic
read-modify-write with release semantics and a successful ``sem_trywait``/``sem_wait``
one with acquire semantics (on x86 both are ``lock``-prefixed instructions, full
barriers; x86 is TSO besides: stores become visible in program order). The stores of
the critical section are C stores (numpy, ``struct``, ``memcpy``) made by calls that
return before ``sem_post`` is called, and the compiler cannot move them across that
opaque library call. The holder slot itself is only a hint for recovery: it is written
by the holder after taking the semaphore and cleared before posting it.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import time
from typing import Any, Callable

from .shm import Segment, process_alive

__all__ = ["LOOKS_BETWEEN", "ORPHANED", "SLICE", "SPINS", "HostMutexes"]

SLICE = 0.05  # seconds a waiter sleeps before it looks at the holder again
ORPHANED = 1.0  # seconds a held mutex may show no holder before a dead peer is blamed
# Looks (each after a sched_yield) at a barrier before sleeping: up to about 100 us of
# CPU, more than a receive's 45 (``transport.SPIN_TRIES``), as a fence after a large
# copy often waits for a peer still copying, and waking from a sleep costs tens of us.
SPINS = 200
LOOKS_BETWEEN = 16  # looks at a barrier between two calls of its ``between``
_SEMAPHORE = 1  # SemLock kind: a counting semaphore
_BELL_MAX = 2**31 - 1  # a doorbell counts rings up to SEM_VALUE_MAX
_STRIDE = 64  # bytes between two processes' barrier counters: one cache line each

try:
    _native: Any = importlib.import_module("_multiprocessing")
    _SemLock: Any = _native.SemLock
    _sem_unlink: Any = _native.sem_unlink
except (ImportError, AttributeError):  # a Python built without POSIX semaphores
    _SemLock = _sem_unlink = None


_sched_yield = getattr(os, "sched_yield", lambda: None)


def _sem_name(segment_name: str, index: int) -> str:
    return "/" + os.path.basename(segment_name) + f"-{index}"


def _arrivals_offset(n: int) -> int:
    """Where the barrier's counters start in the segment: after the holder slots, on
    a cache line of their own."""
    return -(-8 * max(n, 1) // _STRIDE) * _STRIDE


class HostMutexes:
    """``n`` mutexes shared by processes of one host; see the module docstring.

    Create them in one process with :meth:`create`, pass :attr:`name` to the others,
    which call :meth:`open`; once all have them open, the creator calls :meth:`unlink`.
    Raises ``OSError`` (or ``ImportError``-like ``OSError``) where named semaphores are
    not available; callers then keep to ``fcntl`` locks.
    """

    def __init__(
        self, segment: Segment, sems: list[Any], bells: list[Any], peers: list[int]
    ) -> None:
        n = len(sems)
        self.segment = segment
        self.name = segment.name
        self._sems = sems
        self._bells = bells
        whole = memoryview(segment.array).cast("B")  # type: ignore[arg-type]
        self._slots: Any = whole[: 8 * n].cast("q") if n else None
        start = _arrivals_offset(n)
        self._arrivals: Any = whole[start : start + _STRIDE * n].cast("q") if n else None
        self._arrived = [_STRIDE // 8 * i for i in range(n)]  # each process's counter
        self._epoch = 0  # barriers this process arrived at
        self._pid = os.getpid()
        self._posters: dict[int, Any] = {}  # second handles, for posting for the dead
        self.peers = [p for p in peers if p != self._pid]

    @classmethod
    def create(cls, n: int, peers: list[int] = (), prefix: str = "ipympi-mtx") -> HostMutexes:  # type: ignore[assignment]
        """``n`` new free mutexes (and a barrier of ``n`` processes) under fresh names."""
        if _SemLock is None:
            raise OSError("named semaphores are not available in this Python")
        segment = Segment.create(_arrivals_offset(n) + _STRIDE * n, prefix=prefix)
        sems: list[Any] = []
        try:
            for i in range(n):
                sems.append(_SemLock(_SEMAPHORE, 1, 1, _sem_name(segment.name, i), False))
            for i in range(n):
                sems.append(
                    _SemLock(_SEMAPHORE, 0, _BELL_MAX, _sem_name(segment.name, n + i), False)
                )
        except BaseException:
            cls._unlink_names(segment.name, len(sems))
            segment.close()
            segment.unlink()
            raise
        return cls(segment, sems[:n], sems[n:], list(peers))

    @classmethod
    def open(cls, name: str, n: int, peers: list[int] = ()) -> HostMutexes:  # type: ignore[assignment]
        """The mutexes another process created under ``name``."""
        if _SemLock is None:
            raise OSError("named semaphores are not available in this Python")
        segment = Segment.open(name, _arrivals_offset(n) + _STRIDE * n)
        try:
            sems = [_SemLock._rebuild(0, _SEMAPHORE, 1, _sem_name(name, i)) for i in range(n)]
            bells = [
                _SemLock._rebuild(0, _SEMAPHORE, _BELL_MAX, _sem_name(name, n + i))
                for i in range(n)
            ]
        except BaseException:
            segment.close()
            raise
        return cls(segment, sems, bells, list(peers))

    @staticmethod
    def _unlink_names(name: str, n: int) -> None:
        for i in range(n):
            try:
                _sem_unlink(_sem_name(name, i))
            except OSError:
                pass

    def unlink(self) -> None:
        """Remove the names (the mutexes stay while some process has them open)."""
        self._unlink_names(self.name, 2 * len(self._sems))
        self.segment.unlink()

    def close(self) -> None:
        """Let go of the mutexes in this process."""
        # Drop the second handles first: closing a semaphore twice is harmless
        # (the second close finds no mapping), using it after the first is not.
        self._posters.clear()
        self._sems = []
        self._bells = []
        self._slots = self._arrivals = None
        self.segment.close()

    # -- taking and giving back ---------------------------------------------------------
    def acquire(self, index: int) -> None:
        """Take mutex ``index``, waiting as long as a live process holds it."""
        sem = self._sems[index]
        try:
            if not sem.acquire(False):
                self._wait(sem, index)
            self._slots[index] = self._pid
        except BaseException:  # interrupted: never keep the mutex held
            if sem._is_mine():
                sem.release()
            raise

    def release(self, index: int) -> None:
        """Give mutex ``index`` back (taken by :meth:`acquire` in this thread)."""
        self._slots[index] = 0
        self._sems[index].release()

    def _wait(self, sem: Any, index: int) -> None:
        """Wait for mutex ``index`` in slices; free it when its holder died."""
        seen, since = None, 0.0
        while not sem.acquire(True, SLICE):
            holder = int(self._slots[index])
            if holder > 0:
                seen = None
                if holder != self._pid and not process_alive(holder):
                    self._free(sem, index, holder)
                continue
            now = time.monotonic()
            if holder != seen:
                seen, since = holder, now
            elif now - since >= ORPHANED and not all(map(process_alive, self.peers)):
                self._free(sem, index, holder)
                seen = None

    def _free(self, sem: Any, index: int, holder: int) -> None:
        """Post mutex ``index`` for ``holder``, who died holding it (0 or less: a holder
        that died without its pid in the slot). One waiter at a time looks, under a
        ``fcntl`` lock on the slot, and marks the slot (a negative number, not the one
        it saw) before posting: a waiter that saw the same holder finds the slot
        changed and does not post twice. The post goes through a second handle on the
        semaphore, so that this process's own handle counts only its own takes."""
        fd = self.segment.fd
        fcntl.lockf(fd, fcntl.LOCK_EX, 8, 8 * index, os.SEEK_SET)
        try:
            if int(self._slots[index]) != holder:
                return  # freed by another waiter, or changed hands
            self._slots[index] = min(holder, 0) - 1
            poster = self._posters.get(index)
            if poster is None:
                poster = self._posters[index] = _SemLock._rebuild(sem.handle, _SEMAPHORE, 1, None)
            poster.release()
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 8, 8 * index, os.SEEK_SET)

    # -- the barrier ----------------------------------------------------------------------
    def barrier(
        self, me: int, slow: Callable[[], None], between: Callable[[], None] | None = None
    ) -> None:
        """Arrive at the next barrier as process ``me`` of the ``n`` and return once all
        arrived (see the module docstring). The wait looks :data:`SPINS` times, calling
        ``between()`` (when given) after every :data:`LOOKS_BETWEEN`, then sleeps on
        ``me``'s doorbell in slices of :data:`SLICE` seconds, calling ``slow()`` before
        each (either may raise, as an interrupt may: the arrival is then taken back,
        unless every process had arrived)."""
        arrivals, arrived = self._arrivals, self._arrived
        epoch = self._epoch + 1
        arrivals[arrived[me]] = epoch
        self._epoch = epoch
        bells = self._bells
        for index, bell in enumerate(bells):
            if index != me:
                bell.release()
        try:
            spins = SPINS
            while True:
                for where in arrived:
                    if arrivals[where] < epoch:
                        break
                else:
                    break
                if spins:
                    spins -= 1
                    _sched_yield()
                    if between is not None and not spins % LOOKS_BETWEEN:
                        between()
                    continue
                slow()
                self._drain(me)
                if all(arrivals[where] >= epoch for where in arrived):
                    break
                bells[me].acquire(True, SLICE)
        except BaseException:
            if not all(arrivals[where] >= epoch for where in arrived):
                arrivals[arrived[me]] = epoch - 1  # as if this process had not come
                self._epoch = epoch - 1
            raise
        self._drain(me)

    def _drain(self, me: int) -> None:
        """Take every ring of ``me``'s doorbell (each arrival rings the others')."""
        take = self._bells[me].acquire
        while take(False):
            pass
