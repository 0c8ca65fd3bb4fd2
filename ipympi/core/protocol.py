"""The point-to-point protocol between ranks, sans-I/O: frames in, actions out.

:class:`PeerProtocol` holds one rank's side of the protocol of ``core.wire``: the
matcher (posted receives, unexpected messages), the sends waiting for their
receiver's answer, the large messages arriving in ``DATA`` frames, the collective
ledger, the ranks known dead. The progress engine feeds it every frame it reads
(:meth:`PeerProtocol.receive`, :meth:`PeerProtocol.receive_data`) and the calls of
the program (:meth:`PeerProtocol.start_send`, :meth:`PeerProtocol.start_recv`, ...);
the protocol completes or fails operations itself, and leaves in :attr:`actions` what
needs the world outside, for the engine to perform in order:

* :class:`Send`: send a frame to a world rank (answers: ``ACK``, ``FIN``, ``CTS``,
  ``CANCEL``, ``CANCELLED``; mismatch reports, ``CERR``; questions, ``CHECK``);
* :class:`SendData`: send a large message's bytes in ``DATA`` frames (the receiver
  answered ``CTS``: it cannot read the sender's memory);
* :class:`Fetch`: read a large message (or the receiver's part of it) straight from
  the sender's memory into a receive's target, then tell :meth:`PeerProtocol.fetched`
  whether that worked (else the protocol asks for ``DATA`` frames);
* :class:`Put`: write the sender's part of a large message into its receiver's memory
  (the receiver asked, ``PUT``), then tell :meth:`PeerProtocol.put_done`;
* :class:`TraceArrived` and :class:`TraceReceived`: for the message recorder, only
  while :attr:`PeerProtocol.tracing` is on.

A send's first frame is the return value of :meth:`PeerProtocol.start_send` (the hot
path: one frame, no action list). Operations are duck-typed: anything with the fields
and the ``complete``/``fail``/``complete_cancelled``/``complete_send`` methods of
``progress.operation.Operation``. Nothing here reads a socket, a clock or another
process's memory, so every frame kind and race is testable without processes.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from .arrival import SELF, Arrival, SelfMessage
from .constants import ANY_SOURCE
from .contexts import is_collective
from .errors import ERR_OTHER, ERR_TRUNCATE
from .errors import Exception as MPIException
from .ledger import Ledger
from .matching import Envelope, Matcher, PostedReceive
from .wire import (
    ACK,
    CANCEL,
    CANCELLED,
    CERR,
    CHECK,
    CTS,
    DATA,
    EAGER,
    FIN,
    FOREIGN_BASE,
    HEADER,
    HEADER_SIZE,
    HELPS,
    PEER_DEAD,
    PUT,
    PUT_DONE,
    RTS,
    RTS_EXTRA,
    SYNC,
    WAKE,
)

__all__ = [
    "ABANDONED",
    "EAGER_LIMIT",
    "SPLIT_MIN",
    "Fetch",
    "PeerProtocol",
    "Put",
    "Send",
    "SendData",
    "TraceArrived",
    "TraceReceived",
]

# Messages up to this size travel in one frame with their header.
EAGER_LIMIT = 64 * 1024
# From this size, a sender that offers (``HELPS``) writes half of its message into the
# receiver's memory while the receiver reads the other half: two messages more (PUT,
# PUT_DONE), half the copy on the receiver's side.
SPLIT_MIN = 512 * 1024

ABANDONED = "collective abandoned after an interrupt"

_pack = HEADER.pack
_unpack = HEADER.unpack_from
_pack_address = RTS_EXTRA.pack


# -- actions: what the protocol leaves for the engine -------------------------------------
class Send:
    """Send ``frame`` to world rank ``wdest``."""

    __slots__ = ("frame", "wdest")

    def __init__(self, wdest: int, frame: bytes) -> None:
        self.wdest = wdest
        self.frame = frame


class SendData:
    """Send ``mem``, the bytes of message ``msgid``, to ``wdest`` in DATA frames
    (:meth:`PeerProtocol.data_header` makes each frame's header)."""

    __slots__ = ("mem", "msgid", "wdest")

    def __init__(self, wdest: int, msgid: int, mem: memoryview) -> None:
        self.wdest = wdest
        self.msgid = msgid
        self.mem = mem


class Fetch:
    """Read the large message of ``env`` (announced by world rank
    ``env.payload.wsource``, process ``env.payload.pid``) from ``address`` in the
    sender's memory into ``target``, for receive ``op``; then call
    :meth:`PeerProtocol.fetched`."""

    __slots__ = ("address", "env", "op", "target")

    def __init__(self, op: Any, env: Envelope, target: memoryview, address: int) -> None:
        self.op = op
        self.env = env
        self.target = target
        self.address = address


class Put:
    """Write ``nbytes`` bytes at ``local`` (the sender's part of message ``msgid``) to
    ``remote`` in the memory of process ``pid``, world rank ``wdest``, its receiver;
    then call :meth:`PeerProtocol.put_done`."""

    __slots__ = ("local", "msgid", "nbytes", "pid", "remote", "wdest")

    def __init__(
        self, wdest: int, pid: int, remote: int, local: int, nbytes: int, msgid: int
    ) -> None:
        self.wdest = wdest
        self.pid = pid
        self.remote = remote
        self.local = local
        self.nbytes = nbytes
        self.msgid = msgid


class _Split:
    """A large message copied in two parts at once: the receiver reads bytes
    ``[0, cut)`` from the sender's memory at ``address`` while the sender writes the
    rest into ``target``. ``pending``: the parts not copied yet; ``unread``: whether a
    read failed (then the sender sends it all in DATA frames, once it has answered)."""

    __slots__ = ("address", "cut", "env", "op", "pending", "target", "unread")

    def __init__(self, op: Any, env: Envelope, target: memoryview, address: int, cut: int):
        self.op = op
        self.env = env
        self.target = target
        self.address = address
        self.cut = cut
        self.pending = 2
        self.unread = False


class TraceArrived:
    """Record that ``env`` arrived before its receive was posted."""

    __slots__ = ("env",)

    def __init__(self, env: Envelope) -> None:
        self.env = env


class TraceReceived:
    """Record that receive ``op`` got its message (``env``, or None when it was not
    queued) from world rank ``wsource``."""

    __slots__ = ("context", "env", "nbytes", "op", "tag", "wsource")

    def __init__(
        self, op: Any, env: Envelope | None, wsource: int, context: int, tag: int, nbytes: int
    ) -> None:
        self.op = op
        self.env = env
        self.wsource = wsource
        self.context = context
        self.tag = tag
        self.nbytes = nbytes


Action = Send | SendData | Fetch | Put | TraceArrived | TraceReceived


class PeerProtocol:
    """One rank's side of the protocol (see the module docstring)."""

    def __init__(
        self, rank: int, size: int, pid: int, address_of: Callable[[memoryview], int]
    ) -> None:
        self.rank = rank
        self.size = size
        self.pid = pid
        # The address of a buffer's first byte, which an RTS gives the receiver to read
        # it from (``progress.largebuf.buffer_address``).
        self.address_of = address_of
        self.matcher = Matcher(exact=is_collective)
        self.ledger = Ledger()
        self.actions: list[Action] = []
        self.tracing = False  # leave TRACE_* actions (the engine's tracer is on)
        self._msgids = itertools.count(1)
        self.sends: dict[int, Any] = {}  # msgid -> send waiting for ACK/FIN/CANCELLED
        # (wsource, msgid) -> (recv, envelope, target, bytes so far): large messages
        # arriving in DATA frames
        self.rdv: dict[tuple[int, int], tuple[Any, Envelope, memoryview, int]] = {}
        # (wsource, msgid) -> large messages being copied in two parts (PUT)
        self.splits: dict[tuple[int, int], _Split] = {}
        self.dead_peers: dict[int, str] = {}  # world rank -> why it is gone
        # Point-to-point messages (even contexts) sent to and arrived from each world
        # rank, ever: a cell's leftovers show as a difference between two ranks' counts.
        self.sent = [0] * size
        self.arrived = [0] * size

    def grow(self, size: int) -> None:
        """Know of ``size`` processes at least (processes started later take the next
        indexes, and are addressed like the first ones)."""
        if size > self.size:
            more = size - self.size
            self.sent.extend([0] * more)
            self.arrived.extend([0] * more)
            self.size = size

    def _reply(self, wdest: int, kind: int, msgid: int, value: int = 0) -> None:
        frame = _pack(kind, 0, 0, 0, 0, 0, self.rank, self.pid, msgid, value)
        self.actions.append(Send(wdest, frame))

    def count_sent(self, wdest: int, context: int) -> None:
        """Count a point-to-point message (even ``context``) to world rank ``wdest``."""
        if not context & 1 and wdest < FOREIGN_BASE:  # (other jobs' processes: not counted)
            try:
                self.sent[wdest] += 1
            except IndexError:  # a process this one did not know of (spawned)
                self.grow(wdest + 1)
                self.sent[wdest] += 1

    # -- sending -------------------------------------------------------------------------
    def start_send(
        self,
        op: Any,
        mem: memoryview | bytes,
        wdest: int,
        context: int,
        source: int,
        tag: int,
        sync: bool,
        sig: int = 0,
        helps: bool = False,
    ) -> bytes:
        """The frame that starts sending ``mem`` to another rank, ``wdest``: the whole
        message (eager) or its announcement (RTS, ``mem`` must stay alive until the
        answer). ``op`` completes now (a standard eager send) or on the answer.
        ``helps``: the sender can write part of a large message into the receiver's
        memory, and will be there to do it (it waits for this send; see ``PUT``)."""
        nbytes = mem.nbytes if type(mem) is memoryview else len(mem)
        msgid = next(self._msgids)
        op.msgid = msgid
        self.count_sent(wdest, context)
        flags = SYNC if sync else 0
        if nbytes <= EAGER_LIMIT:
            header = _pack(
                EAGER, flags, sig, context, source, tag, self.rank, self.pid, msgid, nbytes
            )
            if sync:
                op.send_context = context
                self.sends[msgid] = op
            else:
                op.complete()
            return header + mem
        if type(mem) is not memoryview:
            mem = memoryview(mem)
        op.mem = mem  # keeps the buffer alive until FIN
        op.send_context = context
        self.sends[msgid] = op
        if helps and nbytes >= SPLIT_MIN:
            flags |= HELPS
        return _pack(
            RTS, flags, sig, context, source, tag, self.rank, self.pid, msgid, nbytes
        ) + _pack_address(self.address_of(mem))

    def send_to_self(
        self, op: Any, data: bytes, context: int, source: int, tag: int, sync: bool, sig: int
    ) -> None:
        """A message from this rank to itself: always copied, never a rendezvous, so
        that a blocking send to oneself cannot hang; a synchronous one completes when
        it is received."""
        env = Envelope(
            context, source, tag, len(data), SelfMessage(data, op if sync else None, sig)
        )
        if not sync:
            op.complete()
        if self.tracing:
            self.actions.append(TraceArrived(env))
        recv = self.matcher.arrive(env)
        if recv is not None:
            self.deliver(env, recv.handle)

    def cancel_send(self, op: Any, wdest: int) -> None:
        """Ask the receiver to drop a send still waiting for it; the answer (CANCELLED,
        or the usual ACK/FIN when it was matched meanwhile) completes ``op``."""
        if wdest == self.rank:
            for env in self.matcher.pending_unexpected():
                payload = env.payload
                if payload.kind == SELF and payload.sender is op and self.matcher.remove(env):
                    op.complete_cancelled()
                    return
        elif op.msgid in self.sends:
            self._reply(wdest, CANCEL, op.msgid)

    def drop_p2p_sends(self) -> list[Any]:
        """Forget the point-to-point sends still waiting for their receiver (a failed
        cell's leftovers): they complete as cancelled."""
        dropped = []
        for msgid, op in list(self.sends.items()):
            if op.send_context >= 0 and not op.send_context & 1:
                del self.sends[msgid]
                op.complete_send(cancelled=True)
                dropped.append(op)
        return dropped

    # -- receiving -----------------------------------------------------------------------
    def start_recv(self, op: Any, context: int, source: int, tag: int) -> None:
        """Post a receive; it may complete at once from the unexpected messages."""
        env = self.matcher.take(context, source, tag)
        if env is not None:
            self.deliver(env, op)
            return
        posted = PostedReceive(context, source, tag, op)
        self.matcher.enqueue(posted)
        op.posted = posted

    def withdraw(self, op: Any) -> bool:
        """Take back a posted, unmatched receive (cancel or interrupt)."""
        if op.posted is not None and self.matcher.cancel(op.posted):
            op.posted = None
            return True
        return False

    def deliver(self, env: Envelope, op: Any) -> None:
        """Move a matched message's data into the receive ``op``."""
        op.posted = None
        op.source = env.source
        op.tag = env.tag
        payload = env.payload
        kind = payload.kind
        if kind == SELF:
            op.rsig = payload.sig
            self.fill(op, memoryview(payload.data), env.nbytes)
            if self.tracing:
                self.actions.append(
                    TraceReceived(op, env, self.rank, env.context, env.tag, env.nbytes)
                )
            if payload.sender is not None:
                payload.sender.complete()
            return
        frame = payload.frame
        wsource = payload.wsource
        op.rsig = frame[2] | frame[3] << 8  # wire.signature_of, inlined
        if kind == EAGER:
            self.fill(op, memoryview(frame)[HEADER_SIZE:], env.nbytes)
            if self.tracing:
                self.actions.append(
                    TraceReceived(op, env, wsource, env.context, env.tag, env.nbytes)
                )
            if payload.flags & SYNC:
                self._reply(wsource, ACK, payload.msgid)
            return
        # RTS: read the sender's buffer directly if the engine can, or ask for the data;
        # a sender that helps writes the second half meanwhile.
        (address,) = RTS_EXTRA.unpack_from(frame, HEADER_SIZE)
        target = self._target(op, env.nbytes)
        if payload.flags & HELPS and target.nbytes == env.nbytes:
            cut = env.nbytes // 2
            self.splits[(wsource, payload.msgid)] = _Split(op, env, target, address, cut)
            put = _pack(PUT, 0, 0, 0, 0, 0, self.rank, self.pid, payload.msgid, cut)
            self.actions.append(Send(wsource, put + _pack_address(self.address_of(target))))
            self.actions.append(Fetch(op, env, target[:cut], address))
            return
        self.actions.append(Fetch(op, env, target, address))

    def fetched(self, op: Any, env: Envelope, target: memoryview, read: bool) -> None:
        """The answer to a ``FETCH``: whether the message's bytes (this receiver's part
        of them, when copied in two parts) are in ``target``."""
        payload = env.payload
        key = (payload.wsource, payload.msgid)
        split = self.splits.get(key)
        if split is not None:
            split.unread = split.unread or not read
            self._part_copied(key, split)
        elif read:
            self._finish_fill(op, target, env.nbytes)
            if self.tracing:
                self.actions.append(
                    TraceReceived(op, env, payload.wsource, env.context, env.tag, env.nbytes)
                )
            self._reply(payload.wsource, FIN, payload.msgid)
        else:
            self.rdv[key] = (op, env, target, 0)
            self._reply(payload.wsource, CTS, payload.msgid)

    def _part_copied(self, key: tuple[int, int], split: _Split) -> None:
        """One part of a message copied in two parts has been (or could not be) copied;
        once both have, the receive completes (FIN), or asks for the data (CTS)."""
        split.pending -= 1
        if split.pending:
            return
        del self.splits[key]
        # as one whole read, now: a part unread asks for the whole message in DATA frames
        self.fetched(split.op, split.env, split.target, not split.unread)

    def put_done(self, wdest: int, msgid: int, written: bool) -> None:
        """The answer to a :class:`Put` (this rank sends message ``msgid``)."""
        self._reply(wdest, PUT_DONE, msgid, int(written))

    def _put_answered(self, key: tuple[int, int], written: bool) -> None:
        """The sender of a message copied in two parts has written its part, or could
        not: then this receiver reads it too."""
        split = self.splits.get(key)
        if split is None:  # failed meanwhile (its sender died)
            return
        if written or split.unread:
            self._part_copied(key, split)
            return
        cut = split.cut
        self.actions.append(Fetch(split.op, split.env, split.target[cut:], split.address + cut))

    def fill_from_frame(self, op: Any, frame: bytes) -> None:
        """Complete receive ``op`` with an eager frame taken off the socket for it."""
        header = _unpack(frame)
        op.source = header[4]
        op.tag = header[5]
        op.rsig = header[2]
        self.fill(op, memoryview(frame)[HEADER_SIZE:], header[9])

    def _target(self, op: Any, nbytes: int) -> memoryview:
        """Where a message of ``nbytes`` goes: the user's buffer, or new bytes."""
        if op.mem is None:
            op.data = bytearray(nbytes)
            return memoryview(op.data)
        if nbytes >= op.mem.nbytes:
            return op.mem
        return op.mem[:nbytes]

    def _finish_fill(self, op: Any, target: memoryview, nbytes: int) -> None:
        op.count = target.nbytes
        if nbytes > target.nbytes:
            op.fail(
                ERR_TRUNCATE,
                f"message of {nbytes} bytes from rank {op.source} (tag {op.tag}) "
                f"does not fit in a receive buffer of {target.nbytes} bytes",
            )
        else:
            op.complete()

    def fill(self, op: Any, data: memoryview, nbytes: int) -> None:
        """Complete receive ``op`` with a message's bytes ``data`` (``nbytes`` long)."""
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

    # -- incoming frames -----------------------------------------------------------------
    def receive(self, frame: bytes) -> None:
        """Handle one frame from another rank (or this rank's own PEER_DEAD and WAKE)."""
        kind, flags, sig, context, source, tag, wsource, pid, msgid, value = _unpack(frame)
        if context & 1 and kind <= RTS and self.ledger.is_stray(context, tag):
            self.report_mismatch(context, source, tag, sig)
            if kind == RTS:
                self._reply(wsource, FIN, msgid)  # release the sender's buffer
            return
        if kind <= RTS and not context & 1 and wsource < FOREIGN_BASE:
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
                if self.tracing:
                    self.actions.append(TraceArrived(env))
                return
            op = recv.handle
            op.posted = None
            op.source = source
            op.tag = tag
            op.rsig = sig
            self.fill(op, memoryview(frame)[HEADER_SIZE:], value)
            if self.tracing:
                self.actions.append(TraceReceived(op, None, wsource, context, tag, value))
            if flags & SYNC:
                self._reply(wsource, ACK, msgid)
        elif kind == RTS:
            env = Envelope(
                context, source, tag, value, Arrival(frame, kind, flags, wsource, pid, msgid)
            )
            if self.tracing:
                self.actions.append(TraceArrived(env))
            recv = self.matcher.arrive(env)
            if recv is not None:
                self.deliver(env, recv.handle)
        elif kind in (ACK, FIN):
            op = self.sends.pop(msgid, None)
            if op is not None:
                op.complete_send()
        elif kind == CTS:
            op = self.sends.get(msgid)
            if op is not None and op.mem is not None:
                self.actions.append(SendData(wsource, msgid, op.mem))
        elif kind == PUT:
            op = self.sends.get(msgid)
            if op is None or op.mem is None:
                self._reply(wsource, PUT_DONE, msgid, 0)
            else:
                (remote,) = RTS_EXTRA.unpack_from(frame, HEADER_SIZE)
                local = self.address_of(op.mem)
                nbytes = op.mem.nbytes - value
                self.actions.append(Put(wsource, pid, remote + value, local + value, nbytes, msgid))
        elif kind == PUT_DONE:
            self._put_answered((wsource, msgid), bool(value))
        elif kind == CANCEL:
            self._withdraw_unexpected(wsource, msgid)
        elif kind == CANCELLED:
            op = self.sends.pop(msgid, None)
            if op is not None:
                op.complete_send(cancelled=True)
        elif kind == CERR:
            self.fail_collectives(context, _text(frame), tag)
        elif kind == PEER_DEAD:
            self.fail_peer(value, _text(frame))
        elif kind == CHECK:
            self._compare_call(context, source, tag, sig, wsource)
        elif kind != WAKE:  # a WAKE only woke the thread reading the socket
            raise MPIException(ERR_OTHER, f"unknown frame kind {kind} from rank {wsource}")

    def receive_data(self, frame: bytes, chunk: memoryview | None = None) -> None:
        """A chunk (header ``value`` = offset) of a large message sent in DATA frames:
        after the header in ``frame``, or apart as ``chunk`` (from another host)."""
        header = _unpack(frame)
        wsource, msgid, offset = header[6], header[8], header[9]
        key = (wsource, msgid)
        entry = self.rdv.get(key)
        if entry is None:
            raise MPIException(ERR_OTHER, f"DATA of unknown message {msgid} from rank {wsource}")
        op, env, target, got = entry
        if chunk is None:
            chunk = memoryview(frame)[HEADER_SIZE:]
        end = min(offset + chunk.nbytes, target.nbytes)
        if end > offset:
            target[offset:end] = chunk[: end - offset]
        got += chunk.nbytes
        if got < env.nbytes:
            self.rdv[key] = (op, env, target, got)
            return
        del self.rdv[key]
        self._finish_fill(op, target, env.nbytes)
        if self.tracing:
            self.actions.append(TraceReceived(op, env, wsource, env.context, env.tag, env.nbytes))
        self._reply(wsource, FIN, msgid)

    def data_header(self, msgid: int, offset: int) -> bytes:
        """The header of the DATA frame carrying message ``msgid``'s bytes from ``offset``."""
        return _pack(DATA, 0, 0, 0, 0, 0, self.rank, self.pid, msgid, offset)

    def _withdraw_unexpected(self, wsource: int, msgid: int) -> None:
        """Drop an unmatched message of ``wsource`` whose sender cancelled it."""
        for env in self.matcher.pending_unexpected():
            payload = env.payload
            if payload.kind != SELF and payload.wsource == wsource and payload.msgid == msgid:
                if self.matcher.remove(env):
                    self._reply(wsource, CANCELLED, msgid)
                return

    # -- collectives: mismatches -----------------------------------------------------------
    def report_mismatch(self, context: int, source: int, tag: int, sig: int) -> None:
        """Rank ``source`` called ``sig`` as collective ``tag`` on ``context``, which
        this rank ran as another call: tell every member, unless that collective
        already failed, or was abandoned."""
        members = self.ledger.members.get(context, [])
        me = members.index(self.rank) if self.rank in members else self.rank
        text = self.ledger.stray_report(context, tag, source, sig, me)
        if text is not None:
            self.notify_mismatch(context, tag, members, text)

    def ask(self, context: int, source: int, seq: int) -> None:
        """A blocking receive of collective ``seq`` on ``context`` waits long for rank
        ``source``: ask it whether it called the same collective (``CHECK``)."""
        members = self.ledger.members.get(context)
        sig = self.ledger.calls.get((context, seq))
        if members is None or sig is None or self.rank not in members:
            return
        if 0 <= source < len(members) and members[source] != self.rank:
            me = members.index(self.rank)
            frame = _pack(CHECK, 0, sig, context, me, seq, self.rank, self.pid, 0, 0)
            self.actions.append(Send(members[source], frame))

    def _compare_call(self, context: int, source: int, seq: int, sig: int, wsource: int) -> None:
        """Rank ``source`` (world rank ``wsource``) waits in collective ``seq`` on
        ``context``, called as ``sig``, for a message of this rank: report a mismatch if
        this rank called another collective there (nothing when it has not got there
        yet, called the same, or is not on the asker's side of the communicator)."""
        ledger = self.ledger
        members = ledger.members.get(context)
        if members is None or not 0 <= source < len(members) or members[source] != wsource:
            return
        if seq >= ledger.next.get(context, 0) or self.rank not in members:
            return
        mine = ledger.calls.get((context, seq))
        if mine is not None and mine != sig:
            self.report_mismatch(context, source, seq, sig)

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
        header = _pack(CERR, 0, 0, context, 0, seq, self.rank, self.pid, 0, len(data))
        for wrank in wranks:
            if wrank != self.rank:
                self.actions.append(Send(wrank, header + data))
        self.fail_collectives(context, text, seq)

    def end_collective(self, context: int, seq: int) -> Envelope | None:
        """Mark collective ``seq`` finished; return a leftover message of it, if any
        (in a correct collective every message sent to a rank is received within the
        call, so a leftover means the ranks called different ones)."""
        self.ledger.end(context, seq)
        return self.matcher.take(context, ANY_SOURCE, seq)

    def abandon_collective(self, context: int, seq: int, taken: Envelope | None = None) -> None:
        """Collective ``seq`` on ``context`` failed here: end it and drop the messages
        of it still queued (with ``taken``, one already taken off the queue), releasing
        each large one's sender, which would otherwise wait for this rank forever.
        Messages of it that arrive later are strays, released as they come."""
        self.ledger.end(context, seq)
        queued = [e for e in self.matcher.pending_unexpected() if e.context == context]
        dropped = [e for e in queued if e.tag == seq and self.matcher.remove(e)]
        for env in dropped if taken is None else [*dropped, taken]:
            payload = env.payload
            if payload.kind == RTS:
                self._reply(payload.wsource, FIN, payload.msgid)

    def resynchronize(self, bases: dict[int, int]) -> None:
        """Make ``bases[context]`` the next collective sequence number of each context:
        queued and posted collective traffic below it is discarded (a rendezvous
        sender is released, a posted receive fails)."""
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

    # -- a rank that died ------------------------------------------------------------------
    def fail_peer(self, wrank: int, reason: str) -> None:
        """World rank ``wrank`` has died: receives posted for it, sends it has not
        answered, and receives of collectives in progress on communicators it belongs
        to fail with ERR_OTHER, so that no rank waits on a dead one."""
        who = f"rank {wrank}" if wrank < FOREIGN_BASE else "a process of another job"
        text = f"{who} has died ({reason})" if reason else f"{who} has died"
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
        for msgid, op in list(self.sends.items()):
            if involves(op):
                del self.sends[msgid]
                op.fail(ERR_OTHER, text, peer_died=True)
        for key in [key for key in self.splits if key[0] == wrank]:
            self.splits.pop(key).op.fail(ERR_OTHER, text, peer_died=True)

    def _fail_posted(self, recv: PostedReceive, text: str, peer_died: bool = False) -> None:
        """Withdraw posted receive ``recv`` and fail its operation with ERR_OTHER
        (nothing when it was matched meanwhile)."""
        if self.matcher.cancel(recv):
            op = recv.handle
            op.posted = None
            op.fail(ERR_OTHER, text, peer_died)

    # -- observing -------------------------------------------------------------------------
    def operations(self) -> list[Any]:
        """The operations in progress: posted receives, sends waiting for an answer,
        large messages arriving in chunks or being copied in two parts."""
        ops: list[Any] = [recv.handle for recv in self.matcher.pending_posted()]
        ops += self.sends.values()
        ops += [entry[0] for entry in self.rdv.values()]
        ops += [split.op for split in self.splits.values()]
        return ops


def _text(frame: bytes) -> str:
    """The UTF-8 text after a frame's header (CERR, PEER_DEAD)."""
    return bytes(frame[HEADER_SIZE:]).decode(errors="replace")
