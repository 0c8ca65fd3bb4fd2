"""The most frequent blocking collectives as straight-line code.

:mod:`._collsched` runs every collective as an algorithm generator that yields
:class:`~ipympi._collsched.Round` objects, which keeps each algorithm's rounds
explicit for traces and teaching views. For the calls whose latency a user
feels most (blocking ``Barrier``; ``Bcast`` on the binomial tree, i.e. below
256 KiB or on 2 ranks; ``Allreduce`` and ``allreduce`` by recursive doubling,
i.e. all but large commutative arrays; tracing off), that machinery is most of
the cost: on a 2-core machine with 4 ranks it doubles the CPU time of a
barrier. This module runs the same schedules (``dissemination_peers``,
``binomial_peers``, ``doubling_plan``, shared with the generators) as plain
loops over the engine: the same messages, peers, order, tags and signatures,
so ranks on either path work together and detect mismatches alike.

Anything unusual (a reported mismatch, a message of another collective, a size
that does not match, a dead peer) is handed to :class:`CollOp`'s own checks,
so errors read exactly as on the general path. While tracing, or once a rank
of the world has died, calls take the general path.
"""

from __future__ import annotations

from typing import Any, Callable

from ._algorithms import _EMPTY, binomial_peers, dissemination_peers
from ._collsched import CollOp, check_reported, comm_label, runs_inline, signature
from ._ops import RECV, SEND, Op
from ._reductions import Values, doubling_plan

__all__ = ["GENERAL", "FastCall", "allreduce", "attempt", "barrier", "bcast"]

# What :func:`attempt` returns when the call must take the general path.
GENERAL: Any = object()


def attempt(impl: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` with the engine held, or return :data:`GENERAL` when
    the straight path cannot be taken now (tracing, or a rank has died)."""
    engine = impl.engine
    engine.enter()
    try:
        if not runs_inline(engine):
            return GENERAL
        return fn(*args)
    finally:
        engine.leave()


class FastCall:
    """One blocking collective call in progress on the straight path.

    Created with the engine held; numbers the call like :class:`CollOp`
    (``begin_collective``) and ends it with :meth:`finish`.
    """

    __slots__ = (
        "call",
        "comm",
        "context",
        "engine",
        "peer",
        "rank",
        "ranks",
        "rounds",
        "seq",
        "sig",
    )

    def __init__(self, comm: Any, impl: Any, call: str, kind: str, root: int = 0) -> None:
        engine = impl.engine
        context = impl.context + 1
        check_reported(engine, context, call)
        self.comm = comm
        self.call = call
        self.engine = engine
        self.context = context
        self.rank = impl.rank
        self.ranks = impl.world_ranks
        self.sig = sig = signature(kind, root)
        self.seq = engine.begin_collective(context, sig, impl.world_ranks)
        self.rounds = 0
        self.peer = -1  # the rank this call waits for, for hang reports

    def exchange(
        self,
        to: int | None,
        data: Any,
        frm: int | None,
        target: memoryview | None,
    ) -> Op | None:
        """One round: send ``data`` to ``to`` and receive from ``frm`` into ``target``
        (None: bytes of any size into ``op.data``); either side may be None."""
        engine = self.engine
        self.rounds += 1
        if engine.coll_errors:
            reported = engine.take_mismatch(self.context, self.seq)
            if reported is not None:
                self._fail([], reported)
        pending = self.send(to, data) if to is not None else None
        op = None
        if frm is not None:
            self.peer = frm
            op = Op(RECV, self.comm, self.call, frm, self.seq)
            op.mem = target
            engine.receive_collective(op, self.context, frm, self.seq, self.ranks, self._blocked_in)
            if (
                op.rsig != self.sig
                or op.error
                or (target is not None and op.count != target.nbytes)
            ):
                self._fail([op])
        if pending is not None and not pending.done:
            engine.wait(pending, self._blocked_in)
        return op

    def send(self, to: int, data: Any) -> Op | None:
        """Start sending ``data`` to ``to``; the operation to wait for, if it is not done."""
        engine = self.engine
        wdest = self.ranks[to]
        if engine.send_eager(wdest, self.context, self.rank, self.seq, data, self.sig):
            return None
        op = Op(SEND, self.comm, self.call, to, self.seq)
        engine.start_send(op, data, wdest, self.context, self.rank, self.seq, False, self.sig)
        return None if op.done else op

    def wait_all(self, ops: list[Op | None]) -> None:
        """Wait for the sends :meth:`send` returned (None: already done)."""
        for op in ops:
            if op is not None and not op.done:
                self.engine.wait(op, self._blocked_in)

    def finish(self) -> None:
        """End the call: a message of it still queued means the ranks disagree."""
        leftover = self.engine.end_collective(self.context, self.seq)
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

    def _blocked_in(self) -> Any:
        """What this call waits for (built only when an observer asks)."""
        from ._engine import WaitInfo

        call = f"{self.call} (collective #{self.seq}, round {self.rounds})"
        return WaitInfo(call, comm_label(self.comm), self.peer, self.seq)


def barrier(comm: Any, impl: Any, call: str) -> None:
    """Dissemination barrier (``barrier_dissemination``'s rounds)."""
    run = FastCall(comm, impl, call, "Barrier")
    for _, to, frm in dissemination_peers(impl.rank, impl.size):
        run.exchange(to, b"", frm, _EMPTY)
    run.finish()


def bcast(comm: Any, impl: Any, call: str, root: int, mem: memoryview) -> None:
    """Binomial-tree broadcast of ``mem`` (``bcast_binomial``'s rounds)."""
    run = FastCall(comm, impl, call, "Bcast", root)
    parent, children = binomial_peers(impl.rank, impl.size, root)
    if parent is not None:
        run.exchange(None, None, parent, mem)
    if children:
        run.rounds += 1
        run.wait_all([run.send(child, mem) for child in children])
    run.finish()


def allreduce(comm: Any, impl: Any, call: str, kind: str, values: Values, value: Any) -> Any:
    """Recursive-doubling allreduce (``allreduce_recursive_doubling``'s rounds);
    returns the result (a new object, or an array of ``values``)."""
    rank = impl.rank
    run = FastCall(comm, impl, call, kind)
    plan = doubling_plan(rank, impl.size)
    acc = value
    if plan.fold_to is not None:
        run.exchange(plan.fold_to, values.wire(acc), None, None)
    elif plan.fold_from is not None:
        holder, target = values.target(acc)
        op = run.exchange(None, None, plan.fold_from, target)
        acc = values.combine(values.received(op, holder), acc)
    spare = None
    for partner in plan.partners:
        holder, target = values.target(acc, spare)
        op = run.exchange(partner, values.wire(acc), partner, target)
        other = values.received(op, holder)
        if partner < rank:
            acc, spare = values.combine(other, acc), other
        else:
            acc, spare = values.combine(acc, other), acc
    if plan.unfold_to is not None:
        run.exchange(plan.unfold_to, values.wire(acc), None, None)
    elif plan.unfold_from is not None:
        holder, target = values.target(value)
        op = run.exchange(None, None, plan.unfold_from, target)
        acc = values.received(op, holder)
    run.finish()
    return acc
