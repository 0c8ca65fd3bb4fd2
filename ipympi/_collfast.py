"""The most frequent blocking collectives as straight-line code.

:mod:`._collsched` runs every collective as an algorithm generator that yields
:class:`~ipympi._collsched.Round` objects, which keeps each algorithm's rounds
explicit for traces and teaching views. For the calls whose latency a user
feels most (blocking ``Barrier``; ``Bcast`` on the binomial tree, i.e. below
256 KiB or on 2 ranks; ``Allreduce`` and ``allreduce`` by recursive doubling,
i.e. all but large commutative arrays; tracing off), that machinery is most of
the cost: with 4 ranks on 2 cores a rank's CPU time is the wall time, and a
call that runs right after a wake-up pays for every Python call it makes
several times over. This module runs the same schedules (``dissemination_peers``,
``binomial_peers``, ``doubling_plan``, shared with the generators) as plain
loops over the engine: the same messages, peers, order, tags and signatures,
so ranks on either path work together and detect mismatches alike.

There are two levels.

* A :class:`Lane`, kept on the communicator, holds what stays the same for it
  (its collective context, the peers of each schedule, the queue its early
  messages wait in) and the state of the call in progress. Its methods run one
  round each (:meth:`Lane.exchange`, :meth:`Lane.take`, :meth:`Lane.give`),
  receiving through :meth:`Engine.collective_frame
  <ipympi._engine.Engine.collective_frame>`, and handle everything unusual:
  a reported mismatch, a message of another collective, a size that does not
  match, a large message, a dead peer. They hand those to the general receive
  and to :class:`CollOp`'s own checks, so errors read exactly as on the
  general path.
* :func:`_flat` runs a Barrier, or an allreduce of one element or of Python
  objects whose rounds are all exchanges, as one loop with one call per round
  besides the sockets' (``collective_frame``): measured with 4 ranks on 2
  cores, each Python call layer on this path cost 1-2 us per collective. It
  does what ``Engine.enter``/``leave``, ``begin_collective`` and
  ``Transport.send`` do, inlined; a frame it does not accept, a large
  message or a reported mismatch goes to the lane's methods.

While tracing, or once a rank of the world has died, calls take the general path.
"""

from __future__ import annotations

import time
from typing import Any

from ._algorithms import binomial_peers, dissemination_peers
from ._collsched import CollOp, check_reported, comm_label, runs_inline, signature
from ._engine import EAGER_LIMIT, WaitInfo
from ._ops import RECV, SEND, Op
from ._reductions import ArrayValues, Codec, Values, doubling_plan
from ._sharing import hand_on
from ._wire import EAGER, HEADER, HEADER_SIZE

__all__ = ["GENERAL", "Lane", "allreduce", "barrier", "bcast"]

# What the calls return when they must take the general path.
GENERAL: Any = object()
# What _flat returns when the call is not for it (nothing was done).
_UNFIT: Any = object()

_monotonic = time.monotonic
_pack_header = HEADER.pack
BARRIER = signature("Barrier")
_SIGNATURES = {kind: signature(kind) for kind in ("Allreduce", "allreduce")}


class Lane:
    """The straight path of one communicator: its schedules, and the call in progress.

    Kept in the communicator's ``lane`` slot. Peers are communicator ranks, as
    in :mod:`._algorithms` and :mod:`._reductions`; ``world`` maps them to the
    world ranks that frames are sent to. A call begins with :meth:`start`,
    runs its rounds with :meth:`exchange`, :meth:`take` and :meth:`give`, and
    ends with :meth:`finish` (the caller then releases the engine).
    """

    __slots__ = (
        "_trees",
        "call",
        "comm",
        "context",
        "dissemination",
        "doubling",
        "engine",
        "pairs",
        "peer",
        "queue",
        "rank",
        "rounds",
        "seq",
        "sig",
        "waits",
        "world",
    )

    def __init__(self, impl: Any) -> None:
        engine = impl.engine
        rank, size, world = impl.rank, impl.size, impl.world_ranks
        self.engine = engine
        self.context = context = impl.context + 1
        self.rank = rank
        self.world = world
        # Messages of this context that came before their receive (live list).
        self.queue = engine.matcher.pending_in(context)
        # (rank to send to, rank to hear from) of each barrier round
        self.dissemination = tuple((to, frm) for _, to, frm in dissemination_peers(rank, size))
        self.doubling = plan = doubling_plan(rank, size)
        # The same for recursive doubling, when this rank only exchanges (no folding).
        self.pairs = (
            tuple((partner, partner) for partner in plan.partners)
            if plan.fold_to is None and plan.fold_from is None
            else None
        )
        self._trees: dict[int, tuple[int | None, tuple[int, ...]]] = {}
        self.waits = self._blocked_in  # bound once: told to observers at every call
        self.comm: Any = None
        self.call = ""
        self.seq = self.sig = self.rounds = 0
        self.peer = -1

    def tree(self, root: int) -> tuple[int | None, tuple[int, ...]]:
        """(parent, children) in the binomial tree rooted at ``root`` (comm ranks)."""
        peers = self._trees.get(root)
        if peers is None:
            peers = self._trees[root] = binomial_peers(self.rank, len(self.world), root)
        return peers

    # -- a call ----------------------------------------------------------------------------
    def start(self, comm: Any, call: str, sig: int) -> None:
        """Begin a call (the engine held): number it like :class:`CollOp`
        (``begin_collective``) and tell observers that it waits."""
        engine = self.engine
        if engine.coll_errors:  # a mismatch reported after this rank left that call
            check_reported(engine, self.context, call)
        self.seq = engine.begin_collective(self.context, sig, self.world)
        self.comm = comm
        self.call = call
        self.sig = sig
        self.rounds = 0
        self.peer = -1
        engine.waiting = self.waits
        engine.waiting_since = _monotonic()

    def exchange(
        self, to: int, frm: int, data: Any, nbytes: int | None, into: memoryview | None = None
    ) -> memoryview:
        """One round: send ``data`` (bytes or a byte memoryview) to comm rank ``to``
        and receive this call's message from comm rank ``frm``: ``nbytes`` long (any
        size when None), copied into ``into`` when given. Returns the payload."""
        self.rounds += 1
        if self.engine.coll_errors:
            self.check_round()
        large = self._send(to, data)
        payload = self._receive(frm, nbytes, into)
        if large is not None:
            self.wait_for(large)
        return payload

    def take(self, frm: int, nbytes: int | None, into: memoryview | None = None) -> memoryview:
        """A round that only receives (see :meth:`exchange`)."""
        self.rounds += 1
        if self.engine.coll_errors:
            self.check_round()
        return self._receive(frm, nbytes, into)

    def give(self, peers: tuple[int, ...], data: Any) -> None:
        """A round that only sends ``data`` to each of ``peers``, in turn."""
        self.rounds += 1
        if self.engine.coll_errors:
            self.check_round()
        for op in [self._send(to, data) for to in peers]:
            if op is not None:
                self.wait_for(op)

    def finish(self) -> None:
        """End the call: a message of it still queued means the ranks disagree."""
        leftover = self.engine.end_collective(self.context, self.seq)
        if leftover is not None:
            coll = self._as_coll()
            coll.end_with_leftover(leftover)
            coll.raise_if_failed()

    # -- messages ---------------------------------------------------------------------------
    def _send(self, to: int, data: Any) -> Op | None:
        """Send ``data`` to comm rank ``to``; the operation to wait for when it is
        large, else None (it has left)."""
        engine = self.engine
        if engine.send_eager(self.world[to], self.context, self.rank, self.seq, data, self.sig):
            return None
        return self.send_large(to, data)

    def send_large(self, to: int, data: Any) -> Op | None:
        """Start sending ``data`` through an operation (a large message)."""
        op = Op(SEND, self.comm, self.call, to, self.seq)
        self.engine.start_send(
            op, data, self.world[to], self.context, self.rank, self.seq, False, self.sig
        )
        return None if op.done else op

    def wait_for(self, op: Op) -> None:
        """Wait for a large send to complete; the call still waits afterwards."""
        engine = self.engine
        if not op.done:
            engine.wait(op, self.waits)
            engine.waiting = self.waits
            engine.waiting_since = _monotonic()

    def _receive(self, frm: int, nbytes: int | None, into: memoryview | None) -> memoryview:
        """This call's message from comm rank ``frm``: ``nbytes`` long (any size when
        None), copied into ``into`` when given; the payload."""
        self.peer = frm
        frame = self.engine.collective_frame(self.queue, self.context, frm, self.seq)
        if (
            frame is None
            or frame[2] | frame[3] << 8 != self.sig
            or (nbytes is not None and len(frame) - HEADER_SIZE != nbytes)
        ):
            return self.receive_general(frm, nbytes, into, frame)
        if into is None:
            return memoryview(frame)[HEADER_SIZE:]
        if nbytes:
            into[:] = memoryview(frame)[HEADER_SIZE:]
        return into

    def receive_general(
        self, frm: int, nbytes: int | None, into: memoryview | None, frame: bytes | None
    ) -> memoryview:
        """Receive through an operation: a frame the straight checks did not accept
        (another signature or size), or whatever the general receive finds; raise the
        general path's error if the outcome is wrong."""
        engine = self.engine
        target = into
        if target is None and nbytes is not None:
            target = memoryview(bytearray(nbytes))
        op = Op(RECV, self.comm, self.call, frm, self.seq)
        op.mem = target
        if frame is None:
            engine.receive_collective(op, self.context, frm, self.seq, self.world, self.waits)
            engine.waiting = self.waits
        else:
            engine.fill_from_frame(op, frame)
        if op.rsig != self.sig or op.error or (target is not None and op.count != target.nbytes):
            self._fail([op])
        return op.data if target is None else target

    # -- failing ----------------------------------------------------------------------------
    def check_round(self) -> None:
        """Fail at once if a mismatch of this call was reported."""
        reported = self.engine.take_mismatch(self.context, self.seq)
        if reported is not None:
            self._fail([], reported)

    def _fail(self, ops: list[Op], reported: str | None = None) -> None:
        """Raise the error the general path gives for this round's outcome."""
        coll = self._as_coll()
        coll.fail_round(ops, reported)
        coll.raise_if_failed()

    def _as_coll(self) -> CollOp:
        coll = CollOp(self.comm, self.call, None, self.sig, seq=self.seq)
        coll.rounds = self.rounds
        return coll

    def _blocked_in(self) -> WaitInfo:
        """What the call in progress waits for (built only when an observer asks)."""
        call = f"{self.call} (collective #{self.seq}, round {self.rounds})"
        return WaitInfo(call, comm_label(self.comm), self.peer, self.seq)


def _flat(comm: Any, impl: Any, call: str, sig: int, codec: Codec | None, value: Any) -> Any:
    """Run a Barrier (``codec`` None) or a recursive-doubling allreduce of
    ``value`` as one loop of exchanges; the result (None for a Barrier), or
    :data:`_UNFIT`, having done nothing, when the call is not for this path:
    the engine is busy, the communicator has no lane yet, tracing is on, a rank
    has died, a mismatch is known, or this rank folds (a rank count that is not
    a power of two).

    Each round is :meth:`Lane.exchange`'s, with what the engine and the
    transport do for it inlined (see the module docstring); the lane's methods
    take over whatever is unusual.
    """
    engine = impl.engine
    lock = engine.lock
    if not lock.acquire(False):
        return _UNFIT
    # Engine.enter, as when the lock is free
    engine.depth += 1
    engine.entered += 1
    try:
        lane = impl.lane
        transport = engine.transport
        if (
            lane is None
            or transport is None
            or engine.tracer is not None
            or engine.dead_peers
            or engine.coll_errors
        ):
            return _UNFIT
        if codec is None:
            rounds = lane.dissemination
            nbytes: int | None = 0
        else:
            rounds = lane.pairs
            if rounds is None:
                return _UNFIT
            wire, decode, combine, nbytes = codec
        # Engine.begin_collective
        context = lane.context
        seq = engine.coll_next.get(context, 0)
        engine.coll_next[context] = seq + 1
        active = engine.coll_active.get(context)
        if active is None:
            active = engine.coll_active[context] = set()
        active.add(seq)
        engine.coll_members[context] = world = lane.world
        calls = engine.coll_calls
        calls[(context, seq)] = sig
        calls.pop((context, seq - 256), None)
        # Lane.start: the call's state, for observers and for the lane's own methods
        lane.comm = comm
        lane.call = call
        lane.seq = seq
        lane.sig = sig
        lane.rounds = 0
        engine.waiting = lane.waits
        engine.waiting_since = _monotonic()

        peers, pending, send = transport.peers, transport.pending, transport.send
        not_sent = transport.not_sent
        collective_frame = engine.collective_frame
        rank, queue = lane.rank, lane.queue
        me, pid = engine.rank, engine.pid
        acc = value
        data = b""
        for to, frm in rounds:
            lane.rounds += 1
            lane.peer = frm
            if engine.coll_errors:
                lane.check_round()
            # Send (Engine.send_eager, Transport.send)
            large = None
            if codec is not None:
                data = wire(acc)
            if len(data) > EAGER_LIMIT:
                large = lane.send_large(to, data)
            else:
                frame = _pack_header(EAGER, 0, sig, context, rank, seq, me, pid, 0, len(data))
                frame += data
                wto = world[to]
                sock = peers.get(wto)
                if sock is None or pending:
                    send(wto, frame)
                else:
                    try:
                        sock.send(frame)
                    except OSError as exc:  # no room, or the peer has ended
                        not_sent(wto, frame, exc)
            # Receive: straight off the socket, or out of the queue if it came early
            frame = collective_frame(queue, context, frm, seq)
            if (
                frame is not None
                and frame[2] | frame[3] << 8 == sig
                and (nbytes is None or len(frame) - HEADER_SIZE == nbytes)
            ):
                payload = memoryview(frame)[HEADER_SIZE:]
            else:
                payload = lane.receive_general(frm, nbytes, None, frame)
            if large is not None:
                lane.wait_for(large)
            if codec is not None:
                other = decode(payload)
                acc = combine(other, acc) if frm < rank else combine(acc, other)
        if queue:
            lane.finish()  # a leftover message of this call is a mismatch
        else:
            engine.coll_active[context].discard(seq)
        return acc
    finally:
        # Engine.leave, no longer waiting
        engine.waiting = None
        engine.depth -= 1
        engine.last_exit = _monotonic()
        if engine.sharing:
            hand_on(engine)
        lock.release()


def _held(impl: Any) -> Lane | None:
    """Take the engine for a straight call; the communicator's lane, or None
    (engine released) when the call must take the general path: while tracing,
    or once a rank of the world has died."""
    engine = impl.engine
    engine.enter()
    if not runs_inline(engine) or engine.transport is None:
        engine.leave()
        return None
    lane = impl.lane
    if lane is None:  # the communicator's first straight call
        lane = impl.lane = Lane(impl)
    return lane


def _release(engine: Any) -> None:
    """Give the engine back, no longer waiting (also when the call raised)."""
    engine.waiting = None
    engine.leave()


def barrier(comm: Any, impl: Any, call: str) -> Any:
    """Dissemination barrier (``barrier_dissemination``'s rounds); None, or
    :data:`GENERAL` when the call must take the general path."""
    if _flat(comm, impl, call, BARRIER, None, None) is not _UNFIT:
        return None
    lane = _held(impl)
    if lane is None:
        return GENERAL
    try:
        lane.start(comm, call, BARRIER)
        for to, frm in lane.dissemination:
            lane.exchange(to, frm, b"", 0)
        lane.finish()
    finally:
        _release(lane.engine)
    return None


def bcast(comm: Any, impl: Any, call: str, root: int, mem: memoryview) -> Any:
    """Binomial-tree broadcast of ``mem`` (``bcast_binomial``'s rounds); None, or
    :data:`GENERAL`."""
    lane = _held(impl)
    if lane is None:
        return GENERAL
    try:
        lane.start(comm, call, signature("Bcast", root))
        parent, children = lane.tree(root)
        if parent is not None:
            lane.take(parent, mem.nbytes, mem)
        if children:
            lane.give(children, mem)
        lane.finish()
    finally:
        _release(lane.engine)
    return None


def allreduce(comm: Any, impl: Any, call: str, kind: str, values: Values, value: Any) -> Any:
    """Recursive-doubling allreduce (``allreduce_recursive_doubling``'s rounds);
    returns the result (a new object, or an array of ``values``), or
    :data:`GENERAL`."""
    sig = _SIGNATURES[kind]
    codec = values.codec
    if codec is not None:
        result = _flat(comm, impl, call, sig, codec, value)
        if result is not _UNFIT:
            return result
    lane = _held(impl)
    if lane is None:
        return GENERAL
    try:
        lane.start(comm, call, sig)
        plan = lane.doubling
        rank = lane.rank
        arrays = type(values) is ArrayValues
        wire, combine, nbytes = values.wire, values.combine, values.nbytes
        acc = value
        if plan.fold_to is not None:
            lane.give((plan.fold_to,), wire(acc))
        elif plan.fold_from is not None:
            acc = combine(_take_value(lane, values, plan.fold_from, acc), acc)
        spare = None
        for partner in plan.partners:
            if arrays:
                other, target = values.target(acc, spare)
                lane.exchange(partner, partner, wire(acc), target.nbytes, target)  # type: ignore[union-attr]
            else:
                other = values.decode(lane.exchange(partner, partner, wire(acc), nbytes))
            if partner < rank:
                acc, spare = combine(other, acc), other
            else:
                acc, spare = combine(acc, other), acc
        if plan.unfold_to is not None:
            lane.give((plan.unfold_to,), wire(acc))
        elif plan.unfold_from is not None:
            acc = _take_value(lane, values, plan.unfold_from, value)
        lane.finish()
    finally:
        _release(lane.engine)
    return acc


def _take_value(lane: Lane, values: Values, frm: int, like: Any) -> Any:
    """A value of ``values``' kind received from ``frm`` in a round of its own
    (shaped like ``like``)."""
    if type(values) is ArrayValues:
        holder, target = values.target(like)
        lane.take(frm, target.nbytes, target)
        return holder
    return values.decode(lane.take(frm, values.nbytes))
