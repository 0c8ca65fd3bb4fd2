"""The small blocking collectives on a straight path.

:class:`CollOp` runs every collective as an algorithm generator (``core.algorithms``,
``core.reductions``) that yields :class:`~ipympi.core.schedule.Round` objects, which keeps
each algorithm's rounds explicit for traces and teaching views. For the calls whose
latency a user feels most (blocking Barrier; Bcast, Gather, Scatter, Allgather and
Alltoall of small blocks; Allreduce and allreduce; tracing off), the operations and
posted receives around those rounds are most of the cost: with 4 ranks on 2 cores a
rank's CPU time is the wall time, and a call that runs right after a wake-up pays for
every Python call it makes several times over. This module runs the same generators
(one source of each algorithm) with a :class:`Lane`'s straight sends and receives
(:meth:`Lane.run`): the same messages, peers, tags and signatures, so ranks on either
path work together and detect mismatches alike.

A :class:`Lane`, kept on the communicator, holds what stays the same for it (its
collective context, the queue its early messages wait in) and the state of the call in
progress. A call takes the engine (:func:`_path`), begins with :meth:`Lane.start`, which
numbers it in the engine's collective ledger (``core.ledger.Ledger.begin``, as
:class:`CollOp` does), runs its rounds (:meth:`Lane.run`, :meth:`Lane.take`,
:meth:`Lane.send_all`), which send through ``Engine.send_eager`` and receive through
``Engine.collective_frame``, and ends with :meth:`Lane.finish`
(``Engine.end_collective``). Everything unusual (a reported mismatch, a message of
another collective, a size that does not match, a large message, a dead peer) goes to
the general receive and to :class:`CollOp`'s own checks, so errors read exactly as on
the general path.

Argument checks stay with the calls (``coll/intra.py``, ``coll/reduce.py``), which parse
once and then pick this path or the general one. While tracing, or once a rank
of the world has died (on a communicator without a board), calls take the general path.

When every rank of the communicator shares this host, a straight call sets up a shared
board (:func:`.shmpath.set_up`) and every straight call then runs in :mod:`.shmpath`
instead of the rounds below: the same calls, numbered and ended by the same
:class:`Lane`, with no message through the kernel. Ranks never mix the two for one
call: whether a communicator has a board is decided alike on all its ranks, at the
same call. That call is its first straight one when it has more than
:data:`~ipympi.progress.shmcoll.SMALL` ranks, and otherwise its first straight one
from its :func:`board_after`-th (5th) collective on (by its number in the engine's
ledger, alike on every rank, also after a failed cell realigned them): setting a board
up costs a few calls' time (0.2 ms at 2 ranks, 0.8 ms at 4 on 2 cores), which a
communicator used for a call or two, then freed, never gets back, while on a small one
the rounds cost little more than the board (MPICH's shared-memory collectives start
after a few calls too, ``MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD``).
On one host the rounds below then serve the board's set-up and the data that a board
call sends as messages (a Bcast's tree, an Allreduce's recursive doubling); between
hosts (and with ``IPYMPI_SHM_COLL=0``) they run every straight call.

Once a communicator has its board, the commonest calls skip the general parsing and
:func:`_path`: a blocking Bcast, Gather, Scatter, Allgather or Alltoall of plain whole
numpy arrays whose blocks fit in a slot, with a root that is a plain rank, is
recognized by :func:`bcast_array` and the other ``*_arrays`` functions and run by
:func:`_on_board` (take the engine, begin the call, run the same :mod:`.shmpath`
function); anything else they leave untouched (:data:`GENERAL`) for the general way.
A call's time is mostly its Python steps (about 0.1 us per function call, and with
more ranks than cores each rank's steps count several times over), so every layer it
skips counts: Scatter of one float64 at 2 ranks 11.2 -> 8.0 us, at 4 ranks 22.7 ->
15.6 (``benchmarks/collectives.py``, medians).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ...core.algorithms import (
    allgather_bruck,
    alltoallw_pairwise,
    barrier_dissemination,
    bcast_binomial,
    gather_binomial,
    scatter_binomial,
)
from ...core.lazynumpy import np
from ...core.matching import ExactQueue
from ...core.reductions import Values, allreduce_recursive_doubling
from ...core.schedule import Algorithm, signature
from ...core.wire import HEADER_SIZE, signature_of
from ...progress.engine import WaitInfo
from ...progress.operation import RECV, SEND, Operation
from ...progress.shmcoll import SMALL, Board
from ..buffers import ndarray_bytes
from . import shmpath
from .runner import CollOp, check_reported, comm_label

__all__ = [
    "GENERAL",
    "Lane",
    "allgather",
    "allgather_arrays",
    "allreduce",
    "allreduce_direct",
    "alltoall",
    "alltoall_arrays",
    "barrier",
    "bcast",
    "bcast_array",
    "bcast_object",
    "board_after",
    "gather",
    "gather_arrays",
    "reduce",
    "scatter",
    "scatter_arrays",
]

# What the calls return when they must take the general path.
GENERAL: Any = object()

_monotonic = time.monotonic
BARRIER = signature("Barrier")
_signature = functools.lru_cache(maxsize=1024)(signature)
_NOTHING: list[Any] = []  # what a local step of an algorithm receives
BOARD_AFTER = 5  # a small communicator's collective from which one sets up its board


def board_after(size: int) -> int:
    """From which collective on (1 for the first) a straight call sets up the board of
    a communicator of ``size`` ranks on one host: the first above :data:`SMALL` ranks,
    else the :data:`BOARD_AFTER`-th (``IPYMPI_SHM_COLL_AFTER=n``: the n-th; every rank
    sees the same environment)."""
    if size > SMALL:
        return 1
    try:
        return max(1, int(os.environ.get("IPYMPI_SHM_COLL_AFTER", BOARD_AFTER)))
    except ValueError:  # not a number: the default
        return BOARD_AFTER


class _Got:
    """What a round of :meth:`Lane.run` received from one peer, as the generators
    read it (``op.data``): the payload, or the buffer it was copied into."""

    __slots__ = ("data",)

    def __init__(self, data: memoryview) -> None:
        self.data = data


class Lane:
    """The straight path of one communicator: its schedules, and the call in progress.

    Kept in the communicator's ``lane`` slot. Peers are communicator ranks, as
    in ``core.algorithms`` and ``core.reductions``; ``world`` maps them to the
    world ranks that frames are sent to. A call begins with :meth:`start`,
    runs its rounds with :meth:`run`, :meth:`take` and :meth:`send_all`, and
    ends with :meth:`finish` (the caller then releases the engine).
    """

    __slots__ = (
        "__weakref__",
        "asked",
        "board",
        "board_from",
        "call",
        "comm",
        "context",
        "engine",
        "idle",
        "others",
        "peer",
        "queue",
        "rank",
        "rounds",
        "seq",
        "sig",
        "size",
        "waits",
        "world",
    )

    def __init__(self, impl: Any) -> None:
        engine = impl.engine
        rank, size, world = impl.rank, impl.size, impl.world_ranks
        self.engine = engine
        self.context = impl.context + 1
        self.rank = rank
        self.size = size
        self.world = world
        self.others = tuple(r for r in range(size) if r != rank)  # the other comm ranks
        # Messages of this context that came before their receive (live: an ExactQueue).
        self.queue = engine.matcher.pending_in(self.context)
        assert type(self.queue) is ExactQueue, "a collective context"
        self.waits = self._blocked_in  # bound once: told to observers at every call
        self.comm: Any = None
        self.call = ""
        self.seq = self.sig = self.rounds = 0
        self.peer = -1
        # The communicator's shared board (``progress.shmcoll``): None until a straight
        # call decides (from board_from on), False when it has none.
        self.board: Any = None
        # The number of the communicator's first collective that may set its board up
        # (board_after), when it may have one: its collectives are numbered from
        # first_of, alike on every rank.
        first = engine.ledger.first_of(self.context)
        self.board_from = first + board_after(size) - 1
        self.idle: Any = None  # what a wait on the board does between sleeps
        self.asked = False  # whether this call asked the rank it waits for (CHECK)

    def close(self) -> None:
        """The communicator is freed: let go of its board."""
        board = self.board
        if board:
            self.board = False
            hooks = self.engine.wake_hooks
            if board.ring_self in hooks:
                hooks.remove(board.ring_self)
            board.close()

    # -- a call ----------------------------------------------------------------------------
    def start(self, comm: Any, call: str, sig: int, board: Board | None = None) -> None:
        """Begin a call (the engine held): number it in the engine's collective
        ledger, as :class:`CollOp` does, tell observers that it waits, and when it
        runs on ``board``, say so there (every rank does before any writes its slot:
        :meth:`~ipympi.progress.shmcoll.Board.begin`)."""
        engine = self.engine
        ledger = engine.ledger
        if ledger.errors:  # a mismatch reported after this rank left that call
            check_reported(engine, self.context, call)
        self.seq = ledger.begin(self.context, sig, self.world)
        self.comm = comm
        self.call = call
        self.sig = sig
        self.rounds = 0
        self.peer = -1
        self.asked = False
        engine.waiting = self.waits
        engine.waiting_since = _monotonic()
        if board is not None:
            board.begin(self.seq)

    def run(self, algorithm: Algorithm) -> Any:
        """Run ``algorithm`` (a generator of ``core.algorithms`` or ``core.reductions``,
        the very one the general path runs: one source of each algorithm) in this call:
        each round sends through ``Engine.send_eager`` (large data through an
        operation), receives straight off the socket (:meth:`receive`), then waits
        for its large sends; a local step is passed over. Returns its result."""
        receive, wait_for, advance = self.receive, self.wait_for, algorithm.send
        try:
            rnd = next(algorithm)
            while True:
                sends, recvs = rnd.sends, rnd.recvs
                if not (sends or recvs):
                    rnd = advance(_NOTHING)
                    continue
                self._next_round()
                large = self._send(sends) if sends else None
                got = [
                    _Got(receive(peer, None if into is None else into.nbytes, into))
                    for peer, into in recvs
                ]
                if large:
                    for op in large:
                        wait_for(op)
                rnd = advance(got)
        except StopIteration as stop:
            return stop.value

    def take(self, frm: int, nbytes: int | None, into: memoryview | None = None) -> memoryview:
        """A round that only receives this call's message from comm rank ``frm``:
        ``nbytes`` long (any size when None), copied into ``into`` when given.
        Returns the payload."""
        self._next_round()
        return self.receive(frm, nbytes, into)

    def bcast_rounds(self, root: int, mem: memoryview) -> None:
        """A binomial-tree broadcast of ``mem`` from comm rank ``root``, in this call."""
        self.run(bcast_binomial(self.rank, self.size, root, mem))

    def allreduce_rounds(self, values: Values, value: Any) -> Any:
        """Recursive doubling of ``value`` in this call; the result."""
        return self.run(allreduce_recursive_doubling(self.rank, self.size, values, value))

    def send_all(self, sends: Iterable[tuple[int, Any]]) -> list[Operation]:
        """A round that sends each ``(peer, data)`` in turn; the large sends,
        which the caller waits for (:meth:`wait_for`) once it may."""
        self._next_round()
        return self._send(sends)

    def _next_round(self) -> None:
        """Count a round of this call; fail at once if a mismatch of it was reported."""
        self.rounds += 1
        if self.engine.ledger.errors:
            self.check_round()

    def _send(self, sends: Iterable[tuple[int, Any]]) -> list[Operation]:
        send_eager, world = self.engine.send_eager, self.world
        context, rank, seq, sig = self.context, self.rank, self.seq, self.sig
        large = []
        for to, data in sends:
            if not send_eager(world[to], context, rank, seq, data, sig):
                op = self.send_large(to, data)
                if op is not None:
                    large.append(op)
        return large

    def finish(self) -> None:
        """End the call: a message of it still queued means the ranks disagree."""
        if not self.queue.keys:  # nothing of this context waits: nothing left over
            self.engine.ledger.end(self.context, self.seq)
            return
        leftover = self.engine.end_collective(self.context, self.seq)
        if leftover is not None:
            coll = self._as_coll()
            coll.end_with_leftover(leftover)
            coll.raise_if_failed()

    # -- messages ---------------------------------------------------------------------------
    def send_large(self, to: int, data: Any) -> Operation | None:
        """Start sending ``data`` through an operation (a large message); the
        operation, or None if it is already done."""
        op = Operation(SEND, self.comm, self.call, to, self.seq)
        self.engine.start_send(
            op, data, self.world[to], self.context, self.rank, self.seq, False, self.sig
        )
        return None if op.done else op

    def wait_for(self, op: Operation) -> None:
        """Wait for a large send to complete; the call still waits afterwards."""
        engine = self.engine
        if not op.done:
            engine.wait(op, self.waits)
            engine.waiting = self.waits
            engine.waiting_since = _monotonic()

    def receive(self, frm: int, nbytes: int | None, into: memoryview | None) -> memoryview:
        """This call's message from comm rank ``frm``: ``nbytes`` long (any size when
        None), copied into ``into`` when given; the payload."""
        self.peer = frm
        frame = self.engine.collective_frame(self.queue, self.context, frm, self.seq)
        if (
            frame is None
            or signature_of(frame) != self.sig
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
        op = Operation(RECV, self.comm, self.call, frm, self.seq)
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
        reported = self.engine.ledger.take_mismatch(self.context, self.seq)
        if reported is not None:
            self._fail([], reported)

    def _fail(self, ops: list[Operation], reported: str | None = None) -> None:
        """Raise the error the general path gives for this round's outcome."""
        coll = self._as_coll()
        coll.fail_round(ops, reported)
        coll.raise_if_failed()

    def fail_with(self, ops: list[Operation]) -> None:
        """Raise the general path's error for a call whose round received ``ops``
        (completed: built from what a rank found on the board); the board wakes the
        other ranks to read the report."""
        try:
            self._fail(ops)
        finally:
            if self.board:
                self.board.ring_all()

    def fail_with_leftover(self, leftover: Any) -> None:
        """Raise the general path's error for a message of this call that came
        another way than expected (its sender called something else)."""
        self.engine.ledger.end(self.context, self.seq)
        coll = self._as_coll()
        try:
            coll.end_with_leftover(leftover)
            coll.raise_if_failed()
        finally:
            if self.board:
                self.board.ring_all()

    def _as_coll(self) -> CollOp:
        coll = CollOp(self.comm, self.call, None, self.sig, seq=self.seq)
        coll.rounds = self.rounds
        return coll

    def _blocked_in(self) -> WaitInfo:
        """What the call in progress waits for (built only when an observer asks)."""
        # a call on the board is one round (the reports' format stays the same)
        rounds = 1 if self.board else self.rounds
        call = f"{self.call} (collective #{self.seq}, round {rounds})"
        return WaitInfo(call, comm_label(self.comm), self.peer, self.seq)


def _on_board(lane: Lane, comm: Any, call: str, sig: int, run: Any, *args: Any) -> Any:
    """``run(lane, board, *args)`` as a call on ``lane``'s board (taken, begun and
    released here: the few steps of :func:`_path` that a board call needs), for a call
    whose arguments were recognized as the common case; its result, or
    :data:`GENERAL` (nothing done) while tracing."""
    board = lane.board
    engine = lane.engine
    engine.enter()
    try:
        if engine.tracer is not None or engine.transport is None or lane.board is not board:
            return GENERAL
        lane.start(comm, call, sig, board)
        return run(lane, board, *args)
    finally:
        _release(engine)


def _lane_with_board(impl: Any, root: Any = 0) -> Lane | None:
    """The communicator's lane when it has its board and ``root`` is a plain rank of it
    (the common case that the ``*_arrays`` calls below recognize), else None."""
    lane = impl.lane
    if lane is None or not lane.board or type(root) is not int or not 0 <= root < impl.size:
        return None
    return lane


def _blocks(array: Any, size: int, nbytes: int, writable: bool) -> memoryview | None:
    """The bytes of ``array`` (a numpy array) when it is a plain whole array of
    ``size`` blocks of ``nbytes`` bytes each (what the general parsing reads as such:
    ``bufforms.blocks``), else None."""
    if type(array) is not np.ndarray or array.size % size:
        return None
    mem = ndarray_bytes(array, writable)
    return mem if mem is not None and mem.nbytes == nbytes * size else None


def bcast_array(comm: Any, impl: Any, buf: Any, root: Any) -> Any:
    """A blocking Bcast of ``buf``, a numpy array, on a communicator that has its board,
    without the general parsing when it is a plain whole array and ``root`` a plain
    rank: None, or :data:`GENERAL` (nothing done: the call takes the general way)."""
    lane = _lane_with_board(impl, root)
    if lane is None:
        return GENERAL
    mem = ndarray_bytes(buf, root != lane.rank)
    if mem is None:
        return GENERAL
    sig = _signature("Bcast", root)
    return _on_board(lane, comm, "Bcast", sig, shmpath.bcast, root, mem)


def gather_arrays(comm: Any, impl: Any, sendbuf: Any, recvbuf: Any, root: Any) -> Any:
    """A blocking Gather of ``sendbuf``, a numpy array, as :func:`bcast_array` does
    (at the root, ``recvbuf`` must be a plain array of one such block per rank)."""
    lane = _lane_with_board(impl, root)
    if lane is None:
        return GENERAL
    block = ndarray_bytes(sendbuf, False)
    if block is None or block.nbytes > lane.board.capacity:
        return GENERAL
    out = None
    if lane.rank == root:
        out = _blocks(recvbuf, lane.size, block.nbytes, True)
        if out is None:
            return GENERAL
    sig = _signature("Gather", root)
    return _on_board(lane, comm, "Gather", sig, shmpath.gather, root, block, out)


def scatter_arrays(comm: Any, impl: Any, sendbuf: Any, recvbuf: Any, root: Any) -> Any:
    """A blocking Scatter into ``recvbuf``, a numpy array, as :func:`bcast_array` does
    (at the root, ``sendbuf`` must be a plain array of one such block per rank)."""
    lane = _lane_with_board(impl, root)
    if lane is None:
        return GENERAL
    block = ndarray_bytes(recvbuf, True)
    if block is None or block.nbytes * lane.size > lane.board.capacity:
        return GENERAL
    src = None
    if lane.rank == root:
        src = _blocks(sendbuf, lane.size, block.nbytes, False)
        if src is None:
            return GENERAL
    sig = _signature("Scatter", root)
    return _on_board(lane, comm, "Scatter", sig, shmpath.scatter, root, src, block)


def allgather_arrays(comm: Any, impl: Any, sendbuf: Any, recvbuf: Any) -> Any:
    """A blocking Allgather of ``sendbuf``, a numpy array, into ``recvbuf``, a plain
    array of one such block per rank, as :func:`bcast_array` does."""
    lane = _lane_with_board(impl)
    if lane is None:
        return GENERAL
    block = ndarray_bytes(sendbuf, False)
    if block is None or block.nbytes > lane.board.capacity:
        return GENERAL
    out = _blocks(recvbuf, lane.size, block.nbytes, True)
    if out is None:
        return GENERAL
    sig = _signature("Allgather", 0)
    return _on_board(lane, comm, "Allgather", sig, shmpath.allgather, block, out)


def alltoall_arrays(comm: Any, impl: Any, sendbuf: Any, recvbuf: Any) -> Any:
    """A blocking Alltoall of ``sendbuf``, a numpy array of one block per rank, into
    ``recvbuf``, one of the same size, as :func:`bcast_array` does."""
    lane = _lane_with_board(impl)
    if lane is None:
        return GENERAL
    size = lane.size
    whole = ndarray_bytes(sendbuf, False)
    if whole is None or sendbuf.size % size or whole.nbytes > lane.board.capacity:
        return GENERAL
    n = whole.nbytes // size
    out = _blocks(recvbuf, size, n, True)
    if out is None:
        return GENERAL
    sends = [whole[r * n : (r + 1) * n] for r in range(size)]
    recvs = [out[r * n : (r + 1) * n] for r in range(size)]
    sig = _signature("Alltoall", 0)
    return _on_board(lane, comm, "Alltoall", sig, shmpath.alltoall, sends, recvs)


def _path(
    impl: Any, comm: Any, call: str, sig: int, board_ok: bool = True, rounds_ok: bool = True
) -> tuple[Lane, Board | None] | None:
    """Take the engine and begin a straight call (:meth:`Lane.start`): (lane, the
    communicator's board when the call runs on it, else None), or None (engine
    released, nothing begun) for the general path: while tracing, or once a rank of
    the world has died on a communicator without a board (a wait on the board notices
    dead members itself). The communicator's first straight call makes its lane, and
    one that may run on a board, from its :func:`board_after`-th collective on, sets
    the board up (:func:`.shmpath.set_up`, which begins the call). ``board_ok``,
    ``rounds_ok``: whether this call may run on a board, and without one (facts of
    its arguments, alike on every rank)."""
    engine = impl.engine
    engine.enter()
    if engine.tracer is not None or engine.transport is None:
        engine.leave()
        return None
    lane = impl.lane
    if lane is None:
        lane = impl.lane = Lane(impl)
    board = lane.board if board_ok else False
    try:
        if isinstance(board, Board):  # the common case: set up already
            lane.start(comm, call, sig, board)
            return lane, board
        if board is None and engine.ledger.upcoming(lane.context) >= lane.board_from:
            made = shmpath.set_up(lane, comm, call, sig)
            if made is not None:
                return lane, made
        if not rounds_ok or engine.dead_peers:
            _release(engine)
            return None
        lane.start(comm, call, sig)
    except BaseException:
        _release(engine)
        raise
    return lane, None


def _release(engine: Any) -> None:
    """Give the engine back, no longer waiting (also when the call raised)."""
    engine.waiting = None
    engine.leave()


def _straight(
    impl: Any,
    comm: Any,
    call: str,
    sig: int,
    on_board: Any,
    rounds: Any,
    *args: Any,
    board_ok: bool = True,
) -> Any:
    """A straight call: ``on_board(lane, board, *args)`` on the communicator's board
    (:func:`_on_board` once it has one), else ``rounds(lane, *args)`` (None: the call
    needs a board; ``board_ok``: whether it may have one), begun, ended
    (:meth:`Lane.finish`) and released here; the call's result, or :data:`GENERAL`
    (nothing done) when it must take the general path (:func:`_path`)."""
    lane = impl.lane
    if board_ok and lane is not None and lane.board:
        return _on_board(lane, comm, call, sig, on_board, *args)
    got = _path(impl, comm, call, sig, board_ok, rounds is not None)
    if got is None:
        return GENERAL
    lane, board = got
    try:
        if board is not None:
            return on_board(lane, board, *args)
        result = rounds(lane, *args)
        lane.finish()
        return result
    finally:
        _release(lane.engine)


# What each call's rounds run without a board (the algorithms of ``core.algorithms``
# and ``core.reductions``, as the general path runs them).


def _barrier_rounds(lane: Lane) -> None:
    lane.run(barrier_dissemination(lane.rank, lane.size))


def _gather_rounds(lane: Lane, root: int, block: memoryview, out: memoryview | None) -> None:
    lane.run(gather_binomial(lane.rank, lane.size, root, block, out))


def _scatter_rounds(lane: Lane, root: int, src: memoryview | None, block: memoryview) -> None:
    lane.run(scatter_binomial(lane.rank, lane.size, root, src, block))


def _allgather_rounds(lane: Lane, block: memoryview, out: memoryview) -> None:
    lane.run(allgather_bruck(lane.rank, lane.size, block, out))


def _alltoall_rounds(lane: Lane, sends: Sequence[memoryview], recvs: Sequence[memoryview]) -> None:
    lane.run(alltoallw_pairwise(lane.rank, lane.size, sends, recvs))


def barrier(comm: Any, impl: Any, call: str) -> Any:
    """Dissemination barrier (``barrier_dissemination``'s rounds); None, or
    :data:`GENERAL` when the call must take the general path."""
    return _straight(impl, comm, call, BARRIER, shmpath.barrier, _barrier_rounds)


def bcast(
    comm: Any, impl: Any, call: str, root: int, mem: memoryview, rounds_ok: bool = True
) -> Any:
    """Binomial-tree broadcast of ``mem`` (``bcast_binomial``'s rounds); None, or
    :data:`GENERAL`. ``rounds_ok``: whether the rounds may run it without a board (a
    large broadcast between hosts takes the general path's scatter-allgather, while on
    one host, where a message is one copy, the tree is faster), alike on every rank."""
    rounds = Lane.bcast_rounds if rounds_ok else None
    sig = _signature("Bcast", root)
    return _straight(impl, comm, call, sig, shmpath.bcast, rounds, root, mem)


def gather(
    comm: Any, impl: Any, call: str, root: int, block: memoryview, out: memoryview | None
) -> Any:
    """Binomial gather of equal blocks (``gather_binomial``'s rounds): ``block`` is
    this rank's, ``out`` (the root's) receives every rank's in rank order; None,
    or :data:`GENERAL`."""
    sig = _signature("Gather", root)
    return _straight(impl, comm, call, sig, shmpath.gather, _gather_rounds, root, block, out)


def scatter(
    comm: Any, impl: Any, call: str, root: int, src: memoryview | None, block: memoryview
) -> Any:
    """Binomial scatter of equal blocks (``scatter_binomial``'s rounds) from ``src``
    (the root's, every rank's block in rank order) into ``block``; None, or
    :data:`GENERAL`."""
    sig = _signature("Scatter", root)
    return _straight(impl, comm, call, sig, shmpath.scatter, _scatter_rounds, root, src, block)


def allgather(comm: Any, impl: Any, call: str, block: memoryview, out: memoryview) -> Any:
    """Bruck's allgather (``allgather_bruck``'s rounds) of ``block`` into ``out``
    (every rank's block, in rank order); None, or :data:`GENERAL`."""
    sig = _signature("Allgather", 0)
    return _straight(impl, comm, call, sig, shmpath.allgather, _allgather_rounds, block, out)


def alltoall(
    comm: Any,
    impl: Any,
    call: str,
    kind: str,
    sends: Sequence[memoryview],
    recvs: Sequence[memoryview],
) -> Any:
    """The pairwise exchange of ``alltoallw_pairwise`` (``sends[r]``/``recvs[r]``:
    the blocks for/from rank r); None, or :data:`GENERAL`. Only Alltoall's equal
    blocks go on a board."""
    sig = _signature(kind, 0)
    return _straight(
        impl,
        comm,
        call,
        sig,
        shmpath.alltoall,
        _alltoall_rounds,
        sends,
        recvs,
        board_ok=kind == "Alltoall",
    )


def allreduce(comm: Any, impl: Any, call: str, kind: str, values: Values, value: Any) -> Any:
    """Recursive-doubling allreduce (``allreduce_recursive_doubling``'s rounds);
    returns the result (a new object, or an array of ``values``), or
    :data:`GENERAL`."""
    sig = _signature(kind, 0)
    return _straight(impl, comm, call, sig, shmpath.allreduce, Lane.allreduce_rounds, values, value)


def allreduce_into(comm: Any, impl: Any, call: str, values: Values, src: Any, out: Any) -> Any:
    """An Allreduce of arrays with a predefined op, combined from the communicator's
    board straight into ``out`` (:func:`.shmpath.allreduce_into`): the result
    (``out``), or without a board the recursive doubling's (a new array)."""
    sig = _signature("Allreduce", 0)
    return _straight(
        impl, comm, call, sig, shmpath.allreduce_into, _allreduce_copy_rounds, values, src, out
    )


def _allreduce_copy_rounds(lane: Lane, values: Values, src: Any, out: Any) -> Any:
    return lane.allreduce_rounds(values, src.copy())


def allreduce_direct(comm: Any, impl: Any, call: str, values: Values, src: Any, out: Any) -> Any:
    """A large Allreduce of arrays through the communicator's board, where each rank
    reads the others' memory (:func:`.shmpath.allreduce_direct`): the result (``out``),
    or :data:`GENERAL` without a board."""
    sig = _signature("Allreduce", 0)
    return _straight(impl, comm, call, sig, shmpath.allreduce_direct, None, values, src, out)


def reduce(
    comm: Any, impl: Any, call: str, root: int, values: Values, value: Any, kind: str = "Reduce"
) -> Any:
    """Reduce (``kind``: or lower-case reduce) through the communicator's board (root:
    the result; others: None), or :data:`GENERAL` without one (the general path's tree)."""
    sig = _signature(kind, root)
    return _straight(impl, comm, call, sig, shmpath.reduce, None, root, values, value)


def bcast_object(comm: Any, impl: Any, root: int, data: bytes | None) -> Any:
    """Lower-case bcast's pickle through the communicator's board (its bytes on every
    rank), or :data:`GENERAL` without one."""
    sig = _signature("bcast", root)
    return _straight(impl, comm, "bcast", sig, shmpath.bcast_object, None, root, data)
