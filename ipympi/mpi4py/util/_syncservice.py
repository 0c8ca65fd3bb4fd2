"""The service behind :mod:`ipympi.mpi4py.util.sync`'s shared objects.

mpi4py keeps a counter, a mutex's queue and a condition's waiters in memory windows
that every process updates with one-sided atomic operations, which progress without
the owner's help. ipympi has no one-sided communication, and its MPI calls cannot serve
requests on behalf of a process busy in another call (a ``Barrier``, say), so the
process that holds an object (its *root*) keeps the object's state in a small service:
one thread per process, listening on a socket, which applies the requests of every
process in turn (each is therefore atomic) and answers them.

Creating an object is collective: the root registers the state with its service, and
the service's address and key travel to the others with ``bcast``. Each process then
talks to the service over a connection of its own for that object, opened on first use
and authenticated with the key; requests and answers are pickled, prefixed by their
length. The service listens on the loopback interface when all the processes of the
communicator run on the root's host, else on every interface.

Every service stops when MPI is finalized (through a ``COMM_SELF`` attribute, whose
delete callback runs first in ``MPI.Finalize``).
"""

from __future__ import annotations

import collections
import itertools
import pickle
import secrets
import selectors
import socket
import struct
import threading
from typing import Any, Callable, Optional

from ... import MPI

__all__ = ["Client", "CondState", "CounterState", "MutexState", "create"]

_LENGTH = struct.Struct("!I")
Replies = list[tuple[Any, Any]]  # (connection, answer) pairs to send


def _send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive(sock: socket.socket) -> Any:
    (length,) = _LENGTH.unpack(_exactly(sock, _LENGTH.size))
    return pickle.loads(_exactly(sock, length))


def _exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionError("sync service connection closed")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


# -- the states -------------------------------------------------------------------------------


class CounterState:
    """A counter's value, kept as a one-element numpy array of the counter's type, so
    that additions wrap around (or round) as the C type does."""

    def __init__(self, start: Any, typecode: str) -> None:
        import numpy

        self.value = numpy.array([start], dtype=typecode)

    def handle(self, client: Any, op: str, args: tuple) -> Replies:
        """``next(incr)``: answer the value, then add ``incr``."""
        old = self.value[0].item()
        self.value += args[0]
        return [(client, old)]


class MutexState:
    """Who holds a mutex and who waits for it, first come first served."""

    def __init__(self) -> None:
        self.holder: Any = None
        self.waiting: collections.deque[Any] = collections.deque()

    def handle(self, client: Any, op: str, args: tuple) -> Replies:
        if op == "lock":  # answered when granted
            if self.holder is None:
                self.holder = client
                return [(client, True)]
            self.waiting.append(client)
            return []
        if op == "trylock":
            granted = self.holder is None
            if granted:
                self.holder = client
            return [(client, granted)]
        # "unlock": hand the mutex to the next in line
        self.holder = self.waiting.popleft() if self.waiting else None
        replies: Replies = [(client, None)]
        if self.holder is not None:
            replies.append((self.holder, True))
        return replies


class CondState:
    """The processes waiting on a condition variable, in the order they came."""

    def __init__(self) -> None:
        self.waiting: collections.deque[Any] = collections.deque()

    def handle(self, client: Any, op: str, args: tuple) -> Replies:
        if op == "wait":  # answered once registered; the wake-up is a second answer
            self.waiting.append(client)
            return [(client, None)]
        # "notify": wake up to args[0] waiters (None: all), answer how many
        count = len(self.waiting) if args[0] is None else min(args[0], len(self.waiting))
        woken = [self.waiting.popleft() for _ in range(count)]
        return [(waiter, None) for waiter in woken] + [(client, count)]


# -- the service ------------------------------------------------------------------------------


class _Service:
    """This process's service: a listening socket and a thread answering requests."""

    def __init__(self, host: str) -> None:
        self.key = secrets.token_bytes(16)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.numbers = itertools.count(1)
        self.states: dict[int, tuple[Any, int]] = {}  # number -> (state, processes left)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.waker_r, self.waker_w = socket.socketpair()
        self.selector.register(self.waker_r, selectors.EVENT_READ)
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._serve, name="ipympi sync service", daemon=True)
        self.thread.start()

    def register(self, state: Any, processes: int) -> int:
        with self.lock:
            number = next(self.numbers)
            self.states[number] = (state, processes)
        return number

    def _serve(self) -> None:
        while self.running:
            for key, _ in self.selector.select():
                sock = key.fileobj
                if sock is self.listener:
                    conn, _ = self.listener.accept()
                    self.selector.register(conn, selectors.EVENT_READ, data=[None])
                elif sock is not self.waker_r:
                    self._request(sock, key.data)  # type: ignore[arg-type]

    def _request(self, conn: socket.socket, bound: list[Optional[int]]) -> None:
        """One request on ``conn``; ``bound`` holds the object number once greeted."""
        try:
            message = _receive(conn)
        except (ConnectionError, OSError):
            self._drop(conn)
            return
        if bound[0] is None:  # the greeting: key and object number
            key, number = message
            if key != self.key or number not in self.states:
                self._drop(conn)
                return
            bound[0] = number
            return
        number = bound[0]
        op, args = message
        with self.lock:
            state, left = self.states[number]
            if op == "free":
                replies: Replies = [(conn, None)]
                if left == 1:
                    del self.states[number]
                else:
                    self.states[number] = (state, left - 1)
            else:
                replies = state.handle(conn, op, args)
        for target, answer in replies:
            try:
                _send(target, answer)
            except OSError:
                self._drop(target)

    def _drop(self, conn: socket.socket) -> None:
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def stop(self) -> None:
        self.running = False
        self.waker_w.send(b"\0")
        self.thread.join()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self.selector.close()
        self.waker_w.close()


_services: dict[str, _Service] = {}
_services_lock = threading.Lock()
_finalize_keyval: list[int] = []


def _service(host: str) -> _Service:
    with _services_lock:
        service = _services.get(host)
        if service is None:
            service = _services[host] = _Service(host)
            if not _finalize_keyval:
                _finalize_keyval.append(MPI.Comm.Create_keyval(delete_fn=_stop_all))
                MPI.COMM_SELF.Set_attr(_finalize_keyval[0], None)
    return service


def _stop_all(comm: MPI.Comm, keyval: int, value: Any) -> None:
    """MPI is being finalized: end this process's services."""
    with _services_lock:
        services = list(_services.values())
        _services.clear()
    for service in services:
        service.stop()


# -- the clients ------------------------------------------------------------------------------


class Client:
    """This process's end of one shared object: a connection to the root's service."""

    def __init__(self, address: tuple[str, int], key: bytes, number: int) -> None:
        self.address = address
        self.key = key
        self.number = number
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()

    def _connection(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.address)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _send(self.sock, (self.key, self.number))
        return self.sock

    def call(self, op: str, *args: Any) -> Any:
        """Send a request and return the answer."""
        with self.lock:
            sock = self._connection()
            _send(sock, (op, args))
            return _receive(sock)

    def receive(self) -> Any:
        """The next answer (a condition's wake-up, say)."""
        with self.lock:
            return _receive(self._connection())

    def free(self) -> None:
        """This process is done with the object (its state goes once all are).

        A root that has already finalized MPI took the state with it: nothing to do.
        """
        try:
            self.call("free")
        except ConnectionError:
            pass
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


def create(comm: MPI.Intracomm, root: int, make: Callable[[], Any]) -> Client:
    """Collectively create an object whose state ``make()`` builds on ``root``."""
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"expecting an intracommunicator, not {comm!r}")
    names = comm.allgather(MPI.Get_processor_name())
    local = all(name == names[root] for name in names)
    found = None
    if comm.Get_rank() == root:
        service = _service("127.0.0.1" if local else "0.0.0.0")
        number = service.register(make(), comm.Get_size())
        host = "127.0.0.1" if local else socket.gethostname()
        found = ((host, service.port), service.key, number)
    address, key, number = comm.bcast(found, root)
    return Client(address, key, number)
