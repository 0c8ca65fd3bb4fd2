"""Running collective algorithms round by round: blocking, nonblocking, persistent.

An algorithm (``core.algorithms``, ``core.reductions``) is a generator that yields
:class:`~ipympi.core.schedule.Round` objects —
the messages one rank sends and receives in one step — and gets back the
completed receive operations before it continues (for example to combine a
received partial reduction). :class:`CollOp` runs such a generator on the
progress engine:

* a blocking collective starts it and waits until it is done;
* a nonblocking one returns a request at once; the engine advances it whenever
  it handles messages (inside any MPI call of this rank, or in the progress
  thread while the user computes), so several can be outstanding at once;
* a persistent one builds a fresh generator at each ``Start``.

Collective traffic uses the communicator's collective context (never matched
by point-to-point receives) with the call's sequence number as the tag, and
every message carries the call's *signature* (kind and root). A receive that
brings another signature, a size that does not match, or a message left over
once the call is finished means the ranks called different collectives: the
rank that notices tells every other rank, and each gets an ``MPI.Exception``
(``ERR_NOT_SAME``) naming what each side called, instead of a hang or
corrupted data.
"""

from __future__ import annotations

from typing import Any, Callable

from ...core.constants import ANY_SOURCE
from ...core.errors import ERR_NOT_SAME, ERR_OTHER
from ...core.errors import Exception as MPIException
from ...core.modes import BLOCKING, PERSISTENT, Form
from ...core.schedule import KINDS, ROOTED, Algorithm, Round, describe_signature, is_local
from ...progress.engine import WaitInfo
from ...progress.operation import COLL, RECV, SEND, Operation
from ..request import Prequest, Request

__all__ = [
    "CollOp",
    "check_reported",
    "comm_label",
    "run_in_mode",
    "runs_inline",
]


# What a local step (a round with no message) is sent back.
_NO_RECEIVES: list[Operation] = []


class CollOp(Operation):
    """A collective call in progress: completes when its algorithm finishes.

    ``result`` is what the algorithm returned (the object of a lower-case
    collective); ``finish`` runs once at the end (e.g. copying out of scratch
    buffers) before the operation counts as done. ``root`` is the call's root
    for traces of rooted collectives (by default the one encoded in ``sig``).

    While tracing is on (``engine.tracer``), ``trace`` is the call's record;
    the tracer adds each round to it as the algorithm yields it.
    """

    trace: dict[str, Any] | None = None  # the call's trace record while tracing

    def __init__(
        self,
        comm: Any,
        call: str,
        algorithm: Algorithm | None,
        sig: int,
        finish: Callable[[Any], Any] | None = None,
        root: int | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(COLL, comm, call, ANY_SOURCE, 0)
        impl = comm._impl
        self.engine = impl.engine
        self.context = impl.context + 1
        self.world_ranks = impl.world_ranks
        self.rank = impl.rank
        self.sig = sig
        # The call's sequence number: a new one, or that of a call begun on the
        # straight path (mpi.coll.fast) that needs this class to report an error.
        if seq is None:
            seq = self.engine.ledger.begin(self.context, sig, impl.world_ranks)
        self.seq = seq
        self.algorithm = algorithm
        self.finish = finish
        self.result: Any = None
        self.round: Round | None = None
        self.rounds = 0
        self.recv_ops: list[Operation] = []
        self.send_ops: list[Operation] = []
        self.root = root

    # -- running -------------------------------------------------------------
    def start(self) -> None:
        """Run the first rounds; register with the engine if the call is not done."""
        tracer = self.engine.tracer
        if tracer is not None:
            self.tracer = tracer
            self.trace = tracer.coll_started(self, self._root())
        dead = self.engine.dead_peers
        if dead:  # a member has died: this collective can never complete
            gone = next((dead[r] for r in self.world_ranks if r in dead), None)
            if gone is not None:
                where = f"collective #{self.seq} on {self._name()}"
                self._fail(f"{where}: {gone}", notify=False, error=ERR_OTHER)
                return
        self._step(None)
        if not self.done:
            self.engine.colls.append(self)

    def advance(self) -> None:
        """Continue once the current round's messages have all completed."""
        if not self.done and self._round_done():
            self._step(self.recv_ops)

    def _round_done(self) -> bool:
        return all(op.done for op in self.recv_ops) and all(op.done for op in self.send_ops)

    def run_inline(self) -> None:
        """Run the whole call in the calling thread, round after round.

        The blocking form with tracing off: the same algorithm and messages as
        :meth:`start` (peers cannot tell the difference), without registering
        with the engine or creating operations for eager sends. Errors end the
        call as in :meth:`_step`.
        """
        engine = self.engine
        algorithm = self.algorithm
        assert algorithm is not None
        context, seq = self.context, self.seq
        try:
            rnd = next(algorithm)
            while True:
                if is_local(rnd):
                    rnd = algorithm.send(_NO_RECEIVES)
                    continue
                if engine.ledger.errors:
                    reported = engine.ledger.take_mismatch(context, seq)
                    if reported is not None:
                        raise _Reported(reported)
                self.rounds += 1
                self.round = rnd
                received = self._exchange(rnd)
                self._check(received)
                rnd = algorithm.send(received)
        except StopIteration as stop:
            self._complete(stop.value)
        except (_Mismatch, _PeerDied) as exc:
            self._end_with(exc)

    def _exchange(self, rnd: Round) -> list[Operation]:
        """Start one round and wait for all its messages; its receive operations."""
        self._start_round(rnd)
        for op in (*self.recv_ops, *self.send_ops):
            if not op.done:
                self.engine.wait(op, self._blocked_in)
        return self.recv_ops

    def awaited(self) -> Any:
        """The posted receive of the current round that is still waiting, or None."""
        return next((op.posted for op in self.recv_ops if op.posted is not None), None)

    def _blocked_in(self) -> Any:
        """What this call waits for (built only when an observer asks)."""

        pending = [op.peer for op in self.recv_ops if not op.done]
        call = f"{self.call} (collective #{self.seq}, round {self.rounds})"
        return WaitInfo(call, self._name(), pending[0] if pending else -1, self.seq)

    def _step(self, received: list[Operation] | None) -> None:
        trace = self.trace
        try:
            while True:
                if received is not None:
                    if trace is not None:
                        self.tracer.round_done(trace, received)
                    self._check(received)
                rnd = (
                    self.algorithm.send(received) if received is not None else next(self.algorithm)  # type: ignore[union-attr,arg-type]
                )
                if trace is None:
                    if is_local(rnd):
                        received = _NO_RECEIVES
                        continue
                else:
                    self.tracer.round_started(trace, rnd, self.round)
                reported = self.engine.ledger.take_mismatch(self.context, self.seq)
                if reported is not None:
                    # Another rank found a mismatch on this communicator after this
                    # round's receives were posted: its ranks have left, so the next
                    # round's messages would never come.
                    raise _Reported(reported)
                self.rounds += 1
                self.round = rnd
                self._start_round(rnd)
                if not self._round_done():
                    return
                received = self.recv_ops
        except StopIteration as stop:
            self._complete(stop.value)
        except (_Mismatch, _PeerDied) as exc:
            self._end_with(exc)

    def _end_with(self, exc: _Mismatch | _PeerDied) -> None:
        """End the call after the failure ``exc`` found while running it."""
        if isinstance(exc, _PeerDied):
            where = f"collective #{self.seq} on {self._name()}"
            self._fail(f"{where}: {exc}", notify=False, error=ERR_OTHER)
        elif isinstance(exc, _Reported):
            self._fail(str(exc), notify=False)
        else:
            self._fail(str(exc), notify=True)
            self.engine.ledger.errors.pop(self.context, None)

    def fail_round(self, ops: list[Operation], reported: str | None = None) -> None:
        """End the call with the error that a round's received ``ops`` show, or with
        a mismatch ``reported`` by another rank (for calls on the straight path)."""
        self.recv_ops = ops
        try:
            if reported is not None:
                raise _Reported(reported)
            self._check(ops)
        except (_Mismatch, _PeerDied) as exc:
            self._end_with(exc)

    def _start_round(self, rnd: Round) -> None:
        """Post the round's receives and start its sends.

        Small sends leave at once without an operation to track (not while
        tracing: ``send_eager`` declines); ``send_ops`` holds the others.
        """
        engine = self.engine
        context, seq, ranks, me, sig = self.context, self.seq, self.world_ranks, self.rank, self.sig
        recv_ops = []
        for peer, target in rnd.recvs:
            op = Operation(RECV, self.comm, self.call, peer, seq)
            op.mem = target
            engine.start_recv(op, context, peer, seq)
            recv_ops.append(op)
        send_ops = []
        for peer, data in rnd.sends:
            wdest = ranks[peer]
            if not engine.send_eager(wdest, context, me, seq, data, sig):
                op = Operation(SEND, self.comm, self.call, peer, seq)
                engine.start_send(op, data, wdest, context, me, seq, False, sig)
                send_ops.append(op)
        self.recv_ops = recv_ops
        self.send_ops = send_ops

    def _check(self, ops: list[Operation]) -> None:
        for op in ops:
            if op.peer_died:
                raise _PeerDied(op.error_detail)
            if op.error:
                reported = self.engine.ledger.take_mismatch(self.context, self.seq)
                if reported:
                    raise _Reported(reported)
            if op.rsig != self.sig:
                raise _Mismatch(
                    f"collective mismatch (collective #{self.seq} on {self._name()}): "
                    f"rank {op.source} called {describe_signature(op.rsig)}, "
                    f"rank {self.rank} called {describe_signature(self.sig)}"
                )
            if op.error:
                raise _Mismatch(
                    f"{self._who()}: rank {op.source} sent more data than rank {self.rank} "
                    f"expects in {describe_signature(self.sig)} ({op.error_detail}); "
                    "counts or datatypes differ between ranks"
                )
            if op.mem is not None and op.count != op.mem.nbytes:
                raise _Mismatch(
                    f"{self._who()}: rank {op.source} sent {op.count} bytes where rank "
                    f"{self.rank} expects {op.mem.nbytes} in {describe_signature(self.sig)}; "
                    "counts or datatypes differ between ranks"
                )

    def _root(self) -> int | None:
        """The root of a rooted collective (for traces), else None."""
        kind_id = self.sig & 0x1F
        if not (1 <= kind_id <= len(KINDS) and KINDS[kind_id - 1] in ROOTED):
            return None
        return self.root if self.root is not None else (self.sig >> 7) & 0x1FF

    def _who(self) -> str:
        return f"collective size mismatch (collective #{self.seq} on {self._name()})"

    def _name(self) -> str:
        return comm_label(self.comm)

    def _complete(self, value: Any) -> None:
        leftover = self.engine.end_collective(self.context, self.seq)
        if leftover is not None:
            self.end_with_leftover(leftover)
            return
        if self.finish is not None:
            value = self.finish(value)
        self.result = value
        self.complete()

    def end_with_leftover(self, leftover: Any) -> None:
        """Fail the (ended) call: ``leftover``, a message of it, was never received."""
        payload_sig = leftover.payload.sig
        self._fail(
            f"collective mismatch (collective #{self.seq} on {self._name()}): "
            f"rank {leftover.source} called {describe_signature(payload_sig)}, "
            f"rank {self.rank} called {describe_signature(self.sig)}",
            notify=True,
            leftover=leftover,
        )

    def _fail(
        self, text: str, notify: bool, leftover: Any = None, error: int = ERR_NOT_SAME
    ) -> None:
        """Fail the call with ``text`` (told to the other ranks when ``notify``); its
        messages still queued here, and ``leftover`` (one taken off the queue as the
        call ended), are dropped and their senders released."""
        if notify:
            self.engine.notify_mismatch(self.context, self.seq, self.world_ranks, text)
        else:
            # Late messages of this failed call are consequences, not news.
            self.engine.ledger.mismatched.add((self.context, self.seq))
        self.engine.abandon_collective(self.context, self.seq, leftover)
        for op in self.recv_ops:
            if not op.done:
                self.engine.withdraw(op)
        self.fail(error, text)

    def complete(self) -> None:
        """End the call (its result or its error is set): close its trace record and
        its algorithm, and stop advancing it."""
        if self.trace is not None:
            ended = self.error_detail if self.error else None
            self.tracer.coll_ended(self.trace, self.round, ended)
        super().complete()
        if self.algorithm is not None:
            self.algorithm.close()
        if self in self.engine.colls:
            self.engine.colls.remove(self)

    def raise_if_failed(self) -> None:
        if self.error:
            raise MPIException(self.error, f"{self.call}: {self.error_detail}")


class _Mismatch(Exception):
    """Internal: this rank found that the ranks disagree about a collective call."""


class _PeerDied(Exception):
    """Internal: a rank of the communicator died during the collective."""


class _Reported(_Mismatch):
    """Internal: another rank found a mismatch and told this one."""


def check_reported(engine: Any, context: int, call: str) -> None:
    """Raise a mismatch reported to this rank after it had left the collective.

    Raised once, before the next collective starts (it uses no sequence
    number), so the error reaches every rank instead of leaving some with
    silently wrong results.
    """
    # The collective about to start gets the next sequence number: only a report
    # about one before it is "earlier" (a report about this very one fails it as
    # it starts, one about a later one waits until this rank gets there).
    ledger = engine.ledger
    if not ledger.errors:
        return
    error = ledger.take_mismatch(context, ledger.next.get(context, 0) - 1)
    if error is not None:
        raise MPIException(ERR_NOT_SAME, f"{call}: an earlier {error}")


def comm_label(comm: Any) -> str:
    """How errors and waits name a collective's communicator."""
    return comm._impl.label if comm._impl is not None else "a freed communicator"


def runs_inline(engine: Any) -> bool:
    """Whether a blocking collective may run inline or on the straight path
    (``mpi.coll.fast``) now: not while tracing (which records every round through
    :meth:`CollOp.start`), nor once a rank of the world has died (``start``
    fails such calls at once)."""
    return engine.tracer is None and not engine.dead_peers


def run_in_mode(engine: Any, launch: Callable[[], CollOp], mode: Form) -> Any:
    """Run the collective that ``launch`` builds (the caller does not hold the engine).

    ``Form.BLOCKING`` runs it to completion and returns its result;
    ``Form.NONBLOCKING`` starts it and returns its request; ``Form.PERSISTENT``
    returns a request that launches a fresh one at every ``Start``.
    """
    if mode is PERSISTENT:

        def start() -> CollOp:
            engine.enter()
            try:
                coll = launch()
                coll.start()
                return coll
            finally:
                engine.leave()

        return Prequest._persistent(start)
    engine.enter()
    try:
        coll = launch()
        if mode is BLOCKING:
            return run_blocking(coll)
        coll.start()
        return Request._of(coll)
    finally:
        engine.leave()


def run_blocking(coll: CollOp) -> Any:
    """Run a collective to completion (caller holds the engine); its result.

    It runs inline when :func:`runs_inline` allows, else through the general
    machinery (:meth:`CollOp.start`).
    """
    engine = coll.engine
    if runs_inline(engine):
        coll.run_inline()
    else:
        coll.start()
        if not coll.done:
            engine.wait(coll, coll._blocked_in)
    coll.raise_if_failed()
    return coll.result
