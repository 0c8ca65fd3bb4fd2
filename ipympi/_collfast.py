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

What stays the same for a communicator (its collective context, the peers of
each schedule, the queue its early messages wait in) is worked out once, in a
:class:`Lane` kept on the communicator. Each round then costs a
header, one datagram out and, as a rule, one datagram in, taken off the socket
by :meth:`Engine.collective_frame <ipympi._engine.Engine.collective_frame>`.

Anything unusual (a reported mismatch, a message of another collective, a size
that does not match, a large message, a dead peer) is handed to the general
receive and to :class:`CollOp`'s own checks, so errors read exactly as on the
general path. While tracing, or once a rank of the world has died, calls take
the general path.
"""

from __future__ import annotations

import time
from typing import Any

from ._algorithms import _EMPTY, binomial_peers, dissemination_peers
from ._collsched import CollOp, check_reported, comm_label, runs_inline, signature
from ._engine import WaitInfo
from ._ops import RECV, SEND, Op
from ._reductions import ArrayValues, Values, doubling_plan
from ._wire import HEADER_SIZE

__all__ = ["GENERAL", "Lane", "allreduce", "barrier", "bcast"]

# What the calls return when they must take the general path.
GENERAL: Any = object()

_monotonic = time.monotonic
BARRIER = signature("Barrier")


class Lane:
    """What the straight path needs of one communicator, worked out once.

    Kept in the communicator's ``lane`` slot. Peers are communicator ranks, as
    in :mod:`._algorithms` and :mod:`._reductions`; ``world`` maps them to the
    world ranks that frames are sent to.
    """

    __slots__ = (
        "_trees",
        "context",
        "dissemination",
        "doubling",
        "engine",
        "queue",
        "rank",
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
        self.doubling = doubling_plan(rank, size)
        self._trees: dict[int, tuple[int | None, tuple[int, ...]]] = {}

    def tree(self, root: int) -> tuple[int | None, tuple[int, ...]]:
        """(parent, children) in the binomial tree rooted at ``root`` (comm ranks)."""
        peers = self._trees.get(root)
        if peers is None:
            peers = self._trees[root] = binomial_peers(self.rank, len(self.world), root)
        return peers


class FastCall:
    """One blocking collective call in progress on the straight path.

    Created with the engine held; numbers the call like :class:`CollOp`
    (``begin_collective``), tells observers what it waits for (the caller
    forgets that when the call raises), and is ended with :meth:`finish`.
    """

    __slots__ = ("call", "comm", "engine", "lane", "peer", "rounds", "seq", "sig")

    def __init__(self, comm: Any, lane: Lane, call: str, sig: int) -> None:
        engine = lane.engine
        self.comm = comm
        self.lane = lane
        self.engine = engine
        self.call = call
        self.sig = sig
        if engine.coll_errors:  # a mismatch reported after this rank left that call
            check_reported(engine, lane.context, call)
        self.seq = engine.begin_collective(lane.context, sig, lane.world)
        self.rounds = 0
        self.peer = -1  # the rank this call waits for, for hang reports
        self._waits()

    # -- messages ----------------------------------------------------------------------
    def send(self, to: int, data: Any) -> Op | None:
        """Start sending ``data`` (bytes or a byte memoryview) to comm rank ``to``;
        the operation to wait for when it is large, else None (it has left)."""
        lane, engine = self.lane, self.engine
        wdest = lane.world[to]
        if engine.send_eager(wdest, lane.context, lane.rank, self.seq, data, self.sig):
            return None
        op = Op(SEND, self.comm, self.call, to, self.seq)
        engine.start_send(op, data, wdest, lane.context, lane.rank, self.seq, False, self.sig)
        return None if op.done else op

    def receive(self, frm: int, nbytes: int | None = None) -> memoryview:
        """The payload of this call's message from comm rank ``frm``: ``nbytes``
        long, or of any size when None."""
        accepted, frame = self._frame(frm, nbytes)
        if accepted:
            return memoryview(frame)[HEADER_SIZE:]  # type: ignore[arg-type]
        target = None if nbytes is None else memoryview(bytearray(nbytes))
        op = self._receive_general(frm, target, frame)
        return op.data if target is None else target

    def receive_into(self, frm: int, target: memoryview) -> None:
        """Receive this call's message from comm rank ``frm`` into ``target``, whose
        size it must have."""
        accepted, frame = self._frame(frm, target.nbytes)
        if not accepted:
            self._receive_general(frm, target, frame)
        elif target.nbytes:
            target[:] = memoryview(frame)[HEADER_SIZE:]  # type: ignore[arg-type]

    def _frame(self, frm: int, nbytes: int | None) -> tuple[bool, bytes | None]:
        """This call's frame from ``frm`` as the socket gives it, and whether the
        straight path accepts it: this call's signature, and ``nbytes`` long unless
        None. (False, None): the general receive must take over."""
        self.peer = frm
        engine = self.engine
        if engine.waiting is None:  # a wait for a large send ended the call's
            self._waits()
        lane = self.lane
        frame = engine.collective_frame(lane.queue, lane.context, frm, self.seq)
        accepted = (
            frame is not None
            and frame[2] | frame[3] << 8 == self.sig
            and (nbytes is None or len(frame) - HEADER_SIZE == nbytes)
        )
        return accepted, frame

    def _waits(self) -> None:
        """Tell observers that this call waits (see :meth:`_blocked_in`)."""
        engine = self.engine
        engine.waiting = self._blocked_in
        engine.waiting_since = _monotonic()

    def _receive_general(self, frm: int, target: memoryview | None, frame: bytes | None) -> Op:
        """Receive through an operation: a frame the straight checks did not accept
        (another signature or size), or whatever the general receive finds; raise the
        general path's error if the outcome is wrong."""
        engine = self.engine
        op = Op(RECV, self.comm, self.call, frm, self.seq)
        op.mem = target
        if frame is None:
            lane = self.lane
            engine.receive_collective(op, lane.context, frm, self.seq, lane.world, self._blocked_in)
        else:
            engine.fill_from_frame(op, frame)
        if op.rsig != self.sig or op.error or (target is not None and op.count != target.nbytes):
            self._fail([op])
        return op

    def round(self) -> None:
        """Start the next round: fail at once if a mismatch of this call was reported."""
        self.rounds += 1
        if self.engine.coll_errors:
            reported = self.engine.take_mismatch(self.lane.context, self.seq)
            if reported is not None:
                self._fail([], reported)

    def wait(self, op: Op | None) -> None:
        """Wait for a send :meth:`send` returned (None: it has left)."""
        if op is not None and not op.done:
            self.engine.wait(op, self._blocked_in)

    # -- the end ------------------------------------------------------------------------
    def finish(self) -> None:
        """End the call: a message of it still queued means the ranks disagree."""
        leftover = self.engine.end_collective(self.lane.context, self.seq)
        if leftover is not None:
            coll = self._as_coll()
            coll.end_with_leftover(leftover)
            coll.raise_if_failed()

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
        """What this call waits for (built only when an observer asks)."""
        call = f"{self.call} (collective #{self.seq}, round {self.rounds})"
        return WaitInfo(call, comm_label(self.comm), self.peer, self.seq)


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
    lane = _held(impl)
    if lane is None:
        return GENERAL
    try:
        run = FastCall(comm, lane, call, BARRIER)
        for to, frm in lane.dissemination:
            run.round()
            run.send(to, b"")
            run.receive_into(frm, _EMPTY)
        run.finish()
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
        run = FastCall(comm, lane, call, signature("Bcast", root))
        parent, children = lane.tree(root)
        if parent is not None:
            run.round()
            run.receive_into(parent, mem)
        if children:
            run.round()
            for sent in [run.send(child, mem) for child in children]:
                run.wait(sent)
        run.finish()
    finally:
        _release(lane.engine)
    return None


def allreduce(comm: Any, impl: Any, call: str, kind: str, values: Values, value: Any) -> Any:
    """Recursive-doubling allreduce (``allreduce_recursive_doubling``'s rounds);
    returns the result (a new object, or an array of ``values``), or
    :data:`GENERAL`."""
    lane = _held(impl)
    if lane is None:
        return GENERAL
    try:
        run = FastCall(comm, lane, call, signature(kind))
        plan = lane.doubling
        rank = lane.rank
        acc = value
        if plan.fold_to is not None:
            run.round()
            run.wait(run.send(plan.fold_to, values.wire(acc)))
        elif plan.fold_from is not None:
            run.round()
            acc = values.combine(_receive_value(run, values, plan.fold_from, acc), acc)
        spare = None
        for partner in plan.partners:
            run.round()
            sent = run.send(partner, values.wire(acc))
            other = _receive_value(run, values, partner, acc, spare)
            run.wait(sent)
            if partner < rank:
                acc, spare = values.combine(other, acc), other
            else:
                acc, spare = values.combine(acc, other), acc
        if plan.unfold_to is not None:
            run.round()
            run.wait(run.send(plan.unfold_to, values.wire(acc)))
        elif plan.unfold_from is not None:
            run.round()
            acc = _receive_value(run, values, plan.unfold_from, value)
        run.finish()
    finally:
        _release(lane.engine)
    return acc


def _receive_value(run: FastCall, values: Values, frm: int, like: Any, spare: Any = None) -> Any:
    """A value of ``values``' kind received from ``frm`` (shaped like ``like``;
    arrays land in ``spare`` when given)."""
    if type(values) is ArrayValues:
        holder, target = values.target(like, spare)
        run.receive_into(frm, target)
        return holder
    return values.decode(run.receive(frm, values.nbytes))
