"""Sockets of one rank: where frames come in, go out, and control talks.

Data frames travel as Unix datagrams. Each rank binds one ``SOCK_DGRAM``
socket at ``<session dir>/r<rank>`` and reads every frame from it in the
calling thread: no I/O thread sits between the kernel and the rank, which
measured 2-3x faster than zmq ipc once more ranks than cores share a machine
(a 4-rank dissemination barrier on 2 cores: 29 us against 77 us). Each peer
gets one non-blocking socket connected to its address; a datagram socket
keeps per-sender FIFO order, which gives MPI's non-overtaking rule.

The kernel queues only a few datagrams per receiver (``net.unix.max_dgram_qlen``),
so a send that finds the queue full is kept in a per-peer queue (still in
order) and retried whenever this rank waits for input, and the waiting rank
also watches the full peers for room. A standard-mode send therefore never
blocks on a slow receiver, as with MPICH for small messages.

The session directory is private (mode 0700, created by the launcher), so no
other local user can send a frame to a rank.

A rank that sends many frames to a peer of its host makes a *ring* to it
(:mod:`~ipympi.progress.shmring`): shared memory that its frames go through without
a system call on either side, as long as they fit. The ring keeps the pair's frames
in order with those that still go by socket, and a writer wakes a reader that may be
asleep with a ``WAKE`` frame, so every wait on the socket keeps working as long as it
looks at the rings first (:meth:`Transport.has_input`); a blocked receive looks at
rings and socket in turn, as it looks at the socket alone before any ring exists.

Processes of another job of the same user on this host (connected by ``Accept``/
``Connect`` or ``Comm.Join``, see :mod:`ipympi.mpi.jobs`) are *foreign* peers: ids
from :data:`~ipympi.core.wire.FOREIGN_BASE` up, which no process of a job ever has, each
mapped to its data socket in the other job's session directory (:meth:`Transport.add_foreign`). A
frame to a foreign peer leaves with its sender field (``wsource``) set to the id that
peer knows this process by, so its replies come back the same way.

Ranks on other hosts (a world placed on several hosts by the launcher)
are reached through a :class:`~ipympi.progress.tcp.TcpLink` instead: signed zmq
frames over tcp. A rank with such peers waits on its data socket and its tcp
inbox together and reads whichever has a frame, so everything above the
transport sees one stream of frames whatever host a peer is on.

Besides the data socket a rank has:

* a *doorbell* (a pipe) that a thread entering MPI rings to take the socket
  back from the progress thread;
* a *wake-up* pipe: while several threads of the rank are in MPI, the one that
  waits for input does so with the engine released (:meth:`Transport.wait_input`),
  and another thread that may have completed what it waits for wakes it with it;
* an optional control DEALER (zmq) connected to the launcher or controller
  (hello, abort, state queries; see ``core.control``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import zmq

from ..core import control as _control
from ..core.wire import FOREIGN_BASE, HEADER_SIZE, RING, RINGED, WAKE_FRAME
from ..core.wire import pack as pack_header
from ..core.wire import unpack as unpack_header
from .shm import fence
from .shmring import RingIn, RingOut, capacity, ring_after
from .tcp import CHUNK as TCP_CHUNK
from .tcp import Received, TcpLink

__all__ = ["MAX_FRAME", "QUIET_MS", "Transport", "cores"]

# The largest frame: an eager message (64 KiB) with its header, or a chunk of
# a large message sent through frames (when process_vm_readv is refused).
MAX_FRAME = 64 * 1024 + 256
CHUNK = 60 * 1024

# While sends wait for room, blocked receives wake up this often (ms) to retry
# peers that were not reachable yet (still starting up).
RETRY_MS = 5

# A rank about to wait for a frame first looks this many times more, giving its
# core to another process in between (sched_yield), and only then sleeps in the
# kernel. When ranks share cores, the frame is usually sent by a rank that this
# hands the core to, and waking from a sleep costs more than the whole exchange:
# with 4 ranks on 2 cores a Barrier took 70-80 us sleeping at once, 50 us this way,
# and 2 ranks on 2 cores exchange a message in half the time. It looks with
# poll(), not by trying to read: a read that finds nothing raises in Python, which
# costs about 1.2 us against 0.3 us for the poll. A rank that waits longer spends
# about 30 us of CPU (45 looks and yields) before it sleeps.
SPIN_TRIES = 45
# When every rank of the job on this host has a core of its own, nobody needs the core
# a waiting rank gives away, and it looks for about a millisecond (as a shared board's
# waits do): a wait for a large message's FIN (the receiver copying 1 MiB takes 80 us)
# then ends without a wake-up from sleep, which cost 50-60 us more per message.
SPIN_TRIES_ALONE = 1500

# Looks at the rings per look at the socket, of a rank with a core of its own that waits.
RING_LOOKS = 8

# A receive that has waited this long (ms) with nothing coming in calls ``Transport.quiet``
# (once per receive): long enough that a normal wait rarely gets there, short
# enough that the engine's question about a silent collective mismatch gets its
# answer well before the launcher's stuck-job rule looks (about a second).
QUIET_MS = 100

# What sending to a peer's socket raises once the peer has ended: refused at
# first, not connected on the same socket afterwards.
_PEER_GONE = frozenset({errno.ECONNREFUSED, errno.ENOTCONN})


_WSOURCE = struct.Struct("<i")  # the sender field of a frame's header, at WSOURCE_AT
WSOURCE_AT = 16
FLAGS_AT = 1


def _flagged(frame: bytes, flags: int) -> bytes:
    """``frame`` with its header's flags byte set to ``flags``."""
    return b"".join((frame[:FLAGS_AT], bytes((flags,)), frame[FLAGS_AT + 1 :]))


def cores() -> int:
    """The cores this process may run on (whether waiting ranks must give theirs away)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def endpoint(session_dir: str, rank: int) -> str:
    """The data socket address of ``rank`` in a session."""
    return f"{session_dir}/r{rank}"


class Transport:
    """The data socket, peer sockets and doorbell of one rank (callers lock)."""

    def __init__(
        self,
        rank: int,
        session_dir: str,
        ctl_endpoint: str | None,
        key: bytes = b"",
        nodes: Sequence[int] | None = None,
        bind_address: str | None = None,
        size: int = 1,
    ) -> None:
        """``nodes`` gives each world rank's host (an index; None: all on this
        host); ranks on other hosts are reached over tcp at ``bind_address``.
        ``size``: the number of ranks of the job."""
        self.rank = rank
        self.key = key  # the session's secret: signs control and tcp frames
        self.session_dir = session_dir
        self.data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.path = endpoint(session_dir, rank)
        self.data.bind(self.path)
        self.data_fd = self.data.fileno()
        readable = select.poll()
        readable.register(self.data_fd, select.POLLIN)
        # The engine's straight receive (``collective_frame``) uses these directly.
        self.readable = readable.poll  # (0): whether a frame waits, without reading it
        self.peers: dict[int, socket.socket] = {}  # world rank -> socket connected to it
        self.pending: dict[int, deque[bytes]] = {}  # peer -> frames waiting for room
        # foreign id -> (its data socket's path, the sender field it knows this process by)
        self.foreign: dict[int, tuple[str, bytes]] = {}
        # Called when a receive has waited QUIET_MS for nothing (the engine's hook).
        self.quiet: Callable[[], None] | None = None
        self.bell_r, self.bell_w = os.pipe()
        os.set_blocking(self.bell_r, False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.context = zmq.Context()
        self.ctl: zmq.Socket | None = None
        self.ctl_lock = threading.Lock()
        if ctl_endpoint:
            self.ctl = self.context.socket(zmq.DEALER)
            self.ctl.setsockopt(zmq.IDENTITY, b"rank%d" % rank)
            self.ctl.setsockopt(zmq.LINGER, 2000)
            if ctl_endpoint.startswith("tcp://["):
                self.ctl.setsockopt(zmq.IPV6, 1)
            self.ctl.connect(ctl_endpoint)
        # Ranks on other hosts, and the tcp link that reaches them.
        self.remote: frozenset[int] = frozenset()
        self.tcp: TcpLink | None = None
        if nodes is not None:
            mine = nodes[rank]
            self.remote = frozenset(r for r, node in enumerate(nodes) if node != mine)
        here = size - len(self.remote)  # the job's ranks on this host
        # Whether every rank of the job on this host has a core of its own.
        self.alone = here <= cores()
        # How many times a receive looks before it sleeps (see SPIN_TRIES).
        self.spins = SPIN_TRIES_ALONE if self.alone else SPIN_TRIES
        if self.remote:
            self.tcp = TcpLink(rank, key, bind_address or "127.0.0.1", self.context, MAX_FRAME)
        # What to watch for incoming frames: the data socket's fd, and the tcp inbox.
        self.inputs: list[Any] = (
            [self.data_fd] if self.tcp is None else [self.data_fd, self.tcp.inbox]
        )
        self._tcp_turn = False  # alternate which input is read first, so neither starves
        self._either: zmq.Poller | None = None  # the data socket and the tcp inbox together
        self._input_or_wake: Callable[[int], Any] | None = None  # see wait_input
        # Shared rings (``progress.shmring``): after this many frames to a peer of this
        # host by socket, a ring to it (0: never).
        self.ring_after = ring_after()
        self.ring_size = capacity(here)  # bytes of records of this rank's rings
        self.socket_frames: dict[int, int] = {}  # peer -> frames sent by socket, until a ring
        self.rings_out: dict[int, RingOut] = {}  # peer -> the ring this rank writes to it
        self.rings_in: dict[int, RingIn] = {}  # peer -> the ring it writes to this rank
        self._rings: list[RingIn] = []  # the values of rings_in, looked at in turn
        self._looks_at: list[tuple[Callable[[], bool], Callable[[], bytes | None]]] = []
        self._turn = 0  # which ring to look at first (none starves)
        self.ringed = False  # whether a peer announced a ring (frames may come flagged)
        self._looking = False  # what the rings say: this rank looks at them before a sleep
        self.ready: deque[bytes] = deque()  # frames taken from rings, delivered first

    def same_host(self, wrank: int) -> bool:
        """Whether world rank ``wrank`` runs on this host (its memory can be read directly)."""
        return wrank not in self.remote

    # -- sending -------------------------------------------------------------
    def _peer(self, wrank: int) -> socket.socket | None:
        """The socket connected to ``wrank``, or None while it is not bound yet."""
        sock = self.peers.get(wrank)
        if sock is None:
            foreign = self.foreign.get(wrank)
            path = endpoint(self.session_dir, wrank) if foreign is None else foreign[0]
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.connect(path)
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                return None
            self.peers[wrank] = sock
        return sock

    def send(self, wrank: int, frame: bytes) -> None:
        """Send one frame to world rank ``wrank``: into its ring if it has one and the
        frame fits, else by socket (queued if it has no room now)."""
        ring = self.rings_out.get(wrank)
        if ring is not None:
            if ring.put(frame):
                if ring.must_wake():
                    self.poke(wrank, WAKE_FRAME)
                return
            ring.sent += 1  # by socket, flagged: see progress.shmring
            frame = _flagged(frame, frame[FLAGS_AT] | RINGED)
        elif wrank in self.remote:
            assert self.tcp is not None
            self.tcp.send(wrank, frame)
            return
        elif self.foreign and wrank in self.foreign:
            me = self.foreign[wrank][1]
            frame = b"".join((frame[:WSOURCE_AT], me, frame[WSOURCE_AT + _WSOURCE.size :]))
        elif self.ring_after and wrank != self.rank and wrank < FOREIGN_BASE:
            count = self.socket_frames.get(wrank, 0) + 1
            self.socket_frames[wrank] = count
            if count >= self.ring_after:
                self._socket_send(wrank, frame)
                self._make_ring(wrank)
                return
        self._socket_send(wrank, frame)

    def _make_ring(self, wrank: int) -> None:
        """Make a ring to world rank ``wrank`` (on this host) and announce it."""
        del self.socket_frames[wrank]
        try:
            ring = RingOut.create(self.session_dir, self.ring_size)
        except OSError:
            self.ring_after = 0  # no room for rings here: sockets only
            return
        name = ring.name.encode()
        header = pack_header(RING, 0, 0, 0, 0, 0, self.rank, os.getpid(), 0, ring.size)
        self._socket_send(wrank, header + name)
        self.rings_out[wrank] = ring

    def _socket_send(self, wrank: int, frame: bytes) -> None:
        """Send ``frame`` on the socket connected to ``wrank`` (on this host), or queue it
        behind the frames that wait for room there."""
        queue = self.pending.get(wrank)
        if queue is None:
            sock = self.peers.get(wrank) or self._peer(wrank)
            if sock is not None:
                try:
                    sock.send(frame)
                    return
                except OSError as exc:
                    self.not_sent(wrank, frame, exc)
                    return
            queue = self.pending[wrank] = deque()
        queue.append(frame)
        self._flush_peer(wrank)

    def poke(self, wrank: int, frame: bytes) -> None:
        """Send ``frame`` to world rank ``wrank`` on this host now, or drop it when its
        socket is full (it then has input waiting) or it has ended: for frames that
        only wake a rank. Never queued, so it may pass frames queued before it."""
        sock = self.peers.get(wrank) or self._peer(wrank)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.send(frame)

    def not_sent(self, wrank: int, frame: bytes, exc: OSError) -> None:
        """What to do with ``frame`` when sending it on the socket connected to
        ``wrank`` raised ``exc``: queue it while the peer has no room; drop it
        once the peer has ended (nobody can receive it any more)."""
        if isinstance(exc, BlockingIOError):
            self.pending.setdefault(wrank, deque()).append(frame)
            self._flush_peer(wrank)
        elif exc.errno not in _PEER_GONE:
            raise exc

    # -- processes of other jobs ------------------------------------------------
    def add_foreign(self, wrank: int, path: str, known_as: int) -> None:
        """Reach foreign id ``wrank`` at the data socket ``path``; it knows this process
        as ``known_as``."""
        if wrank < FOREIGN_BASE:
            raise ValueError(f"{wrank} is not a foreign id")
        self.drop_foreign(wrank)
        self.foreign[wrank] = (path, _WSOURCE.pack(known_as))

    def drop_foreign(self, wrank: int) -> None:
        """Forget foreign id ``wrank`` (its frames still queued are dropped)."""
        if self.foreign.pop(wrank, None) is None:
            return
        self.pending.pop(wrank, None)
        sock = self.peers.pop(wrank, None)
        if sock is not None:
            sock.close()

    def send_to_self(self, frame: bytes) -> None:
        """Put ``frame`` into this rank's own socket, from any thread.

        A fresh socket each time, so that no state is shared with the thread
        that drives the data socket (which this wakes up).
        """
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(frame, self.path)

    def send_chunked(self, wrank: int, header_at: Callable[[int], bytes], mem: memoryview) -> None:
        """Send a large payload as frames ``header_at(offset) + chunk``.

        To a rank on another host the chunks are larger and leave without a
        copy, the header and the data as two parts of one tcp message.
        """
        if wrank in self.remote:
            assert self.tcp is not None
            for offset in range(0, mem.nbytes, TCP_CHUNK):
                self.tcp.send(wrank, header_at(offset), mem[offset : offset + TCP_CHUNK])
            return
        for offset in range(0, mem.nbytes, CHUNK):
            self.send(wrank, header_at(offset) + mem[offset : offset + CHUNK])

    def _flush_peer(self, wrank: int) -> None:
        queue = self.pending[wrank]
        sock = self.peers.get(wrank) or self._peer(wrank)
        if sock is None:
            return
        while queue:
            try:
                sock.send(queue[0])
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in _PEER_GONE:
                    raise
                queue.clear()  # the peer has ended
                break
            queue.popleft()
        del self.pending[wrank]

    def flush(self) -> None:
        """Retry every queued frame (in order, per peer)."""
        for wrank in list(self.pending):
            self._flush_peer(wrank)

    @property
    def has_output(self) -> bool:
        return bool(self.pending)

    # -- rings ---------------------------------------------------------------
    def attach(self, frame: bytes) -> None:
        """A peer's ``RING`` frame: map the ring it announces and take its frames from
        there from now on (if it cannot be mapped, the peer's frames keep coming by
        socket: it writes nothing into a ring this rank has not mapped). Only a rank
        of this job on this host makes rings to this one: from anyone else the frame
        is dropped, and so is one that names no ring."""
        self.ringed = True
        header = unpack_header(frame)  # ``value``: the ring's bytes of records
        wsource = header.wsource
        if wsource >= FOREIGN_BASE or wsource in self.remote or wsource == self.rank:
            return
        try:
            ring = RingIn.open(bytes(frame[HEADER_SIZE:]).decode(), header.value)
        except (OSError, UnicodeDecodeError, ValueError):
            return
        old = self.rings_in.get(wsource)
        if old is not None:
            while (earlier := old.take()) is not None:
                self.ready.append(earlier)
            old.close()
        ring.look(self._looking)
        self.rings_in[wsource] = ring
        self._rings = list(self.rings_in.values())
        self._looks_at = [(ring.holds, ring.take) for ring in self._rings]

    def has_input(self) -> bool:
        """Whether a frame waits in a ring (or was taken from one)."""
        return bool(self.ready) or any(ring.holds() for ring in self._rings)

    def may_sleep(self) -> bool:
        """Whether a wait may sleep on the socket now: tells the rings that writers must
        wake this rank from now on, fences, and looks at them a last time (see
        ``progress.shmring``). Every wait that sleeps on the socket asks it first, once
        peers may have rings to this rank; when it says no, the wait reads instead."""
        if self._looking:
            self._looking = False
            for ring in self._rings:
                ring.look(False)
        fence()
        return not self.has_input()

    def _awake(self) -> None:
        """Tell the rings that this rank looks at them before any sleep: writers need
        not wake it (until :meth:`may_sleep`); the caller checked it did not say so."""
        self._looking = True
        for ring in self._rings:
            ring.look(True)

    def _from_rings(self) -> bytes | None:
        """The next frame from the rings (those taken already first), or None."""
        if self.ready:
            return self.ready.popleft()
        rings = self._rings
        count = len(rings)
        turn = self._turn
        for i in range(count):
            frame = rings[(turn + i) % count].take()
            if frame is not None:
                self._turn = (turn + i + 1) % count
                return frame
        return None

    def _arrived(self, frame: Received) -> Received:
        """A frame just read off the socket, once peers may have rings to this rank: a
        flagged one comes after what its sender's ring holds, and loses its flag."""
        if type(frame) is not bytes or not frame[FLAGS_AT] & RINGED:
            return frame
        frame = _flagged(frame, frame[FLAGS_AT] & ~RINGED)
        ring = self.rings_in.get(_WSOURCE.unpack_from(frame, WSOURCE_AT)[0])
        if ring is None:
            return frame
        ready = self.ready
        while (earlier := ring.take()) is not None:
            ready.append(earlier)
        ring.took_flagged()
        if not ready:
            return frame
        ready.append(frame)
        return ready.popleft()

    def _look_around(self) -> Received | None:
        """Look at the rings and the socket in turn, as :meth:`recv` looks at the
        socket alone, giving the core away in between; None when nothing came. A rank
        with a core of its own looks at the rings :data:`RING_LOOKS` times per look at
        the socket (a system call)."""
        frame = self._from_rings()  # what waits already, the rings in turn
        if frame is not None:
            return frame
        readable, looks_at = self.readable, self._looks_at
        looks = RING_LOOKS if self.alone else 1
        for _ in range(self.spins):
            for _ in range(looks):
                for holds, take in looks_at:
                    if holds() and (frame := take()) is not None:
                        return frame
            if readable(0):
                return self._arrived(self.data.recv(MAX_FRAME))
            os.sched_yield()
        return None

    def _recv_ringed(self) -> Received:
        """:meth:`recv` once peers may have rings to this rank."""
        if not self._looking:
            self._awake()
        if not self.pending and self.tcp is None:
            frame = self._look_around()
            if frame is not None:
                return frame
        quiet_at = time.monotonic() + QUIET_MS / 1000 if self.quiet is not None else None
        while True:
            frame = self.recv_nowait()
            if frame is not None:
                return frame
            if not self.may_sleep():
                continue
            if self.pending:
                events = self.room_poller().poll(RETRY_MS)
            else:
                events = self._inputs_poller().poll(QUIET_MS if quiet_at is not None else -1)
            if not events and quiet_at is not None and time.monotonic() > quiet_at:
                quiet_at = None
                self.quiet()  # type: ignore[misc]

    # -- receiving -----------------------------------------------------------
    def recv(self) -> Received:
        """Wait for the next frame, sending queued frames meanwhile.

        A large message's chunk from another host comes as (header frame, data).
        When nothing has come in for ``QUIET_MS``, it calls :attr:`quiet` (once).
        """
        if self.ringed:
            return self._recv_ringed()
        if self.tcp is not None:
            return self._recv_either()
        if not self.pending:
            data, readable = self.data, self.readable
            for _ in range(self.spins):
                if readable(0):
                    return data.recv(MAX_FRAME)
                os.sched_yield()
            if self.quiet is not None and not readable(QUIET_MS):
                self.quiet()
            return data.recv(MAX_FRAME)
        quiet_at = time.monotonic() + QUIET_MS / 1000 if self.quiet is not None else None
        while True:
            self.flush()
            if not self.pending:
                return self.recv()  # every queued frame sent: wait as usual
            if quiet_at is not None and time.monotonic() > quiet_at:
                quiet_at = None
                self.quiet()  # type: ignore[misc]
            for fd, _ in self.room_poller().poll(RETRY_MS):
                if fd == self.data_fd:
                    frame = self.recv_nowait()
                    if frame is not None:
                        return frame

    def room_poller(self, *extra: Any) -> zmq.Poller:
        """A poller of this rank's inputs and ``extra`` (for input), and of the sockets
        of the peers whose frames wait for room (for room): what a wait watches while
        frames wait, so that they go as soon as their peers take them."""
        poller = zmq.Poller()
        for source in (*self.inputs, *extra):
            poller.register(source, zmq.POLLIN)
        for fd in self.room_fds():
            poller.register(fd, zmq.POLLOUT)
        return poller

    def room_fds(self) -> list[int]:
        """The sockets of the peers whose frames wait for room: each becomes writable
        (``POLLOUT``) once its peer has read some of what it holds."""
        peers = self.peers
        return [peers[w].fileno() for w in self.pending if w in peers]

    def wait_room(self) -> None:
        """Wait until a peer whose frames wait has room, or a frame came in (``RETRY_MS``
        at most): for a wait that reads nothing from this transport (on a shared board)
        while frames wait, so that they go as soon as their peers take them, as they do
        while :meth:`recv` waits. The caller then retries them (:meth:`flush`)."""
        if self.ringed and not self.may_sleep():
            return
        self.room_poller().poll(RETRY_MS)

    def _recv_either(self) -> Received:
        """Wait for a frame on the data socket or the tcp inbox."""
        poller = self._inputs_poller()
        quiet_at = time.monotonic() + QUIET_MS / 1000 if self.quiet is not None else None
        while True:
            frame = self.recv_nowait()
            if frame is not None:
                return frame
            if quiet_at is None:
                poller.poll(RETRY_MS if self.pending else -1)
            elif not poller.poll(RETRY_MS if self.pending else QUIET_MS) and (
                time.monotonic() > quiet_at
            ):
                quiet_at = None
                self.quiet()  # type: ignore[misc]

    def wait(self, timeout: float) -> None:
        """Wait until a frame may have come in, at most ``timeout`` seconds."""
        if self.ringed and not self.may_sleep():
            return
        ms = max(1, int(timeout * 1000))
        if self.tcp is None:
            self.readable(ms)
            return
        self._inputs_poller().poll(ms)

    def wait_input(self) -> None:
        """Wait until a frame may have come in or :meth:`wake` was called.

        Reads nothing: the caller, having let the engine go meanwhile, takes it
        back and reads. While frames wait for room at full peers it also returns
        when one has room, and every few milliseconds, so that they are retried.
        """
        if self.ringed and not self.may_sleep():
            return
        if self.pending:
            self.room_poller(self.wake_r).poll(RETRY_MS)
            self._drain_wake()
            return
        poll = self._input_or_wake
        if poll is None:
            if self.tcp is None:
                poller: Any = select.poll()
                for fd in (self.data_fd, self.wake_r):
                    poller.register(fd, select.POLLIN)
            else:
                poller = zmq.Poller()
                for source in [*self.inputs, self.wake_r]:
                    poller.register(source, zmq.POLLIN)
            poll = self._input_or_wake = poller.poll
        poll(-1)
        self._drain_wake()

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass

    def wake(self) -> None:
        """End a :meth:`wait_input` in progress (or the next one), from any thread."""
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"\x01")

    def _inputs_poller(self) -> zmq.Poller:
        """A poller of the data socket and the tcp inbox together."""
        if self._either is None:
            self._either = zmq.Poller()
            for source in self.inputs:
                self._either.register(source, zmq.POLLIN)
        return self._either

    def recv_nowait(self) -> Received | None:
        """The next frame if one is waiting, else None (also retries queued sends)."""
        if self.pending:
            self.flush()
        if self.ringed:
            frame = self._from_rings()
            if frame is not None:
                return frame
        tcp = self.tcp
        if tcp is not None:
            self._tcp_turn = not self._tcp_turn
            if self._tcp_turn and (received := tcp.recv_nowait()) is not None:
                return received
        try:
            frame = self.data.recv(MAX_FRAME, socket.MSG_DONTWAIT)
            return self._arrived(frame) if self.ringed else frame
        except BlockingIOError:
            pass
        return tcp.recv_nowait() if tcp is not None and not self._tcp_turn else None

    # -- doorbell ------------------------------------------------------------
    def ring(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self.bell_w, b"\x01")

    def drain_bell(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.bell_r, 4096):
                pass

    # -- control -------------------------------------------------------------
    def send_control(self, msg: Mapping[str, Any]) -> None:
        """Send one control message (signed) to the launcher or controller, if any."""
        if self.ctl is not None:
            data = _control.encode(msg, self.key)
            with self.ctl_lock:
                self.ctl.send(data)

    def recv_control(self) -> dict[str, Any] | None:
        """The next well-signed control message, or None when none is waiting.

        Frames that are not signed with the session key, or are not control
        messages, are dropped.
        """
        assert self.ctl is not None
        while True:
            try:
                with self.ctl_lock:
                    data = self.ctl.recv(zmq.NOBLOCK)
            except zmq.Again:
                return None
            try:
                return _control.decode(data, self.key)
            except _control.ControlProtocolError:
                continue

    def close(self, linger_ms: int = 1000) -> None:
        """Close every socket; queued frames get ``linger_ms`` to leave."""
        deadline = time.monotonic() + linger_ms / 1000
        while self.pending and time.monotonic() < deadline:
            self.flush()
            if self.pending:
                time.sleep(RETRY_MS / 1000)
        for sock in self.peers.values():
            sock.close()
        self.peers.clear()
        for ring in (*self.rings_out.values(), *self.rings_in.values()):
            ring.close()
        self.rings_out.clear()
        self.rings_in.clear()
        self._rings = []
        self._looks_at = []
        self.pending.clear()
        if self.tcp is not None:
            self.tcp.close(linger_ms)
        if self.ctl is not None:
            self.ctl.close(linger=1000)
            self.ctl = None
        self.data.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.context.term()
        for fd in (self.bell_r, self.bell_w, self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
