"""The progress engine of one rank: matching, data movement and waiting.

The engine ties the pure :class:`~ipympi.core.matching.Matcher` to the sockets of
:class:`~ipympi.progress.transport.Transport`. One lock guards the matcher, the sockets
and every :class:`~ipympi.progress.operation.Op`; whoever holds it *drives* the data socket:

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
sent in chunks where that is not permitted. See ``core.wire`` for the frame layout.

Every blocking wait is interruptible (Ctrl-C raises ``KeyboardInterrupt``; the
posted receive is withdrawn) and observable: :meth:`Engine.waiting_info` says
what the rank is blocked on, for hang reports.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any, Callable, NoReturn, cast

from ..core import wire
from ..core.arrival import SELF, Arrival, SelfMessage
from ..core.constants import ANY_SOURCE
from ..core.contexts import is_collective
from ..core.errors import ERR_OTHER, ERR_TRUNCATE
from ..core.errors import Exception as MPIException
from ..core.ledger import Ledger
from ..core.matching import Envelope, ExactQueue, Matcher, PostedReceive
from ..core.wire import (
    ACK,
    CANCEL,
    CANCELLED,
    CERR,
    CHECK,
    CTS,
    DATA,
    EAGER,
    FIN,
    HEADER_SIZE,
    PEER_DEAD,
    RTS,
    SYNC,
    WAKE,
)
from . import tracing as _trace
from .largebuf import VmReader, buffer_address
from .operation import Operation
from .sharing import Sharing, WaitInfo
from .tcp import Received
from .transport import MAX_FRAME, QUIET_MS, SPIN_TRIES, Transport

__all__ = ["EAGER_LIMIT", "Engine", "WaitInfo"]

# Messages up to this size travel in one frame with their header.
EAGER_LIMIT = 64 * 1024

# The progress thread takes over once no thread has been in MPI this long (s).
IDLE_HANDOFF = 0.002

ABANDONED = "collective abandoned after an interrupt"


_pack_header = wire.HEADER.pack
_unpack_header = wire.HEADER.unpack_from
_pack_address = wire.RTS_EXTRA.pack
_sched_yield = os.sched_yield
# Sent to the rank's own socket to wake a thread blocked reading it (see ``enter``).
_WAKE_FRAME = _pack_header(WAKE, 0, 0, 0, 0, 0, 0, 0, 0, 0)


class Engine:
    """Matching, sending, receiving and waiting for one rank."""

    def __init__(self, rank: int, size: int, transport: Transport | None) -> None:
        self.rank = rank
        self.size = size
        self.pid = os.getpid()
        self.transport = transport
        # None only without a transport: then every message is to this rank itself.
        self._send = cast(
            "Callable[[int, bytes], None]", transport.send if transport is not None else None
        )
        # Whether a rank shares this host (its memory can be read directly).
        self._same_host = transport.same_host if transport is not None else _everywhere
        self.matcher = Matcher(exact=is_collective)
        self.lock = threading.RLock()
        # The threads waiting with the engine released (``progress.sharing``).
        self.shared = Sharing(self.lock)
        self.vm = VmReader()
        self._msgids = itertools.count(1)
        self._sends: dict[int, Operation] = {}  # msgid -> send waiting for ACK/FIN
        # (wsrc, msgid) -> (recv, envelope, target, bytes so far) for large
        # messages arriving in frames
        self._rdv: dict[tuple[int, int], tuple[Operation, Envelope, memoryview, int]] = {}
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
        self.ledger = Ledger()
        # Incoming frames handled: observers compare two readings to tell a
        # long transfer from a rank that cannot progress.
        self.progressed = 0
        self.dead_peers: dict[int, str] = {}  # world rank -> why it is gone
        # Point-to-point messages (even contexts) sent to and arrived from each
        # world rank, ever: a cell's leftovers still on their way show as a
        # difference between two ranks' counts (``engine/leftovers.py``).
        self.sent = [0] * size
        self.arrived = [0] * size
        # The message recorder while tracing is on (``progress.tracing``), else None.
        self.tracer: _trace.Tracer | None = _trace.attach(self)
        # What a blocking receive waits for, asked about when the wait gets long:
        # (collective context, source, seq) of a straight collective's message, or the
        # operation waited on (``Operation.awaited`` says which receive, if any).
        self.awaiting: tuple[int, int, int] | Operation | None = None
        if transport is not None:
            transport.quiet = self._on_quiet

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
                        transport.send_to_self(_WAKE_FRAME)
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
        if self.shared.count:
            self.shared.hand_on(self.transport)
        self.lock.release()

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
    ) -> None:
        """Start sending ``mem`` to world rank ``wdest``; completes ``op`` when allowed.

        ``source`` is this rank's rank in the communicator; ``sig`` the signature
        of the collective the message belongs to (0 for point-to-point). The
        caller holds the engine and has validated arguments. Messages to this
        rank itself are always copied (never rendezvous), so a blocking
        self-send cannot hang.
        """
        tracer = self.tracer
        if tracer is not None:
            tracer.sent(self, op, mem, wdest, context, source, tag)
        if wdest == self.rank:
            self._send_to_self(op, bytes(mem), context, source, tag, sync, sig)
            return
        nbytes = mem.nbytes if type(mem) is memoryview else len(mem)
        msgid = next(self._msgids)
        op.msgid = msgid
        if not context & 1:
            try:
                self.sent[wdest] += 1
            except IndexError:  # a process this one did not know of (spawned)
                self.grow(wdest + 1)
                self.sent[wdest] += 1
        if nbytes <= EAGER_LIMIT:
            header = _pack_header(
                EAGER,
                SYNC if sync else 0,
                sig,
                context,
                source,
                tag,
                self.rank,
                self.pid,
                msgid,
                nbytes,
            )
            self._send(wdest, header + mem)
            if sync:
                op.send_context = context
                self._sends[msgid] = op
            else:
                op.complete()
            return
        # Large: announce it; the receiver reads our buffer and answers FIN.
        if type(mem) is not memoryview:
            mem = memoryview(mem)
        op.mem = mem  # keeps the buffer alive until FIN
        header = _pack_header(
            RTS, SYNC if sync else 0, sig, context, source, tag, self.rank, self.pid, msgid, nbytes
        ) + _pack_address(buffer_address(mem))
        op.send_context = context
        self._sends[msgid] = op
        self._send(wdest, header)

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
            try:
                self.sent[wdest] += 1
            except IndexError:
                self.grow(wdest + 1)
                self.sent[wdest] += 1
        self._send(
            wdest,
            _pack_header(EAGER, 0, sig, context, source, tag, self.rank, self.pid, 0, nbytes) + mem,
        )
        return True

    def _send_to_self(
        self,
        op: Operation,
        data: bytes,
        context: int,
        source: int,
        tag: int,
        sync: bool,
        sig: int = 0,
    ) -> None:
        payload = SelfMessage(data, op if sync else None, sig)
        env = Envelope(context, source, tag, len(data), payload)
        if not sync:
            op.complete()
        if self.tracer is not None:
            self.tracer.arrived(env)
        recv = self.matcher.arrive(env)
        if recv is not None:
            self._deliver(env, recv.handle)

    # -- receiving -----------------------------------------------------------
    def start_recv(self, op: Operation, context: int, source: int, tag: int) -> None:
        """Post a receive; it may complete at once from the unexpected queue."""
        env = self.matcher.take(context, source, tag)
        if env is not None:
            self._deliver(env, op)
            return
        posted = PostedReceive(context, source, tag, op)
        self.matcher.enqueue(posted)
        op.posted = posted

    def withdraw(self, op: Operation) -> bool:
        """Take back a posted, unmatched receive (cancel or interrupt)."""
        if op.posted is not None and self.matcher.cancel(op.posted):
            op.posted = None
            return True
        return False

    def receive_matched(self, env: Envelope, op: Operation) -> None:
        """Receive a message already taken off the queue by a matched probe."""
        self._deliver(env, op)

    def _deliver(self, env: Envelope, op: Operation) -> None:
        """Move a matched message's data into the receive ``op``."""
        op.posted = None
        op.source = env.source
        op.tag = env.tag
        payload = env.payload
        kind = payload.kind
        if kind == SELF:
            op.rsig = payload.sig
            self._fill(op, memoryview(payload.data), env.nbytes)
            if self.tracer is not None:
                self.tracer.received(self, op, env, self.rank, env.context, env.tag, env.nbytes)
            if payload.sender is not None:
                payload.sender.complete()
            return
        frame = payload.frame
        wsource = payload.wsource
        op.rsig = frame[2] | frame[3] << 8  # wire.signature_of, inlined
        if kind == EAGER:
            self._fill(op, memoryview(frame)[HEADER_SIZE:], env.nbytes)
            if self.tracer is not None:
                self.tracer.received(self, op, env, wsource, env.context, env.tag, env.nbytes)
            if payload.flags & SYNC:
                self._reply(wsource, ACK, payload.msgid)
            return
        # RTS: read the sender's buffer directly, or ask for the data.
        target = self._target(op, env.nbytes)
        (address,) = wire.RTS_EXTRA.unpack_from(frame, HEADER_SIZE)
        if self._same_host(wsource) and self.vm.read(payload.pid, address, target):
            self._finish_fill(op, target, env.nbytes)
            if self.tracer is not None:
                self.tracer.received(self, op, env, wsource, env.context, env.tag, env.nbytes)
            self._reply(wsource, FIN, payload.msgid)
        else:
            self._rdv[(wsource, payload.msgid)] = (op, env, target, 0)
            self._reply(wsource, CTS, payload.msgid)

    def _target(self, op: Operation, nbytes: int) -> memoryview:
        """Where a message of ``nbytes`` goes: the user's buffer, or new bytes."""
        if op.mem is None:
            op.data = bytearray(nbytes)
            return memoryview(op.data)
        if nbytes >= op.mem.nbytes:
            return op.mem
        return op.mem[:nbytes]

    def _finish_fill(self, op: Operation, target: memoryview, nbytes: int) -> None:
        op.count = target.nbytes
        if nbytes > target.nbytes:
            op.fail(
                ERR_TRUNCATE,
                f"message of {nbytes} bytes from rank {op.source} (tag {op.tag}) "
                f"does not fit in a receive buffer of {target.nbytes} bytes",
            )
        else:
            op.complete()

    def _fill(self, op: Operation, data: memoryview, nbytes: int) -> None:
        mem = op.mem
        if mem is None:
            op.data = data
            op.count = nbytes
            op.complete()
            return
        if nbytes == mem.nbytes:
            if nbytes:
                mem[:] = data
            op.count = nbytes
            op.complete()
            return
        n = min(nbytes, mem.nbytes)
        if n:
            mem[:n] = data[:n]
        self._finish_fill(op, mem[:n], nbytes)

    def _reply(self, wdest: int, kind: int, msgid: int) -> None:
        self._send(wdest, _pack_header(kind, 0, 0, 0, 0, 0, self.rank, self.pid, msgid, 0))

    # -- incoming frames -----------------------------------------------------
    def on_frame(self, frame: bytes) -> None:
        """Handle one single-part frame from the data socket (caller holds the engine)."""
        kind, flags, sig, context, source, tag, wsource, pid, msgid, value = _unpack_header(frame)
        if context & 1 and kind <= RTS and self.ledger.is_stray(context, tag):
            self._report_mismatch(context, source, tag, sig)
            if kind == RTS:
                self._reply(wsource, FIN, msgid)  # release the sender's buffer
            return
        if kind <= RTS and not context & 1:
            try:
                self.arrived[wsource] += 1
            except IndexError:  # from a process this one did not know of (spawned)
                self.grow(wsource + 1)
                self.arrived[wsource] += 1
        if kind == EAGER:
            recv = self.matcher.match_posted(context, source, tag)
            if recv is None:
                env = Envelope(
                    context, source, tag, value, Arrival(frame, kind, flags, wsource, pid, msgid)
                )
                self.matcher.queue_unexpected(env)
                if self.tracer is not None:
                    self.tracer.arrived(env)
                return
            op = recv.handle
            op.posted = None
            op.source = source
            op.tag = tag
            op.rsig = sig
            self._fill(op, memoryview(frame)[HEADER_SIZE:], value)
            if self.tracer is not None:
                self.tracer.received(self, op, None, wsource, context, tag, value)
            if flags & SYNC:
                self._reply(wsource, ACK, msgid)
        elif kind == RTS:
            env = Envelope(
                context, source, tag, value, Arrival(frame, kind, flags, wsource, pid, msgid)
            )
            if self.tracer is not None:
                self.tracer.arrived(env)
            recv = self.matcher.arrive(env)
            if recv is not None:
                self._deliver(env, recv.handle)
        elif kind in (ACK, FIN):
            op = self._sends.pop(msgid, None)
            if op is not None:
                op.complete_send()
        elif kind == CTS:
            op = self._sends.get(msgid)
            if op is not None and op.mem is not None:
                me, pid = self.rank, self.pid

                def header_at(offset: int) -> bytes:
                    return _pack_header(DATA, 0, 0, 0, 0, 0, me, pid, msgid, offset)

                assert self.transport is not None
                self.transport.send_chunked(wsource, header_at, op.mem)
        elif kind == CANCEL:
            self._withdraw_unexpected(wsource, msgid)
        elif kind == CANCELLED:
            op = self._sends.pop(msgid, None)
            if op is not None:
                op.complete_send(cancelled=True)
        elif kind == CERR:
            text = bytes(frame[HEADER_SIZE:]).decode(errors="replace")
            self.fail_collectives(context, text, tag)
        elif kind == PEER_DEAD:
            self.fail_peer(value, bytes(frame[HEADER_SIZE:]).decode(errors="replace"))
        elif kind == CHECK:
            self._compare_call(context, source, tag, sig, wsource)
        elif kind == WAKE:
            pass  # it only woke the thread reading the socket
        else:
            raise MPIException(ERR_OTHER, f"unknown frame kind {kind} from rank {wsource}")

    def cancel_send(self, op: Operation, wdest: int) -> None:
        """Ask the receiver to drop a send that is still waiting (Request.Cancel).

        Only sends that wait for the receiver (synchronous or large ones) can
        be withdrawn; the answer (CANCELLED, or the usual ACK/FIN when the
        message was already matched) completes the operation either way.
        """
        if wdest == self.rank:
            for env in self.matcher.pending_unexpected():
                payload = env.payload
                if payload.kind == SELF and payload.sender is op and self.matcher.remove(env):
                    op.complete_cancelled()
                    return
        elif op.msgid in self._sends:
            self._reply(wdest, CANCEL, op.msgid)

    def drop_p2p_sends(self) -> list[Operation]:
        """Forget the point-to-point sends still waiting for their receiver, which
        drops their messages too (a failed cell's leftovers): they complete as
        cancelled. The caller holds the engine."""
        dropped = []
        for msgid, op in list(self._sends.items()):
            if op.send_context >= 0 and not op.send_context & 1:
                del self._sends[msgid]
                op.complete_send(cancelled=True)
                dropped.append(op)
        return dropped

    def _withdraw_unexpected(self, wsource: int, msgid: int) -> None:
        """Drop an unmatched message of ``wsource`` whose sender cancelled it."""
        for env in self.matcher.pending_unexpected():
            payload = env.payload
            if payload.kind != SELF and payload.wsource == wsource and payload.msgid == msgid:
                if self.matcher.remove(env):
                    self._reply(wsource, CANCELLED, msgid)
                return

    def on_data(self, frame: bytes, chunk: memoryview | None = None) -> None:
        """A chunk (header ``value`` = offset) of a large message sent through frames.

        The data follows the header in ``frame``, or comes apart as ``chunk``
        (from another host).
        """
        _, _, _, _, _, _, wsource, _, msgid, offset = _unpack_header(frame)
        key = (wsource, msgid)
        op, env, target, got = self._rdv[key]
        if chunk is None:
            chunk = memoryview(frame)[HEADER_SIZE:]
        end = min(offset + chunk.nbytes, target.nbytes)
        if end > offset:
            target[offset:end] = chunk[: end - offset]
        got += chunk.nbytes
        if got < env.nbytes:
            self._rdv[key] = (op, env, target, got)
            return
        del self._rdv[key]
        self._finish_fill(op, target, env.nbytes)
        if self.tracer is not None:
            self.tracer.received(self, op, env, wsource, env.context, env.tag, env.nbytes)
        self._reply(wsource, FIN, msgid)

    def _handle(self, frame: Received) -> None:
        self.progressed += 1
        if type(frame) is tuple:  # a chunk from another host: (header frame, data)
            self.on_data(*frame)
        elif frame[0] == DATA:
            self.on_data(frame)  # type: ignore[arg-type]  # not a tuple: bytes
        else:
            self.on_frame(frame)  # type: ignore[arg-type]

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
                if self.wanted or self.shared.count:  # other threads in MPI
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
                        self._deliver(env, op)
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
            if self.wanted or self.shared.count:  # other threads in MPI: one reads for all
                self._await_queued(queue, context, source, tag)
                return None
            if transport.pending or transport.tcp is not None:
                frame = transport.recv()
            else:  # Transport.recv, inlined: look a few times, then sleep
                spins = SPIN_TRIES
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
        header = _unpack_header(frame)
        op.source = header[4]
        op.tag = header[5]
        op.rsig = header[2]
        self._fill(op, memoryview(frame)[HEADER_SIZE:], header[9])

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
                if self.transport is None or self.wanted or self.shared.count:
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
        self.ledger.end(context, seq)
        return self.matcher.take(context, ANY_SOURCE, seq)

    def _report_mismatch(self, context: int, source: int, tag: int, sig: int) -> None:
        """Rank ``source`` called ``sig`` as collective ``tag`` on ``context``, which
        this rank ran as another call (a message of it came after this rank finished
        it, or the rank asked, ``CHECK``): tell every member, unless that collective
        already failed, or was abandoned."""
        members = self.ledger.members.get(context, [])
        me = members.index(self.rank) if self.rank in members else self.rank
        text = self.ledger.stray_report(context, tag, source, sig, me)
        if text is not None:
            self.notify_mismatch(context, tag, members, text)

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
        context, source, seq = awaiting
        members = self.ledger.members.get(context)
        sig = self.ledger.calls.get((context, seq))
        if members is None or sig is None or self.rank not in members:
            return
        if 0 <= source < len(members) and members[source] != self.rank:
            me = members.index(self.rank)
            header = _pack_header(CHECK, 0, sig, context, me, seq, self.rank, self.pid, 0, 0)
            self._send(members[source], header)

    def _compare_call(self, context: int, source: int, seq: int, sig: int, wsource: int) -> None:
        """Rank ``source`` (world rank ``wsource``) waits in collective ``seq`` on
        ``context``, which it called as ``sig``, for a message of this rank: report a
        mismatch if this rank called another collective there. Nothing when this rank
        has not got there yet (its message will come), called the same, or is not on
        the same communicator as the asker (an intercommunicator's other group)."""
        ledger = self.ledger
        members = ledger.members.get(context)
        if members is None or not 0 <= source < len(members) or members[source] != wsource:
            return
        if seq >= ledger.next.get(context, 0) or self.rank not in members:
            return
        mine = ledger.calls.get((context, seq))
        if mine is not None and mine != sig:
            self._report_mismatch(context, source, seq, sig)

    def fail_collectives(self, context: int, text: str, seq: int) -> None:
        """Record the mismatch of collective ``seq`` on ``context`` (once, however
        many ranks report it) and fail the receives waiting on that context."""
        if not self.ledger.record_mismatch(context, seq, text):
            return
        waiting = self.matcher.pending_posted()
        for recv in [r for r in waiting if r.context == context and r.tag >= seq]:
            self._fail_posted(recv, text)

    def notify_mismatch(self, context: int, seq: int, wranks: list[int], text: str) -> None:
        """Tell every other rank of a communicator that collective ``seq`` failed."""
        if (context, seq) in self.ledger.mismatched:
            return
        data = text.encode()
        header = _pack_header(CERR, 0, 0, context, 0, seq, self.rank, self.pid, 0, len(data))
        for wrank in wranks:
            if wrank != self.rank:
                self._send(wrank, header + data)
        self.fail_collectives(context, text, seq)

    def attach(self, transport: Transport) -> None:
        """Use ``transport`` from now on: a singleton that starts processes gets one."""
        self.transport = transport
        self._send = transport.send
        self._same_host = transport.same_host

    def grow(self, size: int) -> None:
        """Know of ``size`` processes at least: processes started later (``Comm.Spawn``)
        take the next indexes, and are addressed like the first ones."""
        if size > self.size:
            more = size - self.size
            self.sent.extend([0] * more)
            self.arrived.extend([0] * more)
            self.size = size

    # -- a rank that died -------------------------------------------------------
    def fail_peer(self, wrank: int, reason: str) -> None:
        """World rank ``wrank`` has died: fail everything that waits on it.

        Receives posted for it, sends it has not acknowledged, and collectives
        in progress on communicators it belongs to complete with ERR_OTHER, so
        that no rank hangs on a dead one. (Later calls naming it are left to
        the controller's stuck-cell rule.)
        """
        text = f"rank {wrank} has died ({reason})" if reason else f"rank {wrank} has died"
        self.dead_peers[wrank] = text

        def involves(op: Any) -> bool:
            impl = getattr(op.comm, "_impl", op.comm)
            ranks = getattr(impl, "remote_world_ranks", None)
            return ranks is not None and 0 <= op.peer < len(ranks) and ranks[op.peer] == wrank

        dying = self.ledger.running_with(wrank)  # its communicators' running collectives
        for recv in self.matcher.pending_posted():
            op = recv.handle
            if op is None:
                continue
            in_collective = any(recv.context == c and recv.tag >= seq for c, seq in dying)
            if in_collective or (recv.context % 2 == 0 and involves(op)):
                self._fail_posted(recv, text, peer_died=True)
        for msgid, op in list(self._sends.items()):
            if involves(op):
                del self._sends[msgid]
                op.fail(ERR_OTHER, text, peer_died=True)

    def _fail_posted(self, recv: PostedReceive, text: str, peer_died: bool = False) -> None:
        """Withdraw posted receive ``recv`` and fail its operation with ERR_OTHER
        (nothing when it was matched meanwhile)."""
        if self.matcher.cancel(recv):
            op = recv.handle
            op.posted = None
            op.fail(ERR_OTHER, text, peer_died)

    def note_peer_exit(self, wrank: int, reason: str) -> None:
        """From any thread: tell whoever drives the data socket that ``wrank`` died."""
        if self.transport is None:
            return
        header = _pack_header(PEER_DEAD, 0, 0, 0, 0, 0, self.rank, self.pid, 0, wrank)
        self.transport.send_to_self(header + reason.encode())

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
        for context, base in bases.items():
            base = self.ledger.restart_at(context, base)
            for env in [e for e in self.matcher.pending_unexpected() if e.context == context]:
                if env.tag < base and self.matcher.remove(env):
                    payload = env.payload
                    if payload.kind == RTS:  # release the sender
                        self._reply(payload.wsource, FIN, payload.msgid)
            for recv in [r for r in self.matcher.pending_posted() if r.context == context]:
                if recv.tag < base:
                    self._fail_posted(recv, ABANDONED)
        for coll in list(self.colls):
            if coll.context in bases:
                self.colls.remove(coll)
                coll.fail(ERR_OTHER, ABANDONED)

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
        return len(self._sends)

    def unanswered_sends(self) -> list[Operation]:
        """The sends that wait for their receiver's answer (synchronous or large ones)."""
        return list(self._sends.values())

    def operations(self) -> list[Any]:
        """Every operation in progress on this rank: posted receives, sends waiting for
        an answer, large messages arriving in chunks, nonblocking collectives."""
        ops: list[Any] = [recv.handle for recv in self.matcher.pending_posted()]
        ops += self._sends.values()
        ops += [entry[0] for entry in self._rdv.values()]
        ops += self.colls
        return ops

    def statistics(self) -> dict[str, Any]:
        stats = self.matcher.statistics()
        return {
            "posted_receives": stats.posted,
            "unexpected_messages": stats.unexpected,
            "sends_in_flight": len(self._sends),
            "progressed": self.progressed,
        }


def _everywhere(wrank: int) -> bool:
    return True


def _unknown_wait() -> WaitInfo:
    return WaitInfo("wait", "", -1, -1)
