"""Work handed from another thread to the thread that drives a cluster.

A :class:`~ipympi.notebook.controller.cluster.Cluster` is driven by one thread: its
sockets are not thread-safe, and everything happens in :meth:`Cluster.pump`.
While a parallel cell runs, that thread waits there for the ranks, and a
request that must get through meanwhile (``%mpi status``, ``%mpi stop``,
``%mpi restart``, read by the kernel's shell-channel thread) is handed over
as an *errand*: a function the driving thread runs at its next wait, woken
by a byte on a pipe that the cluster's poller watches.

Errands are taken only while someone is known to wait (:meth:`Errands.taking`
around following a cell); those handed over just as it ends run at its end,
so none is lost. An errand reports its own errors. :func:`driven` runs work
on the cluster from any thread: a magic run in a kernel subshell's thread,
say, while the main thread follows a cell.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

__all__ = ["DRIVEN_TIMEOUT", "Errands", "driven"]

Errand = Callable[[], None]
T = TypeVar("T")
DRIVEN_TIMEOUT = 120.0  # seconds work handed to the driving thread may take


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


def driven(errands: Errands, work: Callable[[], T], timeout: float = DRIVEN_TIMEOUT) -> T:
    """``work()``, run by the thread that drives the cluster: this one, if it is the main
    thread or nothing waits on the cluster now; else the main thread, at its next wait,
    while this one waits for the result (at most ``timeout`` seconds)."""
    if threading.current_thread() is threading.main_thread():
        return work()
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def errand() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # raised again in the thread that asked
            outcome["error"] = exc
        finally:
            done.set()

    if not errands.hand(errand):
        return work()  # no cell runs: the cluster is this thread's for now
    if not done.wait(timeout):
        raise TimeoutError(f"the thread driving the MPI session did not answer in {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
