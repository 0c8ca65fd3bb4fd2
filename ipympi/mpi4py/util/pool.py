"""``mpi4py.util.pool``: :mod:`multiprocessing.pool`'s interface over executors.

:class:`Pool` runs its tasks with an :class:`~ipympi.mpi4py.futures.MPIPoolExecutor`,
:class:`ThreadPool` with the thread pool executor of :mod:`ipympi.mpi4py.futures`; a subclass
may set ``Executor`` to another executor class (one with ``submit``, and ``map`` and
``starmap`` taking ``chunksize`` and ``unordered``). The ``*_async`` methods return
:class:`AsyncResult` objects wrapping the executor's futures. ``maxtasksperchild`` and
``context`` of :class:`multiprocessing.pool.Pool` are not supported: passing them warns.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable

from ..futures import MPIPoolExecutor, collect, compose
from ..futures import ThreadPoolExecutor as _ThreadPoolExecutor

__all__ = ["ApplyResult", "AsyncResult", "MapResult", "Pool", "ThreadPool"]

Callback = Callable[[Any], Any]


class Pool:
    """Pool using MPI processes as workers."""

    Executor: Any = MPIPoolExecutor

    def __init__(
        self,
        processes: int | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] = (),
        **kwargs: Any,
    ) -> None:
        """Initialize a new Pool instance.

        ``processes`` is the number of workers (the executor's ``max_workers``);
        ``initializer(*initargs)`` runs in each worker first. Other keyword arguments
        go to the executor, except those of :mod:`multiprocessing` that have no
        meaning here (``maxtasksperchild``, ``context``), which warn.
        """
        for name in ("maxtasksperchild", "context"):
            if kwargs.pop(name, None) is not None:
                warnings.warn(f"argument {name!r} is not supported", UserWarning, 2)
        if processes is not None and processes < 1:
            raise ValueError("number of processes must be at least 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self.executor = self.Executor(processes, initializer, initargs, **kwargs)

    def apply(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Mapping = {}) -> Any:
        """Call ``func(*args, **kwds)`` in a worker and return its result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(
        self,
        func: Callable[..., Any],
        args: Iterable[Any] = (),
        kwds: Mapping = {},
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> ApplyResult:
        """Asynchronous version of :meth:`apply`."""
        future = self.executor.submit(func, *args, **kwds)
        return ApplyResult(future, callback, error_callback)

    def map(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = None
    ) -> list[Any]:
        """Apply ``func`` to each item of ``iterable``; return the list of results."""
        return self.map_async(func, iterable, chunksize).get()

    def map_async(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        chunksize: int | None = None,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> MapResult:
        """Asynchronous version of :meth:`map`."""
        return self.starmap_async(func, zip(iterable), chunksize, callback, error_callback)

    def imap(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> Iterator[Any]:
        """Like :meth:`map`, lazily: an iterator of the results, in order."""
        return self.executor.map(func, iterable, chunksize=chunksize)

    def imap_unordered(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> Iterator[Any]:
        """Like :meth:`imap`, the results in the order they complete."""
        return self.executor.map(func, iterable, chunksize=chunksize, unordered=True)

    def starmap(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
    ) -> list[Any]:
        """Like :meth:`map`, each item unpacked into the arguments of ``func``."""
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> MapResult:
        """Asynchronous version of :meth:`starmap`."""
        items = [tuple(args) for args in iterable]
        if chunksize is None:  # as multiprocessing does: about four chunks per worker
            chunksize, extra = divmod(len(items), 4 * _workers(self.executor))
            chunksize += bool(extra)
        chunks = [items[i : i + max(chunksize, 1)] for i in range(0, len(items), max(chunksize, 1))]
        futures = [self.executor.submit(_run_chunk, func, chunk) for chunk in chunks]
        future = compose(collect(futures), lambda results: list(itertools.chain(*results)))
        return MapResult(future, callback, error_callback)

    def istarmap(
        self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]], chunksize: int = 1
    ) -> Iterator[Any]:
        """Like :meth:`starmap`, lazily: an iterator of the results, in order."""
        return self.executor.starmap(func, iterable, chunksize=chunksize)

    def istarmap_unordered(
        self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]], chunksize: int = 1
    ) -> Iterator[Any]:
        """Like :meth:`istarmap`, the results in the order they complete."""
        return self.executor.starmap(func, iterable, chunksize=chunksize, unordered=True)

    def close(self) -> None:
        """Accept no more tasks; the workers end once the submitted ones are done."""
        self.executor.shutdown(wait=False)

    def terminate(self) -> None:
        """Accept no more tasks and cancel those not yet started."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def join(self) -> None:
        """Wait for the workers to end (after :meth:`close` or :meth:`terminate`)."""
        self.executor.shutdown(wait=True)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *args: object) -> None:
        self.terminate()


class ThreadPool(Pool):
    """Pool using threads as workers."""

    Executor = _ThreadPoolExecutor


def _run_chunk(func: Callable[..., Any], chunk: list[tuple]) -> list[Any]:
    return [func(*args) for args in chunk]


def _workers(executor: Any) -> int:
    try:
        return max(int(executor.num_workers), 1)
    except (AttributeError, NotImplementedError):
        return 1


class AsyncResult:
    """The result of a task running asynchronously (wrapping its future)."""

    def __init__(
        self,
        future: cf.Future,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> None:
        self.future = future
        if callback is not None or error_callback is not None:

            def done(f: cf.Future) -> None:
                if f.cancelled():
                    return
                exc = f.exception()
                if exc is None:
                    if callback is not None:
                        callback(f.result())
                elif error_callback is not None:
                    error_callback(exc)

            future.add_done_callback(done)

    def get(self, timeout: float | None = None) -> Any:
        """Return the result when it arrives; ``TimeoutError`` if it is not there in
        ``timeout`` seconds (or never will be: a task cancelled by ``terminate``)."""
        self.wait(timeout)
        if not self.future.done() or self.future.cancelled():
            raise TimeoutError
        return self.future.result()

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the result is available or ``timeout`` seconds pass."""
        cf.wait([self.future], timeout)

    def ready(self) -> bool:
        """Return whether the call has completed."""
        return self.future.done()

    def successful(self) -> bool:
        """Return whether the call completed without raising (``ValueError`` if not
        completed yet)."""
        if not self.future.done():
            raise ValueError(f"{self!r} not ready")
        return not self.future.cancelled() and self.future.exception() is None


class ApplyResult(AsyncResult):
    """Result type of :meth:`Pool.apply_async`."""


class MapResult(AsyncResult):
    """Result type of :meth:`Pool.map_async` and :meth:`Pool.starmap_async`."""
