"""Work handed from another thread to the thread that drives a cluster.

A :class:`~ipympi.controller.cluster.Cluster` is driven by one thread: its
sockets are not thread-safe, and everything happens in :meth:`Cluster.pump`.
While a parallel cell runs, that thread waits there for the ranks, and a
request that must get through meanwhile (``%mpi status``, ``%mpi stop``,
``%mpi restart``, read by the kernel's shell-channel thread) is handed over
as an *errand*: a function the driving thread runs at its next wait, woken
by a byte on a pipe that the cluster's poller watches.

Errands are taken only while someone is known to wait (:meth:`Errands.taking`
around following a cell); those handed over just as it ends run at its end,
so none is lost. An errand reports its own errors.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Callable

__all__ = ["Errands"]

Errand = Callable[[], None]


class Errands:
    """A queue of errands for the driving thread, with a pipe that wakes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[Errand] = collections.deque()
        self._taking = 0  # nested taking() blocks of the driving thread
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    @property
    def fd(self) -> int:
        """Readable when errands are waiting: the driving thread's poller watches it."""
        return self._read

    @property
    def open(self) -> bool:
        """Whether errands are taken now (a hint: :meth:`hand` decides under the lock)."""
        return self._taking > 0

    def hand(self, errand: Errand) -> bool:
        """From any thread: have ``errand`` run by the driving thread; False when it is
        not waiting for anything (the caller then goes the usual way)."""
        with self._lock:
            if not self._taking:
                return False
            self._queue.append(errand)
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"\0")
        return True

    def run(self) -> None:
        """In the driving thread: run the errands handed over so far."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass
        while True:
            with self._lock:
                if not self._queue:
                    return
                errand = self._queue.popleft()
            errand()

    @contextlib.contextmanager
    def taking(self) -> Iterator[None]:
        """In the driving thread, around a wait for the ranks: errands are taken
        meanwhile, and those still queued at the end are run then."""
        with self._lock:
            self._taking += 1
        try:
            yield
        finally:
            with self._lock:
                self._taking -= 1
            self.run()

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
