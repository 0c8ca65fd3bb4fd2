"""Ports and names: ``Open_port``, ``Accept``/``Connect``, the name service, ``Comm.Join``.

A port name is an opaque string ``ipympi-port:<job>:<world rank>:<id>:<pid>:<session
directory>``: the job that opened it, the acceptor's world rank, a number unique on that
rank, and where a process of another job finds the acceptor (its pid and its job's
session directory). Within one job, ``Connect``'s root sends a request (its group's
world ranks and context contributions) to the acceptor's world rank; ``Accept``'s root
receives it, agrees on a context free on every member of both groups, answers, and each
root hands the result to its group with a broadcast, as ``Create_intercomm`` does
(:mod:`ipympi.mpi.intercomm`). The traffic travels on :data:`~ipympi.core.contexts.PORTS`,
a context no communicator uses, with tag ``2 * id`` for requests and ``2 * id + 1`` for
answers.

Between two separately started jobs of the same user on the same host, the request
also carries the connecting group's contacts and the block of ids it gives the other
group's processes (:mod:`ipympi.mpi.jobs`); the connector's root reaches the acceptor
through an id of its own for it until the answer, with the acceptor group's contacts,
comes back. Both groups then reach each other's processes by those ids, through their
data sockets. A singleton (``python prog.py``) that opens a port or connects becomes a
job first, as for ``Spawn`` (:mod:`ipympi.mpi.singleton`). Only jobs on one host
connect: a job placed on several hosts gets ``ERR_PORT``.

An open port of a launched job is also a file in the job's private session directory
(on the acceptor's host), so that ``Connect`` to a closed port, or to a port of a job
that has ended, raises ``ERR_PORT`` instead of waiting; ``Close_port`` refuses the
requests already waiting on the port. A ``Connect`` to a port of a rank on another
host cannot see that file: if the port is closed before the request arrives, the
``Connect`` waits (as for a port never accepted).

Names (``Publish_name``...) are files in a per-user directory of the temp folder (mode
0700, each file 0600), so that a job can look up a name another job of the same user
published. Each records its publisher's host and process id: ``Finalize`` withdraws the
names a process left published, and the name of a process that ended without
``Finalize`` counts as unpublished.

``Comm.Join(fd)``: both ends send their job, world rank, context contribution, contact
and the id they give the other end over the socket, and build the intercommunicator
from what they read.
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
from ..progress.engine import EAGER_LIMIT
from ..progress.shm import process_alive
from . import commbuild as cb
from . import finalize_hooks, jobs
from .args import c_int
from .commimpl import CommImpl, comm_class
from .errhandling import ERRORS_RETURN, mpi_call, world_call
from .info import INFO_NULL
from .intercomm import _bcast_object
from .process import PROCESS
from .singleton import become_job
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


def _fields(port: Any, call: str) -> list[str]:
    if not isinstance(port, str):
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port name")
    fields = port.split(":", 5)
    numbers = fields[2:5] if len(fields) == 6 else fields[2:]
    if len(fields) not in (4, 6) or fields[0] != _PREFIX or not all(map(str.isdigit, numbers)):
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port name of ipympi")
    return fields


def _parse(port: Any, call: str) -> tuple[str, int, int]:
    """``(job, world rank, id)`` of ``port``, or ``ERR_PORT``."""
    fields = _fields(port, call)
    return fields[1], int(fields[2]), int(fields[3])


def _acceptor(port: str, call: str) -> jobs.Contact:
    """The contact of the process that opened ``port`` (a port of another job)."""
    fields = _fields(port, call)
    if len(fields) != 6:
        raise MPIException(ERR_PORT, f"{call}: {port!r} cannot be reached from another job")
    return fields[5], int(fields[2]), int(fields[4])


@world_call
def Open_port(info: Any = INFO_NULL) -> str:
    """Open a port for ``Accept`` and return its name."""
    cb.hints_of(info, "Open_port")
    engine = PROCESS.live_engine("Open_port")
    become_job("Open_port")  # a data socket that other jobs can reach
    port = f"{_PREFIX}:{_job()}:{engine.rank}:{next(_ids)}"
    reach = _contact(engine)
    if reach is not None:  # where other jobs find this process
        port += f":{engine.pid}:{reach[0]}"
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
        request = link.recv(None, status.source, 2 * ident)
        refusal = ("error", ERR_PORT, f"port {port_name!r} was closed before accepting")
        _answer(link, request, refusal, ident)


# -- Accept and Connect ------------------------------------------------------------------

_FROM_JOB = "job"  # a Connect request from another job, as the first item of its tuple
# What a process of another job is known as before the connection is made: any foreign id.
_UNKNOWN = (1 << 31) - 1
Member = tuple[Any, set[int], "jobs.Contact | None"]  # (context part, id blocks, contact)


def _contact(engine: Any) -> jobs.Contact | None:
    """This process's contact, or None where other jobs cannot reach it."""
    try:
        return jobs.contact(engine, "Open_port")
    except MPIException:
        return None


def _wire(engine: Any, call: str) -> Any:
    """A communicator on the ports' context, addressed by world rank."""
    impl = CommImpl(engine, ctx.PORTS, list(range(engine.size)), engine.rank, call, ERRORS_RETURN)
    return comm_class("Intracomm")._from_impl(impl, call)


def _pair(engine: Any, ranks: list[int], call: str) -> Any:
    """A communicator on the ports' context over ``ranks`` (this process among them)."""
    me = ranks.index(engine.rank)
    impl = CommImpl(engine, ctx.PORTS, ranks, me, call, ERRORS_RETURN)
    return comm_class("Intracomm")._from_impl(impl, call)


def _answer(link: Any, request: Any, answer: Any, ident: int) -> None:
    """Send ``answer`` to the root that sent the Connect ``request``."""
    if request[0] != _FROM_JOB:
        link.send(answer, request[2], 2 * ident + 1)
        return
    contacts, root = request[1], request[4]
    engine = link._impl.engine
    asker = jobs.foreign_ids(_free(engine, "Accept"), len(contacts), "Accept")[root]
    # the asker's id is in a block no connection uses: made for this answer, then let go
    jobs.connect_group(engine, [asker], [contacts[root]], _UNKNOWN)
    try:
        _pair(engine, [asker, engine.rank], "Accept").send(answer, 0, 2 * ident + 1)
    finally:
        jobs.release(engine, [asker])
        engine.transport.drop_foreign(asker)


def _fits(message: Any, call: str) -> None:
    """The handshake with another job travels in one frame each way: ``ERR_OTHER`` for a
    group too large for that (some thousands of processes), instead of waiting forever."""
    if len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)) > EAGER_LIMIT - 1024:
        raise MPIException(ERR_OTHER, f"{call}: the group is too large to connect to another job")


def _free(engine: Any, call: str) -> int:
    return jobs.free_block([jobs.blocks_in_use(engine)], call)


def _accept_root(impl: CommImpl, members: list[Member], port: Any) -> Any:
    call = "Accept"
    if port not in _open:
        _parse(port, call)
        raise MPIException(ERR_PORT, f"{call}: {port!r} is not a port this process has open")
    _, _, ident = _parse(port, call)
    link = _wire(impl.engine, call)
    request = link.recv(None, K.ANY_SOURCE, 2 * ident)
    if request[0] == _FROM_JOB:
        return _accept_job(impl, members, request, link, ident)
    remote_ranks, remote_parts, source = request
    overlap = sorted(set(remote_ranks) & set(impl.world_ranks))
    if overlap:
        answer: Any = ("error", ERR_PORT, f"the groups overlap (world ranks {overlap})")
    else:
        try:
            context, base = cb.agree([m[0] for m in members] + remote_parts, call)
            answer = ("ok", list(impl.world_ranks), context, base)
        except MPIException as exc:
            answer = ("error", exc.Get_error_class(), exc._message or str(exc))
    link.send(answer, source, 2 * ident + 1)
    if answer[0] == "error":
        raise MPIException(answer[1], f"{call}: {answer[2]}")
    return list(remote_ranks), answer[2], answer[3]


def _accept_job(impl: CommImpl, members: list[Member], request: Any, link: Any, ident: int) -> Any:
    """The acceptor's root, asked by another job: agree, answer, and connect to it."""
    call = "Accept"
    _, contacts, parts, block, root = request
    try:
        if any(m[2] is None for m in members):
            raise MPIException(ERR_PORT, "this group cannot be reached from another job")
        context, base = cb.agree([m[0] for m in members] + parts, call)
        mine = jobs.free_block([m[1] for m in members], call)  # ids of the other job here
        ids = jobs.foreign_ids(mine, len(contacts), call)
    except MPIException as exc:
        _answer(link, request, ("error", exc.Get_error_class(), exc._message or str(exc)), ident)
        raise MPIException(exc.Get_error_class(), f"{call}: {exc._message or exc}") from None
    answer = ("ok", [m[2] for m in members], context, base, mine)
    try:
        _fits(answer, call)
    except MPIException as exc:
        _answer(link, request, ("error", exc.Get_error_class(), exc._message or str(exc)), ident)
        raise
    known = jobs.foreign_ids(block, len(members), call)[impl.rank]
    jobs.connect_group(impl.engine, ids, contacts, known, local_first=True)
    _pair(impl.engine, [ids[root], impl.engine.rank], call).send(answer, 0, 2 * ident + 1)
    return (contacts, mine, block, True), context, base


def _connect_root(impl: CommImpl, members: list[Member], port: Any) -> Any:
    call = "Connect"
    job, acceptor, ident = _parse(port, call)
    engine = impl.engine
    if job != _job():
        return _connect_job(impl, members, port)
    # the acceptor's session directory is this one unless it runs on another host
    remote = engine.transport is not None and acceptor in engine.transport.remote
    path = None if remote else _port_file(port)
    if acceptor >= engine.size or (path is not None and not os.path.exists(path)):
        raise MPIException(ERR_PORT, f"{call}: port {port!r} is not open")
    if path is None and acceptor == engine.rank and port not in _open:
        raise MPIException(ERR_PORT, f"{call}: port {port!r} is not open")
    link = _wire(engine, call)
    me = impl.world_ranks[impl.rank]
    link.send((list(impl.world_ranks), [m[0] for m in members], me), acceptor, 2 * ident)
    answer = link.recv(None, acceptor, 2 * ident + 1)
    if answer[0] == "error":
        raise MPIException(answer[1], f"{call}: {answer[2]}")
    return answer[1], answer[2], answer[3]


def _connect_job(impl: CommImpl, members: list[Member], port: str) -> Any:
    """The connector's root, to a port of another job: ask its acceptor, through an id
    of its own for the acceptor until the answer says how to reach its whole group."""
    call = "Connect"
    engine = impl.engine
    folder, rank, pid = _acceptor(port, call)
    _, _, ident = _parse(port, call)
    if not os.path.exists(os.path.join(folder, f"port-{rank}-{ident}")):
        raise MPIException(ERR_PORT, f"{call}: port {port!r} is not open (or its job has ended)")
    if any(m[2] is None for m in members):
        raise MPIException(ERR_PORT, f"{call}: this group cannot be reached from another job")
    mine = jobs.free_block([m[1] for m in members], call)  # ids of the other job here
    contacts = [m[2] for m in members]
    request = (_FROM_JOB, contacts, [m[0] for m in members], mine, impl.rank)
    _fits(request, call)
    spare = jobs.free_block([{mine}, jobs.blocks_in_use(engine)], call)
    (asked,) = jobs.foreign_ids(spare, 1, call)  # the acceptor, until the answer comes
    jobs.connect_group(engine, [asked], [(folder, rank, pid)], _UNKNOWN)
    try:
        link = _pair(engine, [engine.rank, asked], call)
        link.send(request, 1, 2 * ident)
        try:
            answer = link.recv(None, 1, 2 * ident + 1)
        except MPIException as exc:
            raise MPIException(ERR_PORT, f"{call}: no answer from {port!r}: {exc}") from None
    finally:
        jobs.release(engine, [asked])
        engine.transport.drop_foreign(asked)
    if answer[0] == "error":
        raise MPIException(answer[1], f"{call}: {answer[2]}")
    _, others, context, base, theirs = answer
    return (others, mine, theirs, False), context, base


def _establish(comm: Any, call: str, port: Any, info: Any, root: Any, at_root: Any) -> Any:
    """Accept or Connect on the intracommunicator ``comm``: collective over its group."""
    impl = comm._live()
    cb.hints_of(info, call)
    root = c_int(root)
    if not 0 <= root < impl.size:
        raise MPIException(ERR_ARG, f"{call}: root {root} is not a rank (size {impl.size})")
    engine = impl.engine
    become_job(call)  # a singleton: a data socket that another job can reach
    me: Member = (ctx.contribution(engine), jobs.blocks_in_use(engine), _contact(engine))
    engine.connecting += 1  # what this waits for may come from another job: not stuck
    try:
        members = cb.allgather(comm, call, me)
        result: Any = None
        if impl.rank == root:
            try:
                result = at_root(impl, members, port)
            except MPIException as exc:
                result = (exc.Get_error_class(), exc._message or str(exc))
        result = _bcast_object(comm, call, result, root)
    finally:
        engine.connecting -= 1
    if len(result) == 2:
        raise MPIException(result[0], result[1])
    remote, context, base = result
    if isinstance(remote, tuple):  # the other group is another job's
        contacts, here, there, first = remote  # first: the acceptor's group comes first
        remote = jobs.foreign_ids(here, len(contacts), call)
        known = jobs.foreign_ids(there, impl.size, call)[impl.rank]
        jobs.connect_group(engine, remote, contacts, known, local_first=first)
    new = cb.new_inter_impl(impl, context, base, impl.world_ranks, remote)
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
    become_job(call)  # a data socket that a process of another job can reach
    me = engine.rank
    here = _free(engine, call)  # the block of this side's id for the other end
    mine = (_job(), me, ctx.contribution(engine), _contact(engine), here)
    try:
        theirs = pickle.loads(_exchange(fd, pickle.dumps(mine)))
    except OSError as exc:
        raise MPIException(ERR_ARG, f"{call}: cannot use socket {fd}: {exc}") from exc
    job, other, part, reach, there = theirs
    if job == mine[0] and other == me:
        raise MPIException(ERR_OTHER, f"{call}: both ends of the socket are this process")
    context, base = cb.agree([mine[2], part], call)
    world = PROCESS.world
    if world is None:
        raise MPIException(ERR_OTHER, f"{call}: MPI is not initialized")
    if job != mine[0]:  # the other end is a process of another job
        if reach is None or mine[3] is None:
            raise MPIException(ERR_OTHER, f"{call}: the other end's job cannot be reached")
        (other,) = jobs.foreign_ids(here, 1, call)
        known = jobs.foreign_ids(there, 1, call)[0]
        jobs.connect_group(engine, [other], [reach], known, local_first=mine[0] < job)
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
    if host == socket.gethostname() and not process_alive(int(pid)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    return port


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
