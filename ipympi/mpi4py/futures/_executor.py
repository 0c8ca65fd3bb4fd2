"""The executors of :mod:`ipympi.mpi4py.futures`: ``MPIPoolExecutor`` and its thread and
process variants.

Each executor is a :class:`concurrent.futures.Executor` with mpi4py's additions (``map``
and ``starmap`` with ``chunksize``, ``buffersize`` and ``unordered``, ``bootup``,
``num_workers``) and hands its tasks to a pool (see :mod:`ipympi.mpi4py.futures._pools`):

* ``MPIPoolExecutor`` to MPI worker processes: those of ``python -m mpi4py.futures``
  (shared by every executor of the program), those an ``MPICommExecutor`` set up, or,
  anywhere else, workers it starts with ``MPI.Comm.Spawn`` (:func:`~._pools.spawn_pool`).
  An executor whose workers cannot start fails its first task (and ``bootup``) with the
  error, and is broken afterwards.
* ``ThreadPoolExecutor`` to threads, ``ProcessPoolExecutor`` to processes of this host.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Callable

from ... import MPI
from ._pools import Client, MPIPool, ProcessPool, ThreadPool, WorkItem, spawn_pool

__all__ = ["MPIPoolExecutor", "ProcessPoolExecutor", "ThreadPoolExecutor", "shared_pool"]

_CANNOT_START = (NotImplementedError, MPI.Exception)  # what making a pool may raise
shared_pool: list[MPIPool] = []  # the world's workers, under python -m mpi4py.futures


class MPIPoolExecutor(cf.Executor):
    """MPI-based asynchronous executor."""

    Future = cf.Future

    def __init__(
        self,
        max_workers: int | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] = (),
        **kwargs: Any,
    ) -> None:
        """Initialize a new executor.

        ``max_workers`` (default: ``MPI4PY_FUTURES_MAX_WORKERS``, else what the pool has)
        must be positive; ``initializer(*initargs)`` runs in each worker before its
        first task. Keyword options: ``globals``, ``path``, ``wdir``, ``env`` (applied
        in the workers before the initializer), ``backoff`` (the longest idle sleep of
        the manager thread) and the spawn options: ``python_exe``, ``python_args``,
        ``mpi_info`` (a dict or ``MPI.Info`` for ``Spawn``), ``main`` (whether workers
        import the main program, default True); ``use_pkl5`` is accepted.
        """
        if max_workers is None and "MPI4PY_FUTURES_MAX_WORKERS" in os.environ:
            max_workers = int(os.environ["MPI4PY_FUTURES_MAX_WORKERS"])
        if max_workers is not None and int(max_workers) <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._max_workers = max_workers
        options = dict(kwargs)
        options.update(initializer=initializer, initargs=tuple(initargs))
        self._client = Client(options)
        self._lock = threading.Lock()
        self._shutdown = False
        self._pending: set[cf.Future] = set()
        self._pool: Any = None
        self._owns_pool = True

    # -- the pool -------------------------------------------------------------------------
    def _make_pool(self) -> Any:
        """The pool this executor uses (made on first need)."""
        if shared_pool:
            self._owns_pool = False
            return shared_pool[0]
        return spawn_pool(self._max_workers, self._client.options)

    def _use_pool(self, pool: Any, owned: bool) -> None:
        """Use ``pool`` (an ``MPICommExecutor``'s workers, say)."""
        self._pool, self._owns_pool = pool, owned

    def _get_pool(self) -> Any:
        if self._pool is None:
            try:
                self._pool = self._make_pool()
            except _CANNOT_START as exc:
                broken = cf.BrokenExecutor(str(exc))
                broken.__cause__ = exc
                self._client.broken = broken
                raise
        return self._pool

    @property
    def num_workers(self) -> int:
        """Number of worker processes (or threads)."""
        with self._lock:
            return int(self._get_pool().num_workers)

    def bootup(self, wait: bool = True) -> MPIPoolExecutor:
        """Allocate executor resources eagerly (the workers); return the executor."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot bootup after shutdown")
            self._get_pool().start()
        return self

    # -- submitting -----------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        """Submit a callable to be executed with the given arguments."""
        future: cf.Future = self.Future()
        with self._lock:
            if self._client.broken is not None:
                raise self._client.broken
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            try:
                pool = self._get_pool()
            except _CANNOT_START as exc:
                future.set_running_or_notify_cancel()
                future.set_exception(exc)
                return future
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)
            pool.push(self._client, WorkItem(future, fn, args, kwargs))
        return future

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        unordered: bool = False,
    ) -> Iterator[Any]:
        """Return an iterator equivalent to ``map(fn, *iterables)``."""
        return self.starmap(
            fn,
            zip(*iterables),
            timeout=timeout,
            chunksize=chunksize,
            buffersize=buffersize,
            unordered=unordered,
        )

    def starmap(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        unordered: bool = False,
    ) -> Iterator[Any]:
        """Return an iterator equivalent to ``itertools.starmap(fn, iterable)``.

        The calls go to the workers in chunks of ``chunksize``; at most ``buffersize``
        chunks (default: all) are submitted ahead of the results yielded. Results come
        in order, or as they complete if ``unordered``.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None and buffersize < 1:
            raise ValueError("buffersize must be None or > 0.")
        chunks = _chunks(iterable, chunksize)
        return _results(self, fn, chunks, timeout, buffersize, unordered)

    # -- ending -----------------------------------------------------------------------------
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Clean-up the resources associated with the executor.

        Pending tasks run (unless ``cancel_futures``); with ``wait``, return once they
        have. The workers stop if the executor started them.
        """
        with self._lock:
            self._shutdown = True
            pool = self._pool
            if pool is not None and cancel_futures:
                pool.cancel(self._client)
        if pool is None:
            return
        if self._owns_pool:
            pool.stop(wait)
        elif wait:
            cf.wait(list(self._pending))


class ThreadPoolExecutor(MPIPoolExecutor):
    """`MPIPoolExecutor` subclass using a pool of threads."""

    def _make_pool(self) -> ThreadPool:
        workers = self._max_workers or min(32, (os.cpu_count() or 1) + 4)
        return ThreadPool(workers, self._client)


class ProcessPoolExecutor(MPIPoolExecutor):
    """`MPIPoolExecutor` subclass using a pool of processes."""

    def _make_pool(self) -> ProcessPool:
        return ProcessPool(self._max_workers or os.cpu_count() or 1, self._client)


# -- map and starmap ----------------------------------------------------------------------------


def _run_chunk(fn: Callable[..., Any], chunk: list[tuple]) -> list[Any]:
    """Run one chunk of a map in a worker."""
    return [fn(*args) for args in chunk]


def _chunks(iterable: Iterable[Any], size: int) -> Iterator[list[tuple]]:
    iterator = iter(iterable)
    while chunk := [tuple(args) for args in itertools.islice(iterator, size)]:
        yield chunk


def _results(
    executor: MPIPoolExecutor,
    fn: Callable[..., Any],
    chunks: Iterator[list[tuple]],
    timeout: float | None,
    buffersize: int | None,
    unordered: bool,
) -> Iterator[Any]:
    """Submit the chunks (all at once, or ``buffersize`` ahead) and yield the results."""
    deadline = None if timeout is None else time.monotonic() + timeout
    submit = lambda chunk: executor.submit(_run_chunk, fn, chunk)  # noqa: E731
    pending = collections.deque(submit(c) for c in itertools.islice(chunks, buffersize))
    if buffersize is None:
        pending.extend(submit(chunk) for chunk in chunks)

    def generate() -> Iterator[Any]:
        try:
            while pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if unordered:
                    done, _ = cf.wait(pending, remaining, cf.FIRST_COMPLETED)
                    if not done:
                        raise cf.TimeoutError()
                    future = next(f for f in pending if f in done)
                    pending.remove(future)
                else:
                    future = pending.popleft()
                results = future.result(remaining)
                if buffersize is not None:
                    pending.extend(submit(chunk) for chunk in itertools.islice(chunks, 1))
                yield from results
        finally:
            for future in pending:
                future.cancel()

    return generate()
