"""The progress engine of one rank: matching, data movement and waiting.

The engine ties the sans-I/O protocol between ranks
(:class:`~ipympi.core.protocol.PeerProtocol`: matching, the EAGER/RTS/CTS/FIN/ACK/
CANCEL/CHECK/CERR exchanges) to the sockets of :class:`~ipympi.progress.transport.Transport`:
it feeds the protocol every frame it reads and performs the actions the protocol leaves
(sends, reads of another rank's memory, trace records). One lock guards the protocol,
the sockets and every :class:`~ipympi.progress.operation.Operation`; whoever holds it
*drives* the data socket:

* a thread inside an MPI call holds it and, when it must wait, blocks in the
  data socket's ``recv`` itself (no thread hand-off between kernel and rank);
* while no thread is inside MPI for more than ~2 ms, the progress thread
  (``progress.thread``) takes it and keeps matching and moving data, so a posted
  receive is satisfied and a synchronous or large send completes while the
  user computes. A thread entering MPI rings the doorbell to take it back.
* while several threads of the rank are in MPI, those that wait take turns at
  the socket without holding the engine in between (``progress.sharing``), so that each
  can enter, and be woken when another completed what it waits for.

Small messages travel eagerly in one frame. Large ones are announced (RTS) and
read by the receiver straight from the sender's memory (``progress.largebuf``), or
sent in chunks where that is not permitted; a blocking sender with a core of its own
writes half of a very large one into the receiver's memory meanwhile (``PUT``). See
``core.wire`` for the frame layout, ``core.protocol`` for the exchanges.

Every blocking wait is interruptible (Ctrl-C raises ``KeyboardInterrupt``; the
posted receive is withdrawn) and observable: :meth:`Engine.waiting_info` says
what the rank is blocked on, for hang reports.
"""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from typing import Any, Callable, NoReturn, cast

from ..core import wire
from ..core.errors import ERR_OTHER
from ..core.errors import Exception as MPIException
from ..core.matching import Envelope, ExactQueue
from ..core.protocol import (
    ABANDONED,
    EAGER_LIMIT,
    Fetch,
    PeerProtocol,
    Put,
    Send,
    SendData,
    TraceArrived,
)
from ..core.wire import DATA, EAGER, PEER_DEAD, RING, WAKE_FRAME
from . import tracing as _trace
from .largebuf import VmReader, buffer_address, remote_copy
from .operation import Operation
from .sharing import Sharing, WaitInfo
from .tcp import Received
from .transport import MAX_FRAME, QUIET_MS, Transport

__all__ = ["EAGER_LIMIT", "Engine", "WaitInfo"]

# The progress thread takes over once no thread has been in MPI this long (s).
IDLE_HANDOFF = 0.002

_pack_header = wire.HEADER.pack
_unpack_header = wire.HEADER.unpack_from
_sched_yield = os.sched_yield


class Engine:
    """Matching, sending, receiving and waiting for one rank."""

    def __init__(self, rank: int, size: int, transport: Transport | None) -> None:
        self.rank = rank
        self.pid = os.getpid()
        # The protocol between ranks (``core.protocol``): matching, the sends waiting
        # for an answer, the collective ledger, the ranks known dead. It leaves what
        # needs the sockets in ``actions``, which :meth:`_perform` carries out.
        self.protocol = PeerProtocol(rank, size, self.pid, buffer_address)
        self.actions = self.protocol.actions
        self.matcher = self.protocol.matcher
        # None only without a transport: then every message is to this rank itself
        # (:meth:`attach` sets these three).
        self.transport: Transport | None = None
        self._send = cast("Callable[[int, bytes], None]", None)
        # Whether a rank shares this host (its memory can be read directly).
        self._same_host: Callable[[int], bool] = _everywhere
        self.lock = threading.RLock()
        # The threads waiting with the engine released (``progress.sharing``).
        self.shared = Sharing(self.lock)
        self.vm = VmReader()
        # What the rank is blocked on: a callable building a WaitInfo (built
        # only when someone asks, to keep blocking calls cheap), and since when.
        self.waiting: Callable[[], WaitInfo] | None = None
        self.waiting_since = 0.0
        self.depth = 0  # MPI calls in progress, nested ones included
        # MPI calls entered, by any thread: with ``progressed``, tells an observer
        # whether anything can have changed in the engine since it last looked.
        self.entered = 0
        self.wanted = 0  # threads waiting to enter
        self._wanted_lock = threading.Lock()  # counts ``wanted`` (threads race to enter)
        self.last_exit = 0.0
        self.progress: Any = None  # the ProgressThread, once started
        self.finalized = False
        # Collectives: the schedules in progress (nonblocking and persistent ones
        # advance as frames come), and the ledger numbering every call.
        self.colls: list[Any] = []
        self.ledger = self.protocol.ledger
        # Incoming frames handled: observers compare two readings to tell a
        # long transfer from a rank that cannot progress.
        self.progressed = 0
        # Called from any thread when a thread waiting without reading the socket (on a
        # shared-memory board, ``progress.shmcoll``) must look at it: a rank died, or
        # another thread wants the engine.
        self.wake_hooks: list[Callable[[], None]] = []
        # Called after :meth:`resynchronize` (the ranks realigned their collectives).
        self.resync_hooks: list[Callable[[], None]] = []
        self.dead_peers = self.protocol.dead_peers  # world rank -> why it is gone
        # Waits another job may end: Accept and Connect calls in progress, connected
        # processes of other jobs (``mpi.jobs``); the stuck-job rule leaves such a rank alone.
        self.connecting = 0
        self.other_jobs = 0
        # Point-to-point messages (even contexts) sent to and arrived from each world
        # rank (not other jobs' processes), ever: a cell's leftovers still on their way
        # show as a difference between two ranks' counts (``engine/leftovers.py``).
        self.sent = self.protocol.sent
        self.arrived = self.protocol.arrived
        # The message recorder while tracing is on (``progress.tracing``), else None.
        self.tracer: _trace.Tracer | None = None
        self.set_tracer(_trace.attach(self))
        # What a blocking receive waits for, asked about when the wait gets long:
        # (collective context, source, seq) of a straight collective's message, or the
        # operation waited on (``Operation.awaited`` says which receive, if any).
        self.awaiting: tuple[int, int, int] | Operation | None = None
        # Frame kinds served above the engine (``RMA``: ``mpi.win_remote``), by kind: each
        # gets the frame and, for a chunk from another host, its data apart (else None);
        # called with the engine held, by whichever thread drives the socket.
        self.services: dict[int, Callable[[bytes, memoryview | None], None]] = {}
        if transport is not None:
            self.attach(transport)

    @property
    def size(self) -> int:
        """How many processes this one knows of (``grow`` adds spawned ones)."""
        return self.protocol.size

    def set_tracer(self, tracer: _trace.Tracer | None) -> None:
        """Feed ``tracer`` (the message recorder) from now on, or none."""
        self.tracer = tracer
        self.protocol.tracing = tracer is not None

    # -- entering and leaving MPI --------------------------------------------
    def enter(self) -> None:
        """Take the engine for an MPI call (from the progress thread if needed).

        When another thread holds it and waits for a frame reading the socket,
        a ``WAKE`` frame gets it to let go: seeing ``wanted``, it waits on
        sharing the socket (``progress.sharing``).
        """
        if not self.lock.acquire(False):
            with self._wanted_lock:
                self.wanted += 1
            try:
                transport = self.transport
                if transport is not None:
                    transport.ring()
                    if self.waiting is not None:
                        transport.send_to_self(WAKE_FRAME)
                for hook in self.wake_hooks:
                    hook()
                self.lock.acquire()
            finally:
                with self._wanted_lock:
                    self.wanted -= 1
        self.depth += 1
        self.entered += 1

    def leave(self) -> None:
        """Give the engine back; threads waiting in it may have been completed."""
        self.depth -= 1
        self.last_exit = time.monotonic()
        if self.shared.blocked:
            self.shared.hand_on(self.transport)
        self.lock.release()

    def awaits_frames(self) -> bool:
        """Whether an operation in flight awaits a frame: a posted receive (its sender
        may wait for this rank's answer), a send awaiting its answer, a large message
        coming in, a nonblocking collective. A wait that reads no frames (on a shared
        board) then watches the socket instead (``mpi.coll.shmpath``)."""
        protocol = self.protocol
        return bool(
            self.colls
            or protocol.sends
            or protocol.rdv
            or protocol.splits
            or protocol.matcher.has_posted()
        )

    def nudge(self, wrank: int) -> None:
        """Wake world rank ``wrank`` on this host (this rank too, from any thread) if it
        waits for a frame: a ``WAKE`` frame, dropped when its socket is full (it then has
        input waiting anyway)."""
        transport = self.transport
        if transport is None:
            return
        if wrank == self.rank:
            transport.send_to_self(WAKE_FRAME)
        else:
            transport.poke(wrank, WAKE_FRAME)

    def waiting_info(self) -> WaitInfo | None:
        """What the rank is blocked on right now, or None: the first of
        :meth:`blocked_calls`."""
        calls = self.blocked_calls()
        return calls[0] if calls else None

    def blocked_calls(self) -> list[WaitInfo]:
        """What each thread blocked in MPI waits for, the one to report first."""
        return self.shared.calls((self.waiting, self.waiting_since))

    def _wait_shared(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` taking turns at the socket with the other threads
        waiting in MPI (``progress.sharing``); the caller holds the engine."""
        waiting = (self.waiting, self.waiting_since)
        self.waiting = None  # the thread holding the engine no longer waits in it
        try:
            self.shared.wait(ready, waiting, self.transport, self.poll_once, self.deadlock)
        finally:
            self.waiting, self.waiting_since = waiting

    def _await_queued(self, queue: ExactQueue, context: int, source: int, tag: int) -> None:
        """Wait (shared) until a blocking collective's message from ``source`` with
        ``tag`` is in ``queue`` (its context's unexpected messages), a mismatch of
        this call or an earlier one on ``context`` is reported, or a rank dies.

        While threads share the socket, the frame that the straight path
        (:meth:`collective_frame`) would take off it may be read by another
        thread, which queues it: the caller then takes it from the queue.
        """
        dead = len(self.dead_peers)

        def ready() -> bool:
            if (source, tag) in queue:
                return True
            return self.ledger.known_error(context, tag) is not None or len(self.dead_peers) != dead

        self._wait_shared(ready)

    # -- sending -------------------------------------------------------------
    def start_send(
        self,
        op: Operation,
        mem: memoryview | bytes,
        wdest: int,
        context: int,
        source: int,
        tag: int,
        sync: bool,
        sig: int = 0,
        waits: bool = False,
    ) -> None:
        """Start sending ``mem`` to world rank ``wdest``; completes ``op`` when allowed.

        ``source`` is this rank's rank in the communicator; ``sig`` the signature
        of the collective the message belongs to (0 for point-to-point). The
        caller holds the engine and has validated arguments. Messages to this
        rank itself are always copied (never rendezvous), so a blocking
        self-send cannot hang. ``waits``: the caller waits for this send at once (a
        blocking send), so a large message's receiver on this host may ask it to
        write half of it (``core.wire``'s ``PUT``) when this rank has a core of its own.
        """
        tracer = self.tracer
        if tracer is not None:
            tracer.sent(self, op, mem, wdest, context, source, tag)
        if wdest == self.rank:
            self.protocol.send_to_self(op, bytes(mem), context, source, tag, sync, sig)
            if self.actions:
                self._perform()
            return
        helps = waits and self._can_write_to(wdest)
        self._send(
            wdest, self.protocol.start_send(op, mem, wdest, context, source, tag, sync, sig, helps)
        )

    def _can_write_to(self, wdest: int) -> bool:
        """Whether this rank can copy into world rank ``wdest``'s memory while it copies
        too: on this host, with a core each, and memory reads permitted here."""
        transport = self.transport
        return (
            transport is not None
            and transport.alone
            and self._same_host(wdest)
            and self.vm.available
        )

    def send_eager(
        self,
        wdest: int,
        context: int,
        source: int,
        tag: int,
        mem: memoryview | bytes,
        sig: int = 0,
    ) -> bool:
        """Send a small standard-mode message to another rank, with no request.

        The fast path of blocking ``Send``/``send`` and of collectives run
        inline: the message is on its way when this returns, so nothing needs
        to be completed later. Returns False (nothing sent) when the general
        path is needed: to self, too large, or while tracing.
        """
        if wdest == self.rank or self.tracer is not None:
            return False
        nbytes = mem.nbytes if type(mem) is memoryview else len(mem)
        if nbytes > EAGER_LIMIT:
            return False
        if not context & 1:
            self.protocol.count_sent(wdest, context)
        self._send(
            wdest,
            _pack_header(EAGER, 0, sig, context, source, tag, self.rank, self.pid, 0, nbytes) + mem,
        )
        return True

    # -- receiving -----------------------------------------------------------
    def start_recv(self, op: Operation, context: int, source: int, tag: int) -> None:
        """Post a receive; it may complete at once from the unexpected queue."""
        self.protocol.start_recv(op, context, source, tag)
        if self.actions:
            self._perform()

    def withdraw(self, op: Operation) -> bool:
        """Take back a posted, unmatched receive (cancel or interrupt)."""
        return self.protocol.withdraw(op)

    def receive_matched(self, env: Envelope, op: Operation) -> None:
        """Receive a message already taken off the queue (by a matched probe)."""
        self.protocol.deliver(env, op)
        if self.actions:
            self._perform()

    def _perform(self) -> None:
        """Carry out, in order, what the protocol left for the world outside
        (``core.protocol``'s actions); the caller holds the engine."""
        actions = self.actions
        done = 0
        try:
            while done < len(actions):
                action = actions[done]
                done += 1
                if isinstance(action, Send):
                    self._send(action.wdest, action.frame)
                elif isinstance(action, Fetch):  # a large message: read it from the sender's memory
                    payload = action.env.payload
                    read = self._same_host(payload.wsource) and self.vm.read(
                        payload.pid, action.address, action.target
                    )
                    self.protocol.fetched(action.op, action.env, action.target, read)
                elif isinstance(action, Put):  # this sender's part, into its receiver
                    piece = (action.local, action.remote, action.nbytes)
                    try:
                        remote_copy(action.pid, [piece], True)
                        written = True
                    except OSError:
                        written = False
                    self.protocol.put_done(action.wdest, action.msgid, written)
                elif isinstance(action, SendData):  # a large message, in frames
                    assert self.transport is not None
                    header_at = partial(self.protocol.data_header, action.msgid)
                    self.transport.send_chunked(action.wdest, header_at, action.mem)
                elif self.tracer is not None:
                    if isinstance(action, TraceArrived):
                        self.tracer.arrived(action.env)
                    else:
                        self.tracer.received(
                            self,
                            action.op,
                            action.env,
                            action.wsource,
                            action.context,
                            action.tag,
                            action.nbytes,
                        )
        finally:
            del actions[:done]

    # -- incoming frames -----------------------------------------------------
    def cancel_send(self, op: Operation, wdest: int) -> None:
        """Ask the receiver to drop a send that is still waiting (Request.Cancel).

        Only sends that wait for the receiver (synchronous or large ones) can
        be withdrawn; the answer (CANCELLED, or the usual ACK/FIN when the
        message was already matched) completes the operation either way.
        """
        self.protocol.cancel_send(op, wdest)
        if self.actions:
            self._perform()

    def drop_p2p_sends(self) -> list[Operation]:
        """Forget the point-to-point sends still waiting for their receiver, which
        drops their messages too (a failed cell's leftovers): they complete as
        cancelled. The caller holds the engine."""
        return self.protocol.drop_p2p_sends()

    def on_service(self, frame: bytes, data: memoryview) -> None:
        """A chunk from another host of a frame kind served above (:attr:`services`)."""
        service = self.services.get(frame[0])
        if service is None:
            raise MPIException(ERR_OTHER, f"unknown frame kind {frame[0]} from another host")
        service(frame, data)

    def _handle(self, frame: Received) -> None:
        """Feed one frame read off the data socket to the protocol, and do what it says."""
        self.progressed += 1
        if type(frame) is tuple:  # a chunk from another host: (header frame, data)
            if frame[0][0] == DATA:
                self.protocol.receive_data(*frame)
            else:
                self.on_service(*frame)
        elif frame[0] == DATA:
            self.protocol.receive_data(frame)  # type: ignore[arg-type]  # not a tuple: bytes
        else:
            service = self.services.get(frame[0])  # type: ignore[arg-type]
            if service is None:  # the protocol's own kinds (and unknown ones: its error)
                self.protocol.receive(frame)  # type: ignore[arg-type]
            else:
                service(frame, None)  # type: ignore[arg-type]
        if self.actions:
            self._perform()

    # -- progress ------------------------------------------------------------
    def poll_once(self, block: bool = False) -> bool:
        """Handle frames waiting on the data socket (caller holds the engine).

        With ``block`` it first waits for one. Returns True when something was
        handled.
        """
        transport = self.transport
        if transport is None:
            return False
        handled = False
        if block:
            self.awaiting = None
            self._handle(transport.recv())
            handled = True
        recv_nowait = transport.recv_nowait
        while (frame := recv_nowait()) is not None:
            self._handle(frame)
            handled = True
        if self.colls:
            self.advance_collectives()
        return handled

    def wait(self, op: Operation, info: Callable[[], WaitInfo] | None = None) -> None:
        """Block until ``op`` is done (caller holds the engine).

        ``info`` describes the wait for observers; it is called only if someone
        asks what the rank is doing.
        """
        if op.done:
            return
        transport = self.transport
        self.waiting = info or _unknown_wait
        self.waiting_since = time.monotonic()
        try:
            if transport is None:
                self._wait_shared(lambda: op.done)  # another thread may send to this rank
                return
            recv = transport.recv
            self.awaiting = op
            while not op.done:
                if self.wanted or self.shared.blocked:  # other threads in MPI
                    self._wait_shared(lambda: op.done)
                    return
                self._handle(recv())
                if self.colls:
                    self.advance_collectives()
        finally:
            self.waiting = None
            self.awaiting = None  # holds no operation (nor its buffer) past its wait

    def receive_collective(
        self,
        op: Operation,
        context: int,
        source: int,
        tag: int,
        members: list[int],
        info: Callable[[], WaitInfo],
    ) -> None:
        """Receive one message of a blocking collective into ``op`` (caller holds the
        engine; tracing is off).

        The receive is never posted: a collective's (context, source, tag) is
        unique to one call, so the awaited frame is taken straight off the
        socket or out of the unexpected queue, and every other frame gets the
        usual handling. The op ends failed, like a posted receive, when a
        mismatch is reported for this call or an earlier one, or when a rank of
        ``members`` (world ranks) dies, also when that news came before this
        call (:meth:`collective_frame` may have taken it off the socket).
        """
        if self.transport is None:
            self.deadlock()
        unexpected = self.matcher.pending_in(context)
        assert type(unexpected) is ExactQueue, "a collective context"
        self.waiting = info
        self.waiting_since = time.monotonic()
        try:
            while True:
                if unexpected:  # the message, or a large one's announcement, came early
                    env = self.matcher.take(context, source, tag)
                    if env is not None:
                        self.receive_matched(env, op)
                        if not op.done:  # coming in chunks
                            self.wait(op, info)
                        return
                if self.ledger.errors:
                    known = self.ledger.known_error(context, tag)
                    if known is not None:
                        op.fail(ERR_OTHER, known)
                        return
                if self.dead_peers:
                    gone = next((self.dead_peers[r] for r in members if r in self.dead_peers), None)
                    if gone is not None:
                        op.fail(ERR_OTHER, gone, peer_died=True)
                        return
                frame = self.collective_frame(unexpected, context, source, tag)
                if frame is not None:
                    self.fill_from_frame(op, frame)
                    return
        finally:
            self.waiting = None

    def collective_frame(
        self, queue: ExactQueue, context: int, source: int, tag: int
    ) -> bytes | None:
        """The eager frame of a blocking collective's (context, source, tag), taken
        straight off the socket or out of ``queue`` (the context's unexpected
        messages, where it waits when it came early); caller holds the engine,
        tracing is off.

        The straight path's receive (``mpi.coll.fast``): no operation, no posted
        receive, every other frame handled as usual meanwhile. Returns None,
        having consumed nothing of that message, when the caller must look
        again (:meth:`receive_collective` does): the message is a large one's
        announcement, a mismatch of this call or an earlier one was reported,
        or a rank died. The caller says what it waits for (``waiting``).
        """
        if queue.keys:
            entries = queue.keys.get((source, tag))
            if entries is not None:
                payload = entries[0][1].payload
                if payload.kind != EAGER:
                    return None
                queue.take(source, tag)
                return payload.frame
        transport = self.transport
        assert transport is not None
        readable, data_recv = transport.readable, transport.data.recv
        handle = self._handle
        self.awaiting = (context, source, tag)
        while True:
            if self.wanted or self.shared.blocked:  # other threads in MPI: one reads for all
                self._await_queued(queue, context, source, tag)
                return None
            if transport.pending or transport.tcp is not None or transport.ringed:
                frame = transport.recv()
            else:  # Transport.recv, inlined: look a few times, then sleep
                spins = transport.spins
                while spins and not readable(0):
                    spins -= 1
                    _sched_yield()
                if not spins and not readable(QUIET_MS):
                    self._on_quiet()
                frame = data_recv(MAX_FRAME)
            if type(frame) is bytes and frame[0] == EAGER:
                header = _unpack_header(frame)
                if header[3] == context and header[4] == source and header[5] == tag:
                    self.progressed += 1
                    return frame
            handle(frame)
            # The awaited message, handled otherwise (a large one's announcement,
            # or a frame from another host), is now in the queue.
            if (source, tag) in queue:
                return None
            if self.colls:
                self.advance_collectives()
            if self.ledger.errors and self.ledger.known_error(context, tag) is not None:
                return None  # a mismatch of this call or an earlier one
            if self.dead_peers:
                return None

    def fill_from_frame(self, op: Operation, frame: bytes) -> None:
        """Complete receive ``op`` with an eager frame taken off the socket for it."""
        self.protocol.fill_from_frame(op, frame)

    def wait_until(
        self, ready: Callable[[], bool], info: Callable[[], WaitInfo] | None = None
    ) -> None:
        """Drive progress until ``ready()`` (caller holds the engine)."""
        if ready():
            return
        self.waiting = info or _unknown_wait
        self.waiting_since = time.monotonic()
        try:
            while not ready():
                if self.transport is None or self.wanted or self.shared.blocked:
                    self._wait_shared(ready)
                    return
                self.poll_once(True)
        finally:
            self.waiting = None

    def deadlock(self) -> NoReturn:
        """Raise the error of a wait that no other rank or thread could ever end."""
        raise MPIException(
            ERR_OTHER,
            "deadlock: this single-process world has no other rank, and the process "
            "no other thread, that could ever complete the operation",
        )

    # -- collectives -----------------------------------------------------------
    def advance_collectives(self) -> None:
        """Move every nonblocking collective whose current round is complete."""
        for coll in list(self.colls):
            coll.advance()

    def end_collective(self, context: int, seq: int) -> Envelope | None:
        """Mark collective ``seq`` finished; return a leftover message of it, if any.

        In a correct collective every message sent to a rank is received by it
        within the call, so a leftover means the ranks called different ones.
        """
        return self.protocol.end_collective(context, seq)

    def abandon_collective(self, context: int, seq: int, taken: Envelope | None = None) -> None:
        """Collective ``seq`` failed here: end it and release the senders of its
        queued messages (``Protocol.abandon_collective``)."""
        self.protocol.abandon_collective(context, seq, taken)
        if self.actions:
            self._perform()

    def _on_quiet(self) -> None:
        """A blocking receive has had no input for a while (``Transport.quiet``): if it
        waits for another rank's message of a collective, ask that rank whether it
        called the same collective (``CHECK``). Two ranks in different collectives
        that wait for each other with no message crossing would otherwise wait
        forever; the one that finds the calls differ reports the mismatch."""
        awaiting = self.awaiting
        self.awaiting = None  # asked once per wait
        if isinstance(awaiting, Operation):
            posted = awaiting.awaited()  # a collective's receive, or a point-to-point one
            awaiting = (posted.context, posted.source, posted.tag) if posted is not None else None
        if awaiting is None:
            return
        self.protocol.ask(*awaiting)
        if self.actions:
            self._perform()

    def fail_collectives(self, context: int, text: str, seq: int) -> None:
        """Record the mismatch of collective ``seq`` on ``context`` (once, however
        many ranks report it) and fail the receives waiting on that context."""
        self.protocol.fail_collectives(context, text, seq)

    def notify_mismatch(self, context: int, seq: int, wranks: list[int], text: str) -> None:
        """Tell every other rank of a communicator that collective ``seq`` failed."""
        self.protocol.notify_mismatch(context, seq, wranks, text)
        if self.actions:
            self._perform()

    def attach(self, transport: Transport) -> None:
        """Use ``transport`` from now on (a singleton that starts processes gets one
        late)."""
        self.transport = transport
        self._send = transport.send
        self._same_host = transport.same_host
        transport.quiet = self._on_quiet
        # a peer's shared ring to this rank (``progress.shmring``): the transport's
        self.services[RING] = lambda frame, _data: transport.attach(frame)

    def grow(self, size: int) -> None:
        """Know of ``size`` processes at least: processes started later (``Comm.Spawn``)
        take the next indexes, and are addressed like the first ones."""
        self.protocol.grow(size)

    # -- a rank that died -------------------------------------------------------
    def fail_peer(self, wrank: int, reason: str) -> None:
        """World rank ``wrank`` has died: fail everything that waits on it.

        Receives posted for it, sends it has not acknowledged, and collectives
        in progress on communicators it belongs to complete with ERR_OTHER, so
        that no rank hangs on a dead one. (Later calls naming it are left to
        the controller's stuck-cell rule.)
        """
        self.protocol.fail_peer(wrank, reason)

    def note_peer_exit(self, wrank: int, reason: str) -> None:
        """From any thread: tell whoever drives the data socket that ``wrank`` died."""
        if self.transport is None:
            return
        header = _pack_header(PEER_DEAD, 0, 0, 0, 0, 0, self.rank, self.pid, 0, wrank)
        try:
            self.transport.send_to_self(header + reason.encode())
        except OSError:
            pass  # this rank's own socket is gone: it is ending, nothing waits to hear
        for hook in self.wake_hooks:
            hook()

    # -- recovery after an interrupt -------------------------------------------
    def abandon_collectives(self) -> dict[int, int]:
        """Give up every collective in progress; return each context's next sequence number.

        The first step of resynchronising the ranks after an interrupt left
        them at different collectives: messages of the abandoned collectives
        that arrive later are dropped without a mismatch report. The caller
        (an engine, between cells) gathers every rank's answer and then calls
        :meth:`resynchronize` everywhere with the largest number per context.
        """
        self.resynchronize(dict(self.ledger.next))
        return dict(self.ledger.next)

    def resynchronize(self, bases: dict[int, int]) -> None:
        """Make ``bases[context]`` the next collective sequence number of each context.

        Queued and posted collective traffic below it is discarded (a
        rendezvous sender is released), as are nonblocking collectives still
        in progress, which fail with ERR_OTHER.
        """
        self.protocol.resynchronize(bases)
        if self.actions:
            self._perform()
        for coll in list(self.colls):
            if coll.context in bases:
                self.colls.remove(coll)
                coll.fail(ERR_OTHER, ABANDONED)
        for hook in self.resync_hooks:
            hook()

    # -- probes --------------------------------------------------------------
    def iprobe(self, context: int, source: int, tag: int, take: bool) -> Envelope | None:
        self.poll_once(False)
        if take:
            return self.matcher.take(context, source, tag)
        return self.matcher.probe(context, source, tag)

    def probe(
        self, context: int, source: int, tag: int, take: bool, info: Callable[[], WaitInfo]
    ) -> Envelope:
        found: list[Envelope] = []
        look = self.matcher.take if take else self.matcher.probe

        def ready() -> bool:
            env = look(context, source, tag)
            if env is not None:
                found.append(env)
            return bool(found)

        self.poll_once(False)
        self.wait_until(ready, info)
        return found[0]

    # -- shutdown ------------------------------------------------------------
    def pending_sends(self) -> int:
        """How many sends wait for their receiver's answer (synchronous or large ones)."""
        return len(self.protocol.sends)

    def unanswered_sends(self) -> list[Operation]:
        """The sends that wait for their receiver's answer (synchronous or large ones)."""
        return list(self.protocol.sends.values())

    def operations(self) -> list[Any]:
        """Every operation in progress on this rank: posted receives, sends waiting for
        an answer, large messages arriving in chunks, nonblocking collectives."""
        return self.protocol.operations() + self.colls

    def statistics(self) -> dict[str, Any]:
        stats = self.matcher.statistics()
        return {
            "posted_receives": stats.posted,
            "unexpected_messages": stats.unexpected,
            "sends_in_flight": len(self.protocol.sends),
            "progressed": self.progressed,
        }


def _everywhere(wrank: int) -> bool:
    return True


def _unknown_wait() -> WaitInfo:
    return WaitInfo("wait", "", -1, -1)
