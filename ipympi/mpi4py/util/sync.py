"""``mpi4py.util.sync``: synchronization among the processes of a communicator.

* :class:`Sequential`: a section the processes run one after the other, in rank order.
* :class:`Counter`: consecutive values handed out to whichever process asks.
* :class:`Mutex`: mutual exclusion, optionally recursive.
* :class:`Condition`: a condition variable over a mutex.
* :class:`Semaphore`: a counting semaphore, optionally bounded.

The interfaces are mpi4py's (close to :mod:`threading`'s, for processes instead of
threads). mpi4py implements the last four with one-sided communication; ipympi has none,
so their state lives with one process, whose service thread answers the others'
requests over sockets (see :mod:`ipympi.mpi4py.util._syncservice`): a counter's value with its
``root``, a mutex's holder and first-come-first-served queue and a condition's waiting
list with rank 0. Creating an object, as in mpi4py, is collective over the communicator, and so is
``free``; a process that still holds a mutex when it frees it releases it first.
"""

from __future__ import annotations

from typing import Any, Callable

from ... import MPI
from ._syncservice import Client, CondState, CounterState, MutexState, create

__all__ = ["Condition", "Counter", "Mutex", "Semaphore", "Sequential"]


class Sequential:
    """Context manager for sequential execution within a group of MPI processes.

    Process ``i`` waits in a blocking receive (from ``i - 1``, with ``tag``, on ``comm``)
    until the previous process has run the section, and signals process ``i + 1`` with a
    send when it has run it.
    """

    def __init__(self, comm: MPI.Intracomm, tag: int = 0) -> None:
        """Initialize sequential execution over ``comm``, signalling with ``tag``."""
        self.comm = comm
        self.tag = int(tag)

    def __enter__(self) -> Sequential:
        """Enter sequential execution."""
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        """Exit sequential execution."""
        self.end()

    def begin(self) -> None:
        """Begin sequential execution: wait for the previous process."""
        rank = self.comm.Get_rank()
        if rank > 0:
            self.comm.Recv([bytearray(0), MPI.BYTE], rank - 1, self.tag)

    def end(self) -> None:
        """End sequential execution: let the next process go."""
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        if rank < size - 1:
            self.comm.Send([b"", MPI.BYTE], rank + 1, self.tag)


class _Shared:
    """An object whose state a service on ``root`` keeps (collective to create)."""

    def __init__(self, comm: MPI.Intracomm, root: int, make: Callable[[], Any]) -> None:
        self._comm = comm
        self._client: Client | None = create(comm, root, make)

    def _live(self) -> Client:
        if self._client is None:
            raise RuntimeError(f"{type(self).__name__} object has been freed")
        return self._client

    def _call(self, op: str, *args: Any) -> Any:
        return self._live().call(op, *args)

    def _free(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.free()


class Counter(_Shared):
    """Produce consecutive values within a group of MPI processes.

    Like :func:`itertools.count`; ``next`` returns the current value and adds the step,
    atomically for all the processes. The value lives on process ``root``.
    """

    def __init__(
        self,
        start: Any = 0,
        step: Any = 1,
        *,
        typecode: str = "i",
        comm: MPI.Intracomm = MPI.COMM_SELF,
        info: MPI.Info = MPI.INFO_NULL,
        root: int = 0,
    ) -> None:
        """Initialize a global counter (collective over ``comm``).

        ``typecode`` is the counter's C type, as in the :mod:`array` module; ``info`` is
        accepted for compatibility (there is no memory window to give it to).
        """
        self._step = step
        super().__init__(comm, root, lambda: CounterState(start, typecode))

    def __iter__(self) -> Counter:
        """Implement ``iter(self)``."""
        return self

    def __next__(self) -> Any:
        """Implement ``next(self)``."""
        return self.next()

    def next(self, incr: Any = None) -> Any:
        """Return the current value and increment it by ``incr`` (default: the step)."""
        return self._call("next", self._step if incr is None else incr)

    def free(self) -> None:
        """Free counter resources."""
        self._free()


class Mutex(_Shared):
    """Establish a critical section or mutual exclusion among MPI processes.

    Like :class:`threading.Lock` (or :class:`threading.RLock` if ``recursive``), except
    that a process owns the mutex it holds: acquiring a non-recursive mutex one already
    holds, or releasing one not held, raises ``RuntimeError``. Processes waiting for
    the mutex get it in the order they asked.
    """

    def __init__(
        self,
        *,
        recursive: bool = False,
        comm: MPI.Intracomm = MPI.COMM_SELF,
        info: MPI.Info = MPI.INFO_NULL,
    ) -> None:
        """Initialize a mutex object (collective over ``comm``)."""
        self._recursive = bool(recursive)
        self._count = 0
        super().__init__(comm, 0, MutexState)

    def __enter__(self) -> Mutex:
        """Acquire mutex."""
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        """Release mutex."""
        self.release()

    def acquire(self, blocking: bool = True) -> bool:
        """Acquire the mutex, waiting for it if ``blocking``; return whether it is held."""
        self._live()
        if self._count:
            if not self._recursive:
                raise RuntimeError("cannot acquire already held mutex")
            self._count += 1
            return True
        if self._call("lock" if blocking else "trylock"):
            self._count = 1
        return bool(self._count)

    def release(self) -> None:
        """Release the mutex (once, for a recursive one)."""
        self._live()
        if not self._count:
            raise RuntimeError("cannot release unheld mutex")
        self._count -= 1
        if not self._count:
            self._call("unlock")

    def locked(self) -> bool:
        """Return whether this process holds the mutex."""
        self._live()
        return self._count > 0

    def count(self) -> int:
        """Return the recursion count (how many releases the mutex still needs)."""
        self._live()
        return self._count

    def free(self) -> None:
        """Free mutex resources, releasing the mutex if this process holds it."""
        if self._client is not None and self._count:
            self._count = 1
            self.release()
        self._free()


class Condition:
    """A condition variable: processes wait on it until another process notifies them.

    Like :class:`threading.Condition`. Its mutex is ``mutex``, or a new one (recursive if
    ``recursive``) over ``comm``; ``wait`` registers the process as waiting before it
    releases the mutex, so a notification by the next holder always finds it.
    """

    def __init__(
        self,
        mutex: Mutex | None = None,
        *,
        recursive: bool = True,
        comm: MPI.Intracomm = MPI.COMM_SELF,
        info: MPI.Info = MPI.INFO_NULL,
    ) -> None:
        """Initialize a condition variable (collective over the mutex's communicator)."""
        self._owns_mutex = mutex is None
        self._mutex = Mutex(recursive=recursive, comm=comm, info=info) if mutex is None else mutex
        self._waiters: _Waiters | None = _Waiters(self._mutex._comm)

    def __enter__(self) -> Condition:
        """Acquire the underlying mutex."""
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        """Release the underlying mutex."""
        self.release()

    def _live(self) -> _Waiters:
        if self._waiters is None:
            raise RuntimeError("Condition object has been freed")
        return self._waiters

    def acquire(self, blocking: bool = True) -> bool:
        """Acquire the underlying mutex."""
        self._live()
        return self._mutex.acquire(blocking)

    def release(self) -> None:
        """Release the underlying mutex."""
        self._live()
        self._mutex.release()

    def locked(self) -> bool:
        """Return whether the underlying mutex is held by this process."""
        self._live()
        return self._mutex.locked()

    def wait(self) -> bool:
        """Wait until notified by another process; the mutex must be held."""
        waiters = self._live()
        mutex = self._mutex
        if not mutex.locked():
            raise RuntimeError("cannot wait on un-acquired lock")
        waiters.register()
        count = mutex.count()
        mutex._count = 1  # one release gives the mutex up, however deep
        mutex.release()
        waiters.wait()
        mutex.acquire()
        mutex._count = count
        return True

    def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Wait until ``predicate()`` is true; return its last value."""
        self._live()
        if not self._mutex.locked():
            raise RuntimeError("cannot wait on un-acquired lock")
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> int:
        """Wake up at most ``n`` waiting processes; return how many were woken."""
        return self._notify(int(n))

    def notify_all(self) -> int:
        """Wake up all waiting processes; return how many were woken."""
        return self._notify(None)

    def _notify(self, n: int | None) -> int:
        waiters = self._live()
        if not self._mutex.locked():
            raise RuntimeError("cannot notify on un-acquired lock")
        return waiters.notify(n)

    def free(self) -> None:
        """Free condition resources (and the mutex, if the condition made it)."""
        if self._waiters is not None:
            self._waiters.free()
            self._waiters = None
            if self._owns_mutex:
                self._mutex.free()


class _Waiters(_Shared):
    """The waiting list of a condition variable (kept by rank 0)."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        super().__init__(comm, 0, CondState)

    def register(self) -> None:
        self._call("wait")

    def wait(self) -> None:
        """Wait for the wake-up that a ``notify`` sends."""
        self._live().receive()

    def notify(self, n: int | None) -> int:
        return self._call("notify", n)

    def free(self) -> None:
        self._free()


class Semaphore:
    """A counting semaphore among MPI processes.

    Like :class:`threading.BoundedSemaphore` (or :class:`threading.Semaphore` if not
    ``bounded``): a global :class:`Counter` holds the value, and a :class:`Condition`
    makes processes wait while it is zero.
    """

    def __init__(
        self,
        value: int = 1,
        *,
        bounded: bool = True,
        comm: MPI.Intracomm = MPI.COMM_SELF,
        info: MPI.Info = MPI.INFO_NULL,
    ) -> None:
        """Initialize a semaphore with ``value`` (collective over ``comm``)."""
        if value < 0:
            raise ValueError("initial value must be non-negative")
        self._bounded = bool(bounded)
        self._value = value
        self._counter = Counter(value, comm=comm, info=info)
        self._condition = Condition(comm=comm, info=info)

    def __enter__(self) -> Semaphore:
        """Acquire semaphore."""
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        """Release semaphore."""
        self.release()

    def acquire(self, blocking: bool = True) -> bool:
        """Decrement the value by one, waiting while it is zero if ``blocking``.

        Returns whether the value was decremented.
        """
        with self._condition:
            while self._counter.next(0) == 0:
                if not blocking:
                    return False
                self._condition.wait()
            self._counter.next(-1)
            return True

    def release(self, n: int = 1) -> None:
        """Increment the value by ``n`` and wake up as many waiting processes."""
        if n < 1:
            raise ValueError("n must be one or more")
        with self._condition:
            if self._bounded and self._counter.next(0) + n > self._value:
                raise ValueError("semaphore released too many times")
            self._counter.next(n)
            self._condition.notify(n)

    def free(self) -> None:
        """Free semaphore resources."""
        self._counter.free()
        self._condition.free()
