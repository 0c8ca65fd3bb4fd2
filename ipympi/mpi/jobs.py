"""Processes of other jobs: how two separately started jobs of one user on one host
reach each other once ``Accept``/``Connect`` or ``Comm.Join`` connects them.

Every process of a job has a data socket in its job's private session directory
(mode 0700, so only the user's own processes can reach it). A process of another job
is given a *foreign id*: ``FOREIGN_BASE + block * BLOCK + index``, for the process at
``index`` of the remote group, in a block of ids that no other connection of any member
of the local group uses (the members agree on it, as they agree on a context). The
transport maps the id to the other process's data socket and sends it frames under the
id that the other side gave this process (:meth:`Transport.add_foreign
<ipympi.progress.transport.Transport.add_foreign>`), so that everything above the
transport addresses the other job's processes as it addresses its own.

A process's *contact* is ``(session directory, world rank, pid)``: what another job
needs to reach it and to watch it. The pids of connected processes are watched (a pidfd
each, in one thread): when one ends (its job ended, or it died), whatever waits on it
fails with its reason, as for a rank of the job that dies, instead of waiting forever.
``Disconnect`` stops watching the processes of the communicator it ends (before its
closing barrier, which the other side may leave and end first) and closes the sockets
to them.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.errors import ERR_OTHER
from ..core.errors import Exception as MPIException
from ..core.wire import FOREIGN_BASE
from ..progress.transport import endpoint

__all__ = [
    "BLOCK",
    "Contact",
    "blocks_in_use",
    "connect_group",
    "contact",
    "foreign_ids",
    "free_block",
    "is_foreign",
    "local_first",
    "release",
]

_FIRST: dict[int, bool] = {}  # foreign id -> whether this side comes first (local_first)
BLOCK = 1 << 12  # ids per connected group: the largest group another job may connect
_LAST_BLOCK = ((1 << 31) - 1 - FOREIGN_BASE) // BLOCK - 1
Contact = tuple[str, int, int]  # (session directory, world rank, pid)


def contact(engine: Any, call: str) -> Contact:
    """This process's contact (its job's session directory, world rank, pid)."""
    transport = engine.transport
    if transport is None:
        raise MPIException(ERR_OTHER, f"{call}: this process has no data socket")
    if transport.remote:
        raise MPIException(
            ERR_OTHER,
            f"{call}: a job placed on several hosts cannot connect to another job",
        )
    return (transport.session_dir, engine.rank, engine.pid)


def is_foreign(wrank: int) -> bool:
    return wrank >= FOREIGN_BASE


def blocks_in_use(engine: Any) -> set[int]:
    """The blocks of foreign ids this process gave processes of other jobs."""
    transport = engine.transport
    if transport is None:
        return set()
    return {(wrank - FOREIGN_BASE) // BLOCK for wrank in transport.foreign}


def free_block(used: Iterable[Iterable[int]], call: str) -> int:
    """The first block no member uses (``used``: each member's blocks)."""
    taken = set().union(*used)
    block = next(b for b in range(len(taken) + 1) if b not in taken)
    if block > _LAST_BLOCK:
        raise MPIException(ERR_OTHER, f"{call}: too many connections to other jobs")
    return block


def foreign_ids(block: int, count: int, call: str) -> list[int]:
    """The ids of a remote group of ``count`` processes in ``block``."""
    if count > BLOCK:
        raise MPIException(ERR_OTHER, f"{call}: the other group has more than {BLOCK} processes")
    return [FOREIGN_BASE + block * BLOCK + i for i in range(count)]


def connect_group(
    engine: Any,
    ids: Sequence[int],
    contacts: Sequence[Contact],
    known_as: int,
    local_first: bool = True,
) -> None:
    """Reach the processes ``contacts`` as ``ids``; they know this process as ``known_as``.
    Their ends are watched from now on. ``local_first``: whether this side's group comes
    first in the union of an intercommunicator between the two (the sides agree)."""
    transport = engine.transport
    for wrank, (folder, rank, pid) in zip(ids, contacts):
        transport.add_foreign(wrank, endpoint(folder, rank), known_as)
        _FIRST[wrank] = local_first
        _WATCH.watch(engine, wrank, pid)


def local_first(local: Sequence[int], remote: Sequence[int]) -> bool:
    """Whether the ``local`` group of an intercommunicator comes before ``remote`` in
    their union, the same on both sides: by world rank within a job, as the sides
    agreed when they connected for a group of another job."""
    if remote[0] >= FOREIGN_BASE > local[0]:
        return _FIRST.get(remote[0], True)
    return local[0] < remote[0]


def release(engine: Any, ranks: Iterable[int]) -> None:
    """``Disconnect``: stop watching the foreign processes among ``ranks`` and close the
    sockets to them (their ids stay reserved: a communicator built from the same
    connection may still name them)."""
    transport = engine.transport
    for wrank in ranks:
        if is_foreign(wrank) and transport is not None:
            _WATCH.unwatch(wrank)
            sock = transport.peers.pop(wrank, None)
            if sock is not None:
                sock.close()


class _Watch:
    """A thread that waits on the pidfds of connected processes of other jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, tuple[int, list[int], Any]] = {}  # pidfd -> (pid, ids, engine)
        self._by_id: dict[int, int] = {}  # foreign id -> pidfd
        self._poke_r, self._poke_w = -1, -1
        self._thread: threading.Thread | None = None

    def watch(self, engine: Any, wrank: int, pid: int) -> None:
        with self._lock:
            if wrank in self._by_id:
                return
            fd = next((f for f, (p, _, _) in self._fds.items() if p == pid), None)
            if fd is None:
                try:
                    fd = os.pidfd_open(pid)
                except ProcessLookupError:
                    engine.note_peer_exit(wrank, f"pid {pid}, of another job, has ended")
                    return
                except OSError:  # no pidfds here: the process is not watched
                    return
                self._fds[fd] = (pid, [], engine)
            self._fds[fd][1].append(wrank)
            self._by_id[wrank] = fd
            engine.other_jobs += 1
            if self._thread is None:
                if self._poke_r < 0:
                    self._poke_r, self._poke_w = os.pipe()
                    os.set_blocking(self._poke_w, False)
                self._thread = threading.Thread(
                    target=self._follow, name="ipympi-other-jobs", daemon=True
                )
                self._thread.start()
        self._poke()

    def unwatch(self, wrank: int) -> None:
        with self._lock:
            fd = self._by_id.pop(wrank, None)
            if fd is None:
                return
            _, ids, engine = self._fds[fd]
            ids.remove(wrank)
            engine.other_jobs -= 1
            if not ids:
                del self._fds[fd]
                os.close(fd)
        self._poke()

    def _poke(self) -> None:
        if self._poke_w >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._poke_w, b"\0")

    def _follow(self) -> None:
        while True:
            with self._lock:
                fds = list(self._fds)
                if not fds:
                    self._thread = None
                    return
            try:
                ready, _, _ = select.select([*fds, self._poke_r], [], [])
            except (OSError, ValueError):  # a pidfd closed meanwhile: look again
                continue
            if self._poke_r in ready:
                os.read(self._poke_r, 4096)
            for fd in ready:
                if fd == self._poke_r:
                    continue
                with self._lock:
                    entry = self._fds.get(fd)
                    # not ended: a number closed and reused while this waited; look anew
                    if entry is None or (not _ended(entry[0]) and self._renew(fd)):
                        continue
                    del self._fds[fd]
                    os.close(fd)
                    pid, ids, engine = entry
                    for wrank in ids:
                        self._by_id.pop(wrank, None)
                    engine.other_jobs -= len(ids)
                for wrank in ids:
                    engine.note_peer_exit(wrank, f"pid {pid}, of another job, has ended")

    def _renew(self, fd: int) -> bool:
        """Under the lock: watch the process of pidfd ``fd`` through a new pidfd (False:
        it has ended meanwhile)."""
        pid, ids, engine = self._fds[fd]
        try:
            new = os.pidfd_open(pid)
        except OSError:
            return False
        del self._fds[fd]
        os.close(fd)
        self._fds[new] = (pid, ids, engine)
        for wrank in ids:
            self._by_id[wrank] = new
        return True


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie its parent has not reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


_WATCH = _Watch()
