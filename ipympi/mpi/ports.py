"""Ports and names: ``Open_port``, ``Accept``/``Connect``, the name service, ``Comm.Join``.

A port name is an opaque string ``ipympi-port:<job>:<world rank>:<id>``: the job that
opened it, the acceptor's world rank and a number unique on that rank. ``Connect``'s
root sends a request (its group's world ranks and context contributions) to the
acceptor's world rank; ``Accept``'s root receives it, agrees on a context free on every
member of both groups, answers, and each root hands the result to its group with a
broadcast, as ``Create_intercomm`` does (:mod:`ipympi.mpi.intercomm`). The traffic
travels on :data:`~ipympi.core.contexts.PORTS`, a context no communicator uses, with
tag ``2 * id`` for requests and ``2 * id + 1`` for answers.

An open port of a launched job is also a file in the job's private session directory
(on the acceptor's host), so that ``Connect`` to a closed port raises ``ERR_PORT``
instead of waiting; ``Close_port`` refuses the requests already waiting on the port. A
``Connect`` to a port of a rank on another host cannot see that file: if the port is
closed before the request arrives, the ``Connect`` waits (as for a port never accepted).
The ranks of two separately started jobs cannot reach each other's transports:
``Connect`` to a port of another job raises ``ERR_PORT`` saying so.

Names (``Publish_name``...) are files in a per-user directory of the temp folder (mode
0700), so that a job can look up a name another job of the same user published. Each
records its publisher's host and process id: ``Finalize`` withdraws the names a process
left published, and the name of a process that ended without ``Finalize`` counts as
unpublished.

``Comm.Join(fd)``: both ends send their job and world rank and their context
contribution over the socket, and build the intercommunicator from what they read.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import pickle
import socket
import struct
import tempfile
from typing import Any

from ..core import constants as K
from ..core import contexts as ctx
from ..core.errors import ERR_ARG, ERR_NAME, ERR_OTHER, ERR_PORT, ERR_SERVICE
from ..core.errors import Exception as MPIException
from . import commbuild as cb
from . import finalize_hooks
from .args import c_int
from .commimpl import CommImpl, comm_class
from .errhandling import ERRORS_RETURN, mpi_call, world_call
from .info import INFO_NULL
from .intercomm import _bcast_object
from .process import PROCESS
from .status import Status

__all__ = [
    "Close_port",
    "Lookup_name",
    "Open_port",
    "Publish_name",
    "Unpublish_name",
]

_PREFIX = "ipympi-port"
_ids = itertools.count()
_open: set[str] = set()  # ports this process opened and has not closed


def _job() -> str:
    """This job's identity, the same on all its ranks (on every host): a digest of the
    job's secret key, or the process of a singleton."""
    transport = PROCESS.live_engine("Open_port").transport
    if transport is not None and transport.key:
        return hashlib.sha256(b"ipympi-port\0" + transport.key).hexdigest()[:16]
    if transport is not None:
        return os.path.basename(transport.session_dir.rstrip("/"))
    return f"single-{socket.gethostname()}-{os.getpid()}"


def _port_file(port: str) -> str | None:
    """The file marking ``port`` open, in the job's session directory (launched jobs)."""
    PROCESS.live_engine("Open_port")
    folder = PROCESS.job_dir()
    if folder is None:
        return None
    _, rank, ident = _parse(port, "Open_port")
    return os.path.join(folder, f"port-{rank}-{ident}")


def _parse(port: Any, call: str) -> tuple[str, int, int]:
    """``(job, world rank, id)`` of ``port``, or ``ERR_PORT``."""
    if not isinstance(port, str):
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port name")
    fields = port.split(":")
    if len(fields) != 4 or fields[0] != _PREFIX or not fields[2].isdigit():
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port name of ipympi")
    if not fields[3].isdigit():
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port name of ipympi")
    return fields[1], int(fields[2]), int(fields[3])


@world_call
def Open_port(info: Any = INFO_NULL) -> str:
    """Open a port for ``Accept`` and return its name."""
    cb.hints_of(info, "Open_port")
    engine = PROCESS.live_engine("Open_port")
    port = f"{_PREFIX}:{_job()}:{engine.rank}:{next(_ids)}"
    path = _port_file(port)
    if path is not None:
        with open(path, "x", encoding="utf-8"):
            pass
    _open.add(port)
    return port


@world_call
def Close_port(port_name: str) -> None:
    """Close a port this process opened."""
    PROCESS.live_engine("Close_port")
    if port_name not in _open:
        _parse(port_name, "Close_port")
        raise MPIException(
            ERR_PORT, f"Close_port: {port_name!r} is not a port this process has open"
        )
    _open.discard(port_name)
    path = _port_file(port_name)
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    # Connect requests already waiting on the port are refused, not left waiting.
    ident = _parse(port_name, "Close_port")[2]
    link = _wire(PROCESS.live_engine("Close_port"), "Close_port")
    status = Status()
    while link.iprobe(K.ANY_SOURCE, 2 * ident, status):
        link.recv(None, status.source, 2 * ident)
        refusal = ("error", ERR_PORT, f"port {port_name!r} was closed before accepting")
        link.send(refusal, status.source, 2 * ident + 1)


# -- Accept and Connect ------------------------------------------------------------------


def _wire(engine: Any, call: str) -> Any:
    """A communicator on the ports' context, addressed by world rank."""
    impl = CommImpl(engine, ctx.PORTS, list(range(engine.size)), engine.rank, call, ERRORS_RETURN)
    return comm_class("Intracomm")._from_impl(impl, call)


def _accept_root(impl: CommImpl, parts: list[Any], port: Any) -> Any:
    call = "Accept"
    if port not in _open:
        _parse(port, call)
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port this process has open")
    _, _, ident = _parse(port, call)
    link = _wire(impl.engine, call)
    remote_ranks, remote_parts, source = link.recv(None, K.ANY_SOURCE, 2 * ident)
    overlap = sorted(set(remote_ranks) & set(impl.world_ranks))
    if overlap:
        answer: Any = ("error", ERR_PORT, f"the groups overlap (world ranks {overlap})")
    else:
        try:
            context, base = cb.agree(parts + remote_parts, call)
            answer = ("ok", list(impl.world_ranks), context, base)
        except MPIException as exc:
            answer = ("error", exc.Get_error_class(), exc._message or str(exc))
    link.send(answer, source, 2 * ident + 1)
    if answer[0] == "error":
        raise MPIException(answer[1], f"{call}: {answer[2]}")
    return list(remote_ranks), answer[2], answer[3]


def _connect_root(impl: CommImpl, parts: list[Any], port: Any) -> Any:
    call = "Connect"
    job, acceptor, ident = _parse(port, call)
    engine = impl.engine
    if job != _job():
        raise MPIException(
            ERR_PORT,
            f"{call}: {port!r} is a port of another job; ipympi connects only ranks of one job",
        )
    # the acceptor's session directory is this one unless it runs on another host
    remote = engine.transport is not None and acceptor in engine.transport.remote
    path = None if remote else _port_file(port)
    if acceptor >= engine.size or (path is not None and not os.path.exists(path)):
        raise MPIException(ERR_PORT, f"{call}: port {port!r} is not open")
    if path is None and acceptor == engine.rank and port not in _open:
        raise MPIException(ERR_PORT, f"{call}: port {port!r} is not open")
    link = _wire(engine, call)
    me = impl.world_ranks[impl.rank]
    link.send((list(impl.world_ranks), parts, me), acceptor, 2 * ident)
    answer = link.recv(None, acceptor, 2 * ident + 1)
    if answer[0] == "error":
        raise MPIException(answer[1], f"{call}: {answer[2]}")
    return answer[1], answer[2], answer[3]


def _establish(comm: Any, call: str, port: Any, info: Any, root: Any, at_root: Any) -> Any:
    """Accept or Connect on the intracommunicator ``comm``: collective over its group."""
    impl = comm._live()
    cb.hints_of(info, call)
    root = c_int(root)
    if not 0 <= root < impl.size:
        raise MPIException(ERR_ARG, f"{call}: root {root} is not a rank (size {impl.size})")
    engine = impl.engine
    parts = cb.allgather(comm, call, ctx.contribution(engine))
    result: Any = None
    if impl.rank == root:
        try:
            result = at_root(impl, parts, port)
        except MPIException as exc:
            result = (exc.Get_error_class(), exc._message or str(exc))
    result = _bcast_object(comm, call, result, root)
    if len(result) == 2:
        raise MPIException(result[0], result[1])
    remote_ranks, context, base = result
    new = cb.new_inter_impl(impl, context, base, impl.world_ranks, remote_ranks)
    return comm_class("Intercomm")._from_impl(new)


class PortMethods:
    """``Intracomm.Accept`` and ``Intracomm.Connect``."""

    __slots__ = ()

    @mpi_call
    def Accept(self, port_name: str, info: Any = INFO_NULL, root: int = 0) -> Any:
        """Accept a connection on ``port_name`` (significant at ``root``): collective."""
        return _establish(self, "Accept", port_name, info, root, _accept_root)

    @mpi_call
    def Connect(self, port_name: str, info: Any = INFO_NULL, root: int = 0) -> Any:
        """Connect to the port ``port_name`` (significant at ``root``): collective."""
        return _establish(self, "Connect", port_name, info, root, _connect_root)


# -- Comm.Join -----------------------------------------------------------------------------

_LEN = struct.Struct("!I")


def _exchange(fd: int, data: bytes) -> bytes:
    """Send ``data`` on the socket ``fd`` and read the other end's."""
    blocking = os.get_blocking(fd)  # the caller's socket shares the flag: restored below
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.setblocking(True)
        sock.sendall(_LEN.pack(len(data)) + data)
        head = _recv_exact(sock, _LEN.size)
        return _recv_exact(sock, _LEN.unpack(head)[0])
    finally:
        sock.close()
        os.set_blocking(fd, blocking)


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise MPIException(ERR_OTHER, "Join: the other end closed the socket")
        chunks += chunk
    return bytes(chunks)


def _join(fd: Any) -> Any:
    call = "Join"
    engine = PROCESS.live_engine(call)
    if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
        raise MPIException(ERR_ARG, f"{call}: {fd!r} is not a file descriptor")
    me = engine.rank
    mine = (_job(), me, ctx.contribution(engine))
    try:
        theirs = pickle.loads(_exchange(fd, pickle.dumps(mine)))
    except OSError as exc:
        raise MPIException(ERR_ARG, f"{call}: cannot use socket {fd}: {exc}") from exc
    job, other, part = theirs
    if job != mine[0]:
        raise MPIException(
            ERR_OTHER,
            f"{call}: the other end belongs to another job; ipympi joins ranks of one job",
        )
    if other == me:
        raise MPIException(ERR_OTHER, f"{call}: both ends of the socket are this process")
    context, base = cb.agree([mine[2], part], call)
    world = PROCESS.world
    if world is None:
        raise MPIException(ERR_OTHER, f"{call}: MPI is not initialized")
    new = cb.new_impl(world._live(), context, [me])
    new.remote_world_ranks = [other]
    ctx.install(engine, context, base)
    return comm_class("Intercomm")._from_impl(new)


class JoinMethod:
    """``Comm.Join``."""

    __slots__ = ()

    @classmethod
    def Join(cls, fd: int) -> Any:
        """An intercommunicator with the process at the other end of the socket ``fd``."""
        return world_call(_join)(fd)


# -- names ---------------------------------------------------------------------------------


def _names_dir() -> str:
    """The per-user directory of published names (created with mode 0700)."""
    path = os.path.join(tempfile.gettempdir(), f"ipympi-names-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise MPIException(ERR_OTHER, f"the name service directory {path} is not yours")
    return path


def _name_file(service: Any, call: str) -> str:
    if not isinstance(service, str) or not service:
        raise MPIException(ERR_ARG, f"{call}: {service!r} is not a service name")
    return os.path.join(_names_dir(), service.encode().hex())


def _read_name(path: str) -> str | None:
    """The port published in ``path``; ``None`` if there is none or its publisher has
    ended without unpublishing it (the stale entry is removed)."""
    try:
        with open(path, encoding="utf-8") as src:
            host, pid, port = src.read().split("\n", 2)
    except (FileNotFoundError, ValueError):
        return None
    if host == socket.gethostname() and not _alive(int(pid)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    return port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_published: dict[str, str] = {}  # service -> port, published by this process


@world_call
def Publish_name(service_name: str, port_name: str, info: Any = INFO_NULL) -> None:
    """Publish ``port_name`` under ``service_name`` for ``Lookup_name``."""
    cb.hints_of(info, "Publish_name")
    path = _name_file(service_name, "Publish_name")
    _parse(port_name, "Publish_name")
    _read_name(path)  # drops a stale entry
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise MPIException(
            ERR_SERVICE, f"Publish_name: {service_name!r} is published already"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"{socket.gethostname()}\n{os.getpid()}\n{port_name}")
    _published[service_name] = port_name


@world_call
def Unpublish_name(service_name: str, port_name: str, info: Any = INFO_NULL) -> None:
    """Withdraw a name ``Publish_name`` published."""
    cb.hints_of(info, "Unpublish_name")
    path = _name_file(service_name, "Unpublish_name")
    if _read_name(path) != port_name:
        raise MPIException(
            ERR_SERVICE,
            f"Unpublish_name: {service_name!r} is not published with port {port_name!r}",
        )
    os.unlink(path)
    _published.pop(service_name, None)


@world_call
def Lookup_name(service_name: str, info: Any = INFO_NULL) -> str:
    """The port name published under ``service_name``."""
    cb.hints_of(info, "Lookup_name")
    port = _read_name(_name_file(service_name, "Lookup_name"))
    if port is None:
        raise MPIException(ERR_NAME, f"Lookup_name: {service_name!r} is not published")
    return port


def _unpublish_all() -> None:
    """At ``Finalize``: withdraw the names this process published and left published."""
    for service, port in list(_published.items()):
        del _published[service]
        path = _name_file(service, "Finalize")
        if _read_name(path) == port:
            os.unlink(path)


finalize_hooks.register(_unpublish_all)
