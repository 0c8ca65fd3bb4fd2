"""The progress engine of one rank: matching, data movement and waiting.

The engine ties the pure :class:`~ipympi._matching.Matcher` to the sockets of
:class:`~ipympi._transport.Transport`. One lock guards the matcher, the sockets
and every :class:`~ipympi._ops.Op`; whoever holds it *drives* the data socket:

* a thread inside an MPI call holds it and, when it must wait, blocks in the
  data socket's ``recv`` itself (no thread hand-off: latency stays at raw zmq's);
* while no thread is inside MPI for more than ~2 ms, the progress thread
  (``_progress``) takes it and keeps matching and moving data, so a posted
  receive is satisfied and a synchronous or large send completes while the
  user computes. A thread entering MPI rings the doorbell to take it back.

Small messages travel eagerly in one frame. Large ones are announced (RTS) and
read by the receiver straight from the sender's memory (``_largebuf``), with a
zero-copy zmq fallback. See ``_wire`` for the frame layout.

Every blocking wait is interruptible (Ctrl-C raises ``KeyboardInterrupt``; the
posted receive is withdrawn) and observable: :attr:`Engine.waiting` says what
the rank is blocked on, for hang reports.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any, Callable

import zmq

from . import _wire as wire
from ._errors import ERR_OTHER, ERR_TRUNCATE
from ._errors import Exception as MPIException
from ._largebuf import VmReader, buffer_address
from ._matching import Envelope, Matcher, PostedReceive
from ._ops import Op
from ._transport import Transport

__all__ = ["EAGER_LIMIT", "Engine", "WaitInfo"]

# Messages up to this size travel in one frame with their header.
EAGER_LIMIT = 64 * 1024

# The progress thread takes over once no thread has been in MPI this long (s).
IDLE_HANDOFF = 0.002


class WaitInfo:
    """What a rank is blocked on: for hang reports and the controller."""

    __slots__ = ("call", "comm", "peer", "since", "tag")

    def __init__(self, call: str, comm: str, peer: int, tag: int) -> None:
        self.call = call
        self.comm = comm
        self.peer = peer
        self.tag = tag
        self.since = time.monotonic()

    def as_dict(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "comm": self.comm,
            "peer": self.peer,
            "tag": self.tag,
            "since": round(time.monotonic() - self.since, 3),
        }


class Engine:
    """Matching, sending, receiving and waiting for one rank."""

    def __init__(self, rank: int, size: int, transport: Transport | None) -> None:
        self.rank = rank
        self.size = size
        self.pid = os.getpid()
        self.transport = transport
        self.matcher = Matcher()
        self.lock = threading.RLock()
        self.vm = VmReader()
        self._msgids = itertools.count(1)
        self._sends: dict[int, Op] = {}  # msgid -> send waiting for ACK/FIN
        self._rdv: dict[tuple[int, int], tuple[Op, Envelope]] = {}  # (wsrc, msgid) -> recv
        self.waiting: WaitInfo | None = None
        self.depth = 0  # threads inside MPI calls
        self.wanted = 0  # threads waiting to enter
        self.last_exit = 0.0
        self.progress: Any = None  # the ProgressThread, once started
        self.finalized = False

    # -- entering and leaving MPI --------------------------------------------
    def enter(self) -> None:
        """Take the engine for an MPI call (from the progress thread if needed)."""
        self.wanted += 1
        if not self.lock.acquire(False):
            if self.transport is not None:
                self.transport.ring()
            self.lock.acquire()
        self.wanted -= 1
        self.depth += 1

    def leave(self) -> None:
        self.depth -= 1
        self.last_exit = time.monotonic()
        self.lock.release()

    # -- sending -------------------------------------------------------------
    def start_send(
        self,
        op: Op,
        mem: memoryview | bytes,
        wdest: int,
        context: int,
        source: int,
        tag: int,
        sync: bool,
        keep: Any = None,
    ) -> None:
        """Start sending ``mem`` to world rank ``wdest``; completes ``op`` when allowed.

        ``source`` is this rank's rank in the communicator. The caller holds the
        engine and has validated arguments.
        """
        nbytes = len(mem) if isinstance(mem, bytes) else mem.nbytes
        flags = wire.SYNC if sync else 0
        if wdest == self.rank:
            self._send_to_self(op, bytes(mem), context, source, tag, sync)
            return
        assert self.transport is not None
        msgid = next(self._msgids)
        op.msgid = msgid
        if nbytes <= EAGER_LIMIT:
            header = wire.HEADER.pack(
                wire.EAGER, flags, context, source, tag, self.rank, self.pid, msgid, nbytes
            )
            self.transport.send(wdest, header + mem)
            if sync:
                self._sends[msgid] = op
            else:
                op.done = True
            return
        # Large: announce it; the receiver reads our buffer and answers FIN.
        if isinstance(mem, bytes):
            mem = memoryview(mem)
        op.mem = mem  # type: ignore[assignment]
        op.keep = keep
        header = wire.HEADER.pack(
            wire.RTS, flags, context, source, tag, self.rank, self.pid, msgid, nbytes
        ) + wire.RTS_EXTRA.pack(buffer_address(mem))
        self._sends[msgid] = op
        self.transport.send(wdest, header)

    def _send_to_self(
        self, op: Op, data: bytes, context: int, source: int, tag: int, sync: bool
    ) -> None:
        env = Envelope(context, source, tag, len(data), ("self", data, op if sync else None))
        if not sync:
            op.done = True
        recv = self.matcher.arrive(env)
        if recv is not None:
            self._deliver(env, recv.handle)

    # -- receiving -----------------------------------------------------------
    def start_recv(self, op: Op, context: int, source: int, tag: int) -> None:
        """Post a receive; it may complete at once from the unexpected queue."""
        posted = PostedReceive(context, source, tag, op)
        env = self.matcher.post(posted)
        if env is None:
            op.posted = posted
        else:
            self._deliver(env, op)

    def withdraw(self, op: Op) -> bool:
        """Take back a posted, unmatched receive (cancel or interrupt)."""
        if op.posted is not None and self.matcher.cancel(op.posted):
            op.posted = None
            return True
        return False

    def receive_matched(self, env: Envelope, op: Op) -> None:
        """Receive a message already taken off the queue by a matched probe."""
        self._deliver(env, op)

    def _deliver(self, env: Envelope, op: Op) -> None:
        """Move a matched message's data into the receive ``op``."""
        op.posted = None
        op.source = env.source
        op.tag = env.tag
        payload = env.payload
        origin = payload[0]
        if origin == "self":
            _, data, sender = payload
            self._fill(op, memoryview(data), env.nbytes)
            if sender is not None:
                sender.done = True
            return
        frame, h = payload
        if h.kind == wire.EAGER:
            self._fill(op, memoryview(frame)[wire.HEADER_SIZE :], env.nbytes)
            if h.flags & wire.SYNC:
                self._reply(h, wire.ACK)
            return
        # RTS: read the sender's buffer directly, or ask for the data.
        target = self._target(op, env.nbytes)
        (address,) = wire.RTS_EXTRA.unpack_from(frame, wire.HEADER_SIZE)
        if self.vm.read(h.pid, address, target):
            self._finish_fill(op, target, env.nbytes)
            self._reply(h, wire.FIN)
        else:
            self._rdv[(h.wsource, h.msgid)] = (op, env)
            self._reply(h, wire.CTS)

    def _target(self, op: Op, nbytes: int) -> memoryview:
        """Where a message of ``nbytes`` goes: the user's buffer, or new bytes."""
        if op.mem is None:
            op.data = bytearray(nbytes)
            return memoryview(op.data)
        if nbytes > op.mem.nbytes:
            return op.mem
        return op.mem[:nbytes]

    def _finish_fill(self, op: Op, target: memoryview, nbytes: int) -> None:
        op.count = target.nbytes
        if nbytes > target.nbytes:
            op.error = ERR_TRUNCATE
            op.error_detail = (
                f"message of {nbytes} bytes from rank {op.source} (tag {op.tag}) "
                f"does not fit in a receive buffer of {target.nbytes} bytes"
            )
        op.done = True

    def _fill(self, op: Op, data: memoryview, nbytes: int) -> None:
        if op.mem is None:
            op.data = data
            op.count = nbytes
            op.done = True
            return
        n = min(nbytes, op.mem.nbytes)
        if n:
            op.mem[:n] = data[:n]
        self._finish_fill(op, op.mem[:n], nbytes)

    def _reply(self, h: wire.Header, kind: int) -> None:
        assert self.transport is not None
        header = wire.HEADER.pack(kind, 0, h.context, 0, 0, self.rank, self.pid, h.msgid, 0)
        self.transport.send(h.wsource, header)

    # -- incoming frames -----------------------------------------------------
    def on_frame(self, frame: bytes) -> None:
        """Handle one frame from the data socket (caller holds the engine)."""
        kind = frame[0]
        if kind == wire.EAGER or kind == wire.RTS:
            h = wire.unpack(frame)
            env = Envelope(h.context, h.source, h.tag, h.value, (frame, h))
            recv = self.matcher.arrive(env)
            if recv is not None:
                self._deliver(env, recv.handle)
            return
        h = wire.unpack(frame)
        if kind == wire.ACK or kind == wire.FIN:
            op = self._sends.pop(h.msgid, None)
            if op is not None:
                op.keep = None
                op.mem = None
                op.done = True
                self._release_bsend(op)
        elif kind == wire.CTS:
            op = self._sends.get(h.msgid)
            if op is not None and op.mem is not None:
                header = wire.HEADER.pack(
                    wire.DATA, 0, h.context, 0, 0, self.rank, self.pid, h.msgid, op.mem.nbytes
                )
                assert self.transport is not None
                self.transport.send_parts(h.wsource, [header, op.mem])
        else:
            raise MPIException(ERR_OTHER, f"unknown frame kind {kind} from rank {h.wsource}")

    def on_data_parts(self, parts: list[bytes]) -> None:
        """A DATA reply (header + payload) for a large receive in progress."""
        h = wire.unpack(parts[0])
        op, env = self._rdv.pop((h.wsource, h.msgid))
        payload = memoryview(parts[1])
        if op.mem is None:
            op.data = payload
            op.count = env.nbytes
            op.done = True
        else:
            self._fill(op, payload, env.nbytes)
        self._reply(h, wire.FIN)

    def _release_bsend(self, op: Op) -> None:
        if op.bsend_bytes and op.comm is not None:
            from ._bsend import release

            release(op)

    # -- progress ------------------------------------------------------------
    def poll_once(self, block: bool) -> bool:
        """Handle every frame waiting on the data socket (caller holds the engine).

        With ``block`` it first waits, up to the socket's receive timeout, for one.
        Returns True when something was handled.
        """
        transport = self.transport
        if transport is None:
            return False
        sock = transport.data
        handled = False
        if block:
            try:
                parts = [sock.recv()]
            except zmq.Again:
                return False
            while sock.getsockopt(zmq.RCVMORE):
                parts.append(sock.recv())
            self._dispatch(parts)
            handled = True
        while True:
            try:
                parts = [sock.recv(zmq.NOBLOCK)]
            except zmq.Again:
                return handled
            while sock.getsockopt(zmq.RCVMORE):
                parts.append(sock.recv())
            self._dispatch(parts)
            handled = True

    def _dispatch(self, parts: list[bytes]) -> None:
        if len(parts) == 1:
            self.on_frame(parts[0])
        else:
            self.on_data_parts(parts)

    def wait(self, op: Op, info: Callable[[], WaitInfo] | None = None) -> None:
        """Block until ``op`` is done (caller holds the engine).

        ``info`` describes the wait for observers; it is built only if the rank
        really blocks.
        """
        if op.done:
            return
        self.poll_once(False)
        if op.done:
            return
        self.wait_until(lambda: op.done, info)

    def wait_until(
        self, ready: Callable[[], bool], info: Callable[[], WaitInfo] | None = None
    ) -> None:
        """Drive progress until ``ready()`` (caller holds the engine)."""
        if ready():
            return
        if self.transport is None:
            raise MPIException(
                ERR_OTHER,
                "deadlock: this single-process world has no other rank that could "
                "ever complete the operation",
            )
        self.waiting = info() if info is not None else WaitInfo("wait", "", -1, -1)
        try:
            while not ready():
                self.poll_once(True)
        finally:
            self.waiting = None

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

        def ready() -> bool:
            env = (self.matcher.take if take else self.matcher.probe)(context, source, tag)
            if env is not None:
                found.append(env)
            return bool(found)

        self.poll_once(False)
        self.wait_until(ready, info)
        return found[0]

    # -- shutdown ------------------------------------------------------------
    def pending_sends(self) -> int:
        return len(self._sends)

    def statistics(self) -> dict[str, Any]:
        stats = self.matcher.statistics()
        return {
            "posted_receives": stats.posted,
            "unexpected_messages": stats.unexpected,
            "sends_in_flight": len(self._sends),
        }
