"""The pools of workers that :mod:`ipympi.mpi4py.futures`' executors hand their tasks to.

An executor pushes *work items* (a future and the call to make) to a pool, tagged with
the executor's :class:`Client` record (its number, the options to initialize workers
with, and whether it is broken). Three kinds of pool run them:

* :class:`ThreadPool`: threads of this process (``ThreadPoolExecutor``, and
  ``MPICommExecutor`` over a single process);
* :class:`ProcessPool`: processes of the standard :mod:`concurrent.futures` module;
* :class:`MPIPool`: MPI processes across an intercommunicator, whose remote group runs
  :func:`ipympi.mpi4py.futures._worker.serve`. A manager thread sends each task to an idle
  worker and collects results: while every worker has a task it waits for the first
  answer in a blocking probe; while some are idle it polls with nonblocking calls
  (sleeping up to ``backoff`` seconds between looks), and with nothing queued or running
  it sleeps until a task or a stop comes. Several executors may share one pool (under
  ``python -m mpi4py.futures``): a
  worker runs an executor's initializer before its first task of that executor.

A worker whose initializer raises breaks its executor: the executor's pending tasks,
and any it is given later, fail with :class:`~concurrent.futures.BrokenExecutor`.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import os
import sys
import threading
import time
from typing import Any, Callable

from ... import MPI
from ...mpi import byvalue

__all__ = ["Client", "MPIPool", "ProcessPool", "ThreadPool", "WorkItem", "spawn_pool"]

IDLE_WAIT = 0.05  # seconds the manager sleeps at most when no task is queued or running
TASK_TAG = 1  # master -> worker: ("init", number, options) | ("task", call) | ("stop",)
PACKED = "packed"  # master -> worker: (PACKED, one of the above pickled by byvalue)
RESULT_TAG = 2  # worker -> master: (succeeded, result or exception)


class WorkItem:
    """A call to make, and the future that gets its outcome."""

    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(self, future: cf.Future, fn: Callable[..., Any], args: tuple, kwargs: dict):
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def run(self) -> None:
        """Make the call here, if the future was not cancelled first."""
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class Client:
    """An executor as its pool sees it: its number, worker options and broken state."""

    _numbers = itertools.count(1)

    def __init__(self, options: dict[str, Any]) -> None:
        self.number = next(self._numbers)
        self.options = options
        self.broken: cf.BrokenExecutor | None = None

    def needs_init(self) -> bool:
        return any(self.options.get(key) for key in _INIT_KEYS)

    def fail(self, item: WorkItem) -> None:
        if item.future.set_running_or_notify_cancel():
            item.future.set_exception(self.broken)


_INIT_KEYS = ("initializer", "globals", "path", "wdir", "env")


class _Queue:
    """The work items of a pool, oldest first, and a way to wait for more."""

    def __init__(self) -> None:
        self.items: collections.deque[tuple[Client, WorkItem]] = collections.deque()
        self.cond = threading.Condition()

    def push(self, client: Client, item: WorkItem) -> None:
        with self.cond:
            self.items.append((client, item))
            self.cond.notify()

    def push_front(self, client: Client, item: WorkItem) -> None:
        with self.cond:
            self.items.appendleft((client, item))

    def pop(self, timeout: float | None = None) -> tuple[Client, WorkItem] | None:
        with self.cond:
            if not self.items and timeout != 0:
                self.cond.wait(timeout)
            return self.items.popleft() if self.items else None

    def cancel(self, client: Client | None = None) -> None:
        """Cancel the queued items (of ``client`` only, if given)."""
        with self.cond:
            kept: collections.deque[tuple[Client, WorkItem]] = collections.deque()
            for entry in self.items:
                if client is None or entry[0] is client:
                    future = entry[1].future
                    if future.cancel():  # and tell the waiters, as a worker would
                        future.set_running_or_notify_cancel()
                else:
                    kept.append(entry)
            self.items = kept

    def fail(self, client: Client) -> None:
        """Fail the queued items of a broken client."""
        with self.cond:
            mine = [entry for entry in self.items if entry[0] is client]
            self.items = collections.deque(entry for entry in self.items if entry[0] is not client)
        for _, item in mine:
            client.fail(item)


def _break(client: Client, exc: BaseException) -> None:
    broken = cf.BrokenExecutor(f"a worker's initializer raised {type(exc).__name__}: {exc}")
    broken.__cause__ = exc
    client.broken = broken


def run_initializer(options: dict[str, Any]) -> None:
    """Prepare a worker for an executor's tasks, as the executor's options say."""
    import sys

    for entry in options.get("path") or ():
        if entry not in sys.path:
            sys.path.append(entry)
    if options.get("wdir"):
        os.chdir(options["wdir"])
    if options.get("env"):
        os.environ.update({str(k): str(v) for k, v in dict(options["env"]).items()})
    if options.get("globals"):
        main = sys.modules["__main__"]
        for name, value in dict(options["globals"]).items():
            setattr(main, name, value)
    initializer = options.get("initializer")
    if initializer is not None:
        initializer(*options.get("initargs", ()))


class ThreadPool:
    """Worker threads of this process."""

    def __init__(self, max_workers: int, client: Client) -> None:
        self.num_workers = max_workers
        self.client = client
        self.queue = _Queue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            while len(self.threads) < self.num_workers:
                thread = threading.Thread(target=self._work, name="ipympi.mpi4py.futures worker")
                thread.daemon = True
                thread.start()
                self.threads.append(thread)

    def push(self, client: Client, item: WorkItem) -> None:
        self.queue.push(client, item)
        self.start()

    def _work(self) -> None:
        client = self.client
        try:
            run_initializer(client.options)
        except BaseException as exc:
            _break(client, exc)
        while True:
            entry = self.queue.pop()
            if entry is None:
                continue
            if entry[1] is None:  # stop
                return
            if client.broken is not None:
                client.fail(entry[1])
            else:
                entry[1].run()

    def cancel(self, client: Client) -> None:
        self.queue.cancel(client)

    def stop(self, wait: bool) -> None:
        for _ in self.threads:
            self.queue.push(self.client, None)  # type: ignore[arg-type]
        if wait:
            for thread in self.threads:
                thread.join()


class ProcessPool:
    """Processes of :class:`concurrent.futures.ProcessPoolExecutor`."""

    def __init__(self, max_workers: int, client: Client) -> None:
        self.num_workers = max_workers
        self.client = client
        self.pool: cf.ProcessPoolExecutor | None = None

    def start(self) -> None:
        if self.pool is None:
            self.pool = cf.ProcessPoolExecutor(
                self.num_workers, initializer=run_initializer, initargs=(self.client.options,)
            )

    def push(self, client: Client, item: WorkItem) -> None:
        self.start()
        assert self.pool is not None
        if not item.future.set_running_or_notify_cancel():
            return
        inner = self.pool.submit(item.fn, *item.args, **item.kwargs)
        inner.add_done_callback(lambda done: _copy_outcome(done, item.future))

    def cancel(self, client: Client) -> None:
        """Items go to the processes at once; nothing is left to cancel here."""

    def stop(self, wait: bool) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait)


def _copy_outcome(source: cf.Future, target: cf.Future) -> None:
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class MPIPool:
    """MPI worker processes: the remote group of ``comm``, served by a manager thread."""

    def __init__(
        self, comm: MPI.Intercomm, backoff: float | None = None, spawned: bool = False
    ) -> None:
        self.comm = comm
        self.spawned = spawned  # the workers were spawned for it: disconnect at the end
        self.stopped = False  # the workers were told to stop
        # Tasks go by value when the workers cannot import the master's main program (a
        # notebook's, ``python -c``'s): see _send.
        self.by_value = not _main_program()
        self.num_workers = comm.Get_remote_size()
        if backoff is None:
            backoff = float(os.environ.get("MPI4PY_FUTURES_BACKOFF", 0.001))
        self.backoff = backoff
        self.queue = _Queue()
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            if self.thread is None and not self.stopping:
                self.thread = threading.Thread(
                    target=self._manage, name="ipympi.mpi4py.futures manager"
                )
                self.thread.daemon = True
                self.thread.start()

    def push(self, client: Client, item: WorkItem) -> None:
        self.queue.push(client, item)
        self.start()

    def cancel(self, client: Client) -> None:
        self.queue.cancel(client)

    def stop(self, wait: bool) -> None:
        """Stop the workers once every queued task is done."""
        with self.lock:
            self.stopping = True
            thread = self.thread
        with self.queue.cond:
            self.queue.cond.notify_all()  # a manager waiting for work sees the stop
        if thread is None:
            self._stop_workers()
        elif wait:
            thread.join()

    def _stop_workers(self) -> None:
        if self.stopped:  # once: a pool that never ran a task is stopped by each shutdown
            return
        self.stopped = True
        for worker in range(self.num_workers):
            self.comm.send(("stop",), worker, TASK_TAG)
        if self.spawned:
            self.comm.Disconnect()

    def _manage(self) -> None:
        comm, queue = self.comm, self.queue
        idle = collections.deque(range(self.num_workers))
        busy: dict[int, tuple[str, Client, WorkItem]] = {}
        ready: set[tuple[int, int]] = set()  # (worker, client number) initialized
        status = MPI.Status()
        pause = 0.0
        while True:
            progressed = False
            while idle:
                # Nothing in flight: sleep until work comes (a push or a stop wakes it).
                entry = queue.pop(0 if busy else IDLE_WAIT)
                if entry is None:
                    break
                progressed = True
                client, item = entry
                if client.broken is not None:
                    client.fail(item)
                    continue
                worker = idle.popleft()
                if client.needs_init() and (worker, client.number) not in ready:
                    message: tuple = ("init", client.number, client.options)
                    busy[worker] = ("init", client, item)
                elif not item.future.set_running_or_notify_cancel():
                    idle.appendleft(worker)
                    continue
                else:
                    message = ("task", item.fn, item.args, item.kwargs)
                    busy[worker] = ("task", client, item)
                error = self._send(worker, message)
                if error is not None:  # the call (or the initializer) cannot be pickled
                    del busy[worker]
                    idle.appendleft(worker)
                    if message[0] == "task":
                        item.future.set_exception(error)
                    else:
                        _break(client, error)
                        client.fail(item)
                        queue.fail(client)
            found: MPI.Message | None
            if busy and not idle:  # every worker has a task: wait for the first answer
                found = comm.mprobe(MPI.ANY_SOURCE, RESULT_TAG, status)
            else:
                found = comm.improbe(MPI.ANY_SOURCE, RESULT_TAG, status)
            if found is not None:
                progressed = True
                succeeded, value = found.recv()
                worker = status.Get_source()
                kind, client, item = busy.pop(worker)
                if kind == "task":
                    _settle(item.future, succeeded, value)
                    idle.append(worker)
                elif succeeded:
                    ready.add((worker, client.number))
                    queue.push_front(client, item)  # now its task can go
                    idle.appendleft(worker)
                else:
                    _break(client, value)
                    client.fail(item)
                    queue.fail(client)
                    idle.append(worker)
            if self.stopping and not busy and not queue.items:
                self._stop_workers()
                return
            pause = 0.0 if progressed or not busy else min(self.backoff, pause + self.backoff / 16)
            if pause:
                time.sleep(pause)

    def _send(self, worker: int, message: tuple) -> Exception | None:
        """Send a message to a worker; the exception if it cannot be pickled.

        From a notebook (or any ``__main__`` the workers do not import) the message goes
        packed by value: functions and classes defined in cells, and the globals they
        read (:mod:`ipympi.mpi.byvalue`), which the workers unpack.
        """
        try:
            if self.by_value:
                message = (PACKED, byvalue.dumps(message, capture=True))
            self.comm.send(message, worker, TASK_TAG)
        except Exception as exc:
            return exc
        return None


def _settle(future: cf.Future, succeeded: bool, value: Any) -> None:
    if succeeded:
        future.set_result(value)
    else:
        future.set_exception(value)


SERVER = "ipympi.mpi4py.futures.server"


def _main_program() -> list[str]:
    """How the workers run the main program (``file ARGS``, ``-m module ARGS``, with this
    process's arguments), or [] (none: an interactive session, ``-c``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) not in (None, "__main__"):
        return ["-m", spec.name, *sys.argv[1:]]
    path = getattr(main, "__file__", None)
    if isinstance(path, str) and os.path.isfile(path):
        return [os.path.abspath(path), *sys.argv[1:]]
    return []


def _default_workers() -> int:
    universe = MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE)
    return max(1, int(universe or 1) - MPI.COMM_WORLD.Get_size())


def spawn_pool(max_workers: int | None, options: dict[str, Any]) -> MPIPool:
    """A pool of ``max_workers`` workers started with ``COMM_SELF.Spawn`` running the
    server module; the workers serve the pool until it stops them, then disconnect.

    ``path`` goes on the workers' module path and ``main`` has them import the main
    program before they unpickle any task (so its functions can be sent); ``wdir`` and
    ``env`` become the spawn's info keys.
    """
    import sys

    args = [*(options.get("python_args") or ()), "-m", SERVER]
    if options.get("path"):
        args += ["--path", os.pathsep.join(str(p) for p in options["path"])]
    if options.get("main", True):
        main = _main_program()
        if main:
            args += ["--main", *main]
    info = MPI.Info.Create()
    try:
        extra = options.get("mpi_info") or {}
        for key, value in extra.items():  # a dict or an MPI.Info
            info.Set(str(key), str(value))
        if options.get("wdir"):
            info.Set("wdir", str(options["wdir"]))
        if options.get("env"):
            lines = [f"{k}={v}" for k, v in dict(options["env"]).items()]
            info.Set("env", "\n".join(lines))
        count = int(max_workers) if max_workers else _default_workers()
        python = str(options.get("python_exe") or sys.executable)
        comm = MPI.COMM_SELF.Spawn(python, args, count, info=info)
    finally:
        info.Free()
    return MPIPool(comm, options.get("backoff"), spawned=True)
