"""The small blocking collectives through a shared board, for ranks that share one host.

When every rank of a communicator runs on one host, :mod:`.fast` gives its blocking
Barrier, Bcast, Gather, Scatter, Allgather, Alltoall and Allreduce (and lower-case
allreduce) to this module: every rank writes its contribution into its own slot of the
communicator's :class:`~ipympi.progress.shmcoll.Board` and reads the slots it needs.
No message crosses the kernel, and a rank that waits sleeps on a futex.

The algorithms are flat, one step each: a rank publishes, then reads. Allreduce reads
every rank's value from the board, its own included, and combines them in rank order,
so every rank computes bit-identical results and non-commutative operations hold.
Data that does not fit in a slot (a large pickle, a large block) still takes one step:
the slot says :data:`~ipympi.progress.shmcoll.OVERFLOW` and the data goes as the
straight path's messages of the same call (:meth:`.fast.Lane.send_all`,
:meth:`.fast.Lane.take`), so the ranks never disagree about the path.

Everything else is the straight path's: the call is numbered in the engine's ledger
and ended by :class:`.fast.Lane` (``start``, ``finish``), and each failure reads as on
the general path (:meth:`.fast.Lane.fail_with`): a slot of another call is a mismatch
(reported to every rank, which the board then wakes), a slot of another size is a
count mismatch, a rank that died while others wait (the progress thread rings the
waiters' bells, ``Engine.wake_hooks``) fails the call with ``ERR_OTHER``. Between
sleeps a waiting rank reads its socket (:func:`idle`): reports, dead ranks, a
message of this call from a rank that took another path, and after a while it asks
the rank it waits for which call it is in (``CHECK``), as the straight path does.
"""

from __future__ import annotations

import functools
import os
import struct
import time
import weakref
from collections.abc import Sequence
from typing import Any

from ...core.errors import ERR_NO_MEM, ERR_OTHER
from ...core.errors import Exception as MPIException
from ...core.lazynumpy import np
from ...core.protocol import EAGER_LIMIT
from ...core.reductions import ArrayValues, ObjectValues, Values
from ...progress.largebuf import buffer_address, remote_copy
from ...progress.operation import RECV, Operation
from ...progress.shmcoll import OVERFLOW, SLEEP, Board, available

__all__ = [
    "allgather",
    "allreduce",
    "allreduce_direct",
    "alltoall",
    "barrier",
    "bcast",
    "bcast_object",
    "gather",
    "idle",
    "reduce",
    "scatter",
    "set_up",
]

_monotonic = time.monotonic
ASK_AFTER = 0.2  # seconds of waiting before asking the awaited rank (CHECK)


# The byte length of a board's name as the first rank sends it to the others.
NAME_BYTES = 256


def set_up(
    lane: Any,
    comm: Any,
    call: str,
    sig: int,
) -> Board | None:
    """Give the communicator a shared board if its ranks all share this host (and
    boards work here), riding on the call being made, in its own number (so that
    numbering and reports stay as without boards): rank 0 creates the board and sends
    its name down the call's broadcast tree; every rank opens it, and the call then
    runs on the board (:meth:`~ipympi.progress.shmcoll.Board.begin`). The name goes as soon as
    every rank has started a call on the board: the rank that sees it removes it
    (:meth:`~ipympi.progress.shmcoll.Board.unlink_once_mapped`). When rank 0 cannot
    create one, the name is empty and the broadcast counts as a collective of its
    own; every rank then keeps the datagram path. The decision uses only what every
    rank knows alike; the lane keeps it."""
    engine = lane.engine
    transport = engine.transport
    if lane.size < 2 or not available() or not all(transport.same_host(w) for w in lane.world):
        lane.board = False
        return None
    board = None
    name = bytearray(NAME_BYTES)
    try:
        if lane.rank == 0:
            try:
                board = Board.create(0, lane.size, getattr(transport, "session_dir", None))
                name[: len(board.name)] = board.name.encode()
            except (OSError, ValueError):
                board = None
        lane.start(comm, call, sig)
        lane.bcast_rounds(0, memoryview(name))
        text = bytes(name).rstrip(b"\0").decode()
        if not text:  # no board: the broadcast was a call of its own
            lane.finish()
            lane.board = False
            return None
        if board is None:
            try:
                board = Board.open(text, lane.rank, lane.size)
            except (OSError, ValueError) as exc:
                raise MPIException(
                    ERR_NO_MEM, f"{call}: cannot map the communicator's shared memory: {exc}"
                ) from None
    except BaseException:
        if board is not None:
            if lane.rank == 0:
                board.unlink()
            board.close()
        raise
    lane.board = board
    _boarded.add(lane)
    if _drop_boards not in engine.resync_hooks:
        engine.resync_hooks.append(_drop_boards)
    lane.idle = functools.partial(idle, lane)
    board.release = functools.partial(_release_engine, engine)
    board.retake = functools.partial(_retake_engine, engine)
    nap = functools.partial(transport.wait, SLEEP)
    board.socket_sleep = functools.partial(_socket_sleep, engine, nap)
    board.nudge = functools.partial(_nudge, engine, lane.world)
    engine.wake_hooks.append(board.ring_self)
    board.begin(lane.seq)  # the call has its number: it goes on on the board
    return board


# The lanes with a board, so that a resynchronisation can drop them all.
_boarded: weakref.WeakSet[Any] = weakref.WeakSet()


def _drop_boards() -> None:
    """After the ranks realigned their collectives (an interrupted or failed cell),
    every rank drops its boards: a set-up cut short may have left some ranks with a
    board and others without, and the next call sets one up anew on all of them."""
    for lane in list(_boarded):
        board = lane.board
        if board and board.named:
            board.unlink()
        lane.close()
        lane.board = None
    _boarded.clear()


def _release_engine(engine: Any, undo: list[Any]) -> None:
    """Before a sleep on the board: when other threads are in MPI, let the engine go
    (however deeply held) so that they go on meanwhile, this wait counted among theirs
    (``progress.sharing``); ``list(*undo)`` takes it back (:func:`_retake_engine`)."""
    if engine.shared.blocked or engine.wanted:
        engine.shared.step_aside((engine.waiting, engine.waiting_since), undo)
        engine.waiting = None


def _socket_sleep(engine: Any, nap: Any) -> Any:
    """How a wait on the board sleeps instead of on its bell (``Board.socket_sleep``),
    when this rank awaits frames, which ring no bell: while frames of its own wait for
    room at full peers, until one has room (a few ms at most), so that a peer reading
    them gets the rest at once; while an operation in flight awaits a frame (a posted
    receive, whose sender may wait for this rank's answer; a send awaiting its answer;
    a nonblocking collective), until a frame comes in (``nap``). The wait's ``idle``
    then sends and handles them (:func:`idle`); board writers wake such a sleeper with a
    frame (:func:`_nudge`). None (the bell) otherwise, and while other threads are in
    MPI: they need the bell's sleep, which lets the engine go."""
    if engine.shared.blocked or engine.wanted:
        return None
    transport = engine.transport
    if transport.pending:
        return transport.wait_room
    if engine.awaits_frames():
        return nap
    return None


def _nudge(engine: Any, world: Sequence[int], rank: int) -> None:
    """Wake communicator rank ``rank``, asleep on its socket (``Board.nudge``)."""
    engine.nudge(world[rank])


def _retake_engine(engine: Any, undone: list[Any]) -> None:
    """After ``list(*undo)`` took the engine back: the holder's wait is its own again."""
    if undone:
        engine.waiting, engine.waiting_since = engine.shared.stepped_back(undone)


def idle(lane: Any) -> None:
    """Between sleeps: read the socket, and end the call if the news says so."""
    engine = lane.engine
    if engine.wanted:  # another thread waits to enter MPI: let it in, then take it back
        engine.leave()
        engine.enter()
        engine.waiting = lane.waits
    engine.poll_once()
    if engine.ledger.errors:
        lane.check_round()
    dead = engine.dead_peers
    if dead:
        gone = next((dead[w] for w in lane.world if w in dead), None)
        if gone is not None:
            op = _outcome(lane, lane.peer, 0, 0)
            op.peer_died = True
            op.error_detail = gone
            lane.fail_with([op])
    if lane.queue:
        _check_strays(lane)
    if not lane.asked and _monotonic() - engine.waiting_since > ASK_AFTER:
        lane.asked = True
        transport = engine.transport
        if transport is not None and transport.quiet is not None and lane.peer >= 0:
            engine.awaiting = (lane.context, lane.peer, lane.seq)
            transport.quiet()


def _check_strays(lane: Any) -> None:
    """Fail the call if a message of it came from a rank that did not use the board
    for it (its slot is not marked :data:`OVERFLOW`): the ranks disagree about it."""
    seq, board = lane.seq, lane.board
    for env in list(lane.queue):
        if env.tag != seq:
            continue
        source = env.source
        if board.slot_ready(source, seq) and board.read(source, seq)[1] == OVERFLOW:
            continue  # data that did not fit in the slot
        if lane.engine.matcher.remove(env):
            lane.fail_with_leftover(env)


def _outcome(lane: Any, peer: int, sig: int, count: int) -> Operation:
    """A completed receive that tells :class:`CollOp` what a slot held."""
    op = Operation(RECV, lane.comm, lane.call, peer, lane.seq)
    op.source = peer
    op.rsig = sig
    op.count = count
    op.done = True
    return op


def _take(
    lane: Any,
    board: Board,
    peer: int,
    nbytes: int | None,
    into: memoryview | None = None,
    tree: bool = False,
    fits: bool = False,
) -> memoryview:
    """``peer``'s data of this call (``nbytes`` long unless None), copied into ``into``
    when given; raise the general path's error if it is of another call or size. Data
    that did not fit in ``peer``'s slot comes as a message from it, or down the
    broadcast tree rooted at it when ``tree`` (all of its data, ``nbytes`` long); when
    ``fits`` (this rank's ``nbytes`` did fit, and no rank sends data that fits none),
    such data is of another size."""
    seq = lane.seq
    if not board.slot_ready(peer, seq):
        lane.peer = peer
        board.wait_slot(peer, seq, lane.idle)
    sig, count, data = board.read(peer, seq)
    if sig != lane.sig:
        lane.fail_with([_outcome(lane, peer, sig, count)])
    if count == OVERFLOW:
        if fits or (tree and board.data_bytes(peer, seq) != nbytes):
            assert nbytes is not None
            _size_mismatch(lane, peer, sig, board.data_bytes(peer, seq), nbytes, into)
        lane.peer = peer
        if tree:
            assert into is not None
            lane.bcast_rounds(peer, into)
            return into
        return lane.take(peer, nbytes, into)
    if nbytes is not None and count != nbytes:
        _size_mismatch(lane, peer, sig, count, nbytes, into)
    if into is None:
        return data
    if count:
        into[:] = data
    return into


def _size_mismatch(
    lane: Any, peer: int, sig: int, count: int, nbytes: int, into: memoryview | None = None
) -> None:
    """Raise the general path's error for ``count`` bytes from ``peer`` where this rank
    expects ``nbytes`` (into ``into``, when given)."""
    op = _outcome(lane, peer, sig, count)
    op.mem = into if into is not None else memoryview(bytearray(nbytes))
    lane.fail_with([op])


def _wait_all(lane: Any, board: Board) -> None:
    """Wait until every rank has written its slot of this call (one sleep at most)."""
    peer = board.missing(lane.seq)
    if peer >= 0:
        lane.peer = peer
        board.wait_all(lane.seq, lane.idle)


def _end(lane: Any, board: Board, large: Sequence[Operation] = ()) -> None:
    """End the call. Every rank writes its slot in every call (if only to say which
    call it is in) and, at the end, compares the slots already written: of two ranks in
    different calls, at least one sees the other's (each write is fenced before its
    writer looks), also when neither reads the other's data (a Bcast's root and a
    Reduce's other ranks)."""
    for op in large:
        lane.wait_for(op)
    other = board.first_other_call(lane.seq, lane.sig)
    if other >= 0:
        sig, count, _ = board.read(other, lane.seq)
        lane.fail_with([_outcome(lane, other, sig, count)])
    lane.finish()


def _put(lane: Any, board: Board, data: Any, peers: Any) -> list[Operation]:
    """Publish ``data``; when it overflows the slot, also send it to ``peers`` (an
    iterable of ranks, or (rank, data) pairs when each gets its own part)."""
    board.publish(lane.seq, lane.sig, data, lane.idle)
    nbytes = len(data) if type(data) is bytes else data.nbytes
    if nbytes <= board.capacity:
        return []
    sends = [p if type(p) is tuple else (p, data) for p in peers]
    return lane.send_all(sends)


def barrier(lane: Any, board: Board) -> None:
    """Every rank publishes an empty slot and waits for every other's."""
    seq, sig = lane.seq, lane.sig
    board.publish(seq, sig, b"", lane.idle)
    _wait_all(lane, board)
    unlike = board.first_unlike(seq, sig, 0)
    if unlike >= 0:
        _take(lane, board, unlike, 0)  # raises the general path's error
    lane.finish()  # every slot compared


def bcast(lane: Any, board: Board, root: int, mem: Any) -> None:
    """The root publishes ``mem``; the others copy it out. Data larger than a slot goes
    down the straight path's binomial tree (:meth:`.fast.Lane.bcast_rounds`) as eager
    messages (the root need not wait for its readers), and data larger than an eager
    message is read straight from the root's memory (:func:`_bcast_large`). Every
    rank follows the root's choice, which its slot shows, so a rank whose buffer has
    another size gets the general path's error instead of waiting on a path the root
    did not take."""
    nbytes = mem.nbytes
    seq, sig = lane.seq, lane.sig
    if nbytes > EAGER_LIMIT:
        _bcast_large(lane, board, root, mem)
    elif lane.rank == root:
        board.publish(seq, sig, mem, lane.idle)
        if nbytes > board.capacity:
            lane.bcast_rounds(root, mem)
    else:
        board.publish(seq, sig, b"", lane.idle)  # which call this rank is in
        data = board.look(root, seq, sig, nbytes)
        if data is not None:
            mem[:] = data
        else:  # not there yet, or not as expected
            fits = nbytes <= board.capacity
            _take(lane, board, root, nbytes, mem, tree=not fits, fits=fits)
    _end(lane, board)


def _bcast_large(lane: Any, board: Board, root: int, mem: Any) -> None:
    """A broadcast larger than an eager message, read from the root's memory
    (``process_vm_readv``, one copy). The root's slot says where its buffer is
    (:data:`_WHERE`), every other rank's where its own is (:data:`_READER`). The buffer
    is cut in one piece per rank: each other rank reads every piece but its own, which
    the root writes into it meanwhile (``process_vm_writev``) when that spreads the
    copying more evenly over the cores (:func:`_root_writes`; its step 1 says it did,
    step 2 that it did not: the reader then reads that piece too). Each reader says it
    is done (step 1, or :data:`REFUSED`), and the root returns once every reader is (its
    buffer may change afterwards). When a rank cannot read other ranks' memory, the
    data goes down the straight path's binomial tree instead
    (:meth:`.fast.Lane.bcast_rounds`), in the same call."""
    seq, sig, me, size = lane.seq, lane.sig, lane.rank, lane.size
    vm = lane.engine.vm
    address = buffer_address(mem)
    if me == root:
        helps = _root_writes(size, board.cores)
        where = _WHERE.pack(os.getpid(), address, int(helps), int(vm.available))
        board.publish(seq, sig, mem, lane.idle, where)
    else:
        board.publish(seq, sig, _READER.pack(os.getpid(), address, int(vm.available)), lane.idle)
    _wait_all(lane, board)
    able = True
    readers = []
    for r in range(size):
        theirs, count, data = board.read(r, seq)
        if theirs != sig:
            lane.fail_with([_outcome(lane, r, theirs, count)])
        if r == root:
            if count != OVERFLOW or board.data_bytes(r, seq) != mem.nbytes:
                _size_mismatch(lane, r, theirs, board.data_bytes(r, seq), mem.nbytes, mem)
            able = able and bool(_where(board, r, seq)[3])
        elif count != _READER.size:  # its buffer fits in a slot: the sizes differ, it says so
            board.wait_for_news(lane.idle)
        else:
            reader = _READER.unpack(data)
            able = able and bool(reader[2])
            readers.append((r, reader))
    if not able:
        lane.bcast_rounds(root, mem)
        return
    n = mem.nbytes
    bounds = _pieces(n, size)
    if me == root:
        wrote = helps
        if helps:
            try:
                for r, (pid, theirs, _) in readers:
                    lo, hi = bounds[r]
                    remote_copy(pid, [(address + lo, theirs + lo, hi - lo)], True)
            except OSError:
                wrote = False
        board.reach(seq, 1 if wrote else 2)
        board.wait_step(seq, 1, lane.idle)
        other = _refused(lane, board)
        if other is not None:
            _refuse(lane, f"rank {other} could not read rank {me}'s memory")
        return
    pid, source, writes = _where(board, root, seq)[:3]
    lo, hi = bounds[me] if writes else (0, 0)  # the piece the root writes
    try:
        if writes:
            _read(vm, pid, source, mem, 0, lo)
            _read(vm, pid, source, mem, hi, n)
            board.wait_step(seq, 1, lane.idle, only=root)
            if board.step_of(root, seq) != 1:  # it did not write: read that piece too
                _read(vm, pid, source, mem, lo, hi)
        else:
            _read(vm, pid, source, mem, 0, n)
    except OSError as exc:
        board.reach(seq, REFUSED)
        _refuse(lane, f"rank {me} could not read rank {root}'s memory: {exc}")
    board.reach(seq, 1)


def _pieces(n: int, size: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` of each rank's piece when ``n`` items are cut in ``size`` pieces."""
    return [(c * n // size, (c + 1) * n // size) for c in range(size)]


def _root_writes(size: int, cores: int) -> bool:
    """Whether the root of a large Bcast on ``size`` ranks sharing ``cores`` cores writes
    each reader's own piece: when the busiest core then copies less. Alone, each of
    the ``size - 1`` readers copies the whole buffer, and the busiest core runs
    ``ceil((size - 1) / cores)`` of them; when the root writes, each of the ``size``
    ranks copies ``(size - 1) / size`` of it, ``ceil(size / cores)`` of them on the
    busiest core. So it writes with a core of its own (2 ranks on 2 cores) and when
    the ranks fill the cores evenly (4 or 6 on 2), not when that adds a rank to the
    busiest core (3 or 5 on 2: measured 20% slower)."""
    busiest_alone = -(-(size - 1) // cores) * size  # both times size: whole numbers
    busiest_writing = -(-size // cores) * (size - 1)
    return busiest_writing < busiest_alone


def _read(vm: Any, pid: int, source: int, mem: Any, first: int, last: int) -> None:
    """Copy bytes ``[first, last)`` of ``pid``'s memory at ``source`` into ``mem``'s
    (a byte memoryview); ``OSError`` when refused."""
    if last > first and not vm.read(pid, source + first, mem[first:last]):
        raise OSError(vm.reason)


def _where(board: Board, rank: int, seq: int) -> tuple[int, int, int, int]:
    """What ``rank``'s slot of collective ``seq`` says of its buffers (:data:`_WHERE`)."""
    return _WHERE.unpack(board.note(rank, seq, _WHERE.size))


def _refused(lane: Any, board: Board) -> int | None:
    """The first other rank that says it could not read memory in this call, or None."""
    seq = lane.seq
    return next((r for r in lane.others if board.step_of(r, seq) == REFUSED), None)


def gather(lane: Any, board: Board, root: int, block: Any, out: Any) -> None:
    """The others publish their blocks; the root copies them into ``out`` in rank order."""
    n = block.nbytes
    large: list[Operation] = []
    if lane.rank != root:
        large = _put(lane, board, block, (root,))
    else:
        seq, sig, look = lane.seq, lane.sig, board.look
        board.publish(seq, sig, b"", lane.idle)
        for r in range(lane.size):
            part = out[r * n : (r + 1) * n]
            data = block if r == root else look(r, seq, sig, n)
            if data is not None:
                part[:] = data
            else:
                _take(lane, board, r, n, part)
    _end(lane, board, large)


def scatter(lane: Any, board: Board, root: int, src: Any, block: Any) -> None:
    """The root publishes every block; each rank copies out its own."""
    me, n = lane.rank, block.nbytes
    large: list[Operation] = []
    if me == root:
        parts = ((r, src[r * n : (r + 1) * n]) for r in lane.others)  # when src overflows
        large = _put(lane, board, src, parts)
        block[:] = src[me * n : (me + 1) * n]
    else:
        seq, sig, whole = lane.seq, lane.sig, n * lane.size
        board.publish(seq, sig, b"", lane.idle)
        if whole > board.capacity:
            _take(lane, board, root, n, block)
        else:
            data = board.look(root, seq, sig, whole)
            if data is None:
                data = _take(lane, board, root, whole)
            block[:] = data[me * n : (me + 1) * n]
    _end(lane, board, large)


def allgather(lane: Any, board: Board, block: Any, out: Any) -> None:
    """Every rank publishes its block and copies every other's into ``out``."""
    me, n, seq, sig, look = lane.rank, block.nbytes, lane.seq, lane.sig, board.look
    large = _put(lane, board, block, lane.others)
    _wait_all(lane, board)
    out[me * n : (me + 1) * n] = block
    for r in lane.others:
        part = out[r * n : (r + 1) * n]
        data = look(r, seq, sig, n)
        if data is not None:
            part[:] = data
        else:
            _take(lane, board, r, n, part)
    _end(lane, board, large)


def alltoall(
    lane: Any, board: Board, sends: Sequence[memoryview], recvs: Sequence[memoryview]
) -> None:
    """Every rank publishes all its blocks (equal ones) and copies out those for it."""
    me, size = lane.rank, lane.size
    n = recvs[me].nbytes
    whole = b"".join(sends)
    large = _put(lane, board, whole, ((r, sends[r]) for r in lane.others))
    _wait_all(lane, board)
    recvs[me][:] = sends[me]
    seq, sig, look, whole = lane.seq, lane.sig, board.look, n * size
    overflow = whole > board.capacity
    for r in lane.others:
        if overflow:
            _take(lane, board, r, n, recvs[r])
            continue
        data = look(r, seq, sig, whole)
        if data is None:
            data = _take(lane, board, r, whole)
        recvs[r][:] = data[me * n : (me + 1) * n]
    _end(lane, board, large)


def reduce(lane: Any, board: Board, root: int, values: Values, value: Any) -> Any:
    """The others publish their values; the root combines every rank's in rank order
    and returns the result (the others None)."""
    if lane.rank != root:
        large = _put(lane, board, values.wire(value), (root,))
        _end(lane, board, large)
        return None
    board.publish(lane.seq, lane.sig, b"", lane.idle)  # which call this rank is in
    acc = _combined(lane, board, values, value, values.wire(value))
    _end(lane, board, [])
    return acc


def bcast_object(lane: Any, board: Board, root: int, data: bytes | None) -> memoryview | bytes:
    """The root publishes ``data`` (a pickle); the others read it (its bytes)."""
    large: list[Operation] = []
    if lane.rank == root:
        assert data is not None
        large = _put(lane, board, data, lane.others)
        got: memoryview | bytes = data
    else:
        board.publish(lane.seq, lane.sig, b"", lane.idle)
        got = bytes(_take(lane, board, root, None))
    _end(lane, board, large)
    return got


def allreduce(lane: Any, board: Board, values: Values, value: Any) -> Any:
    """Every rank publishes its value, then combines every rank's, read from the board
    (its own too), in rank order; returns the result. Buffers too large for a slot (on
    every rank alike: they have one size) take the straight path's recursive doubling
    (:meth:`.fast.Lane.allreduce_rounds`) in the same call; a rank whose array has
    another size than the others' gets the size-mismatch error, whichever path its own
    size alone would take."""
    wire = values.codec[0] if values.codec else values.wire
    data = wire(value)
    if type(values) is ObjectValues:  # pickles: each rank's own size
        large = _put(lane, board, data, lane.others)
        _wait_all(lane, board)
        acc = _combined(lane, board, values, value, data)
        _end(lane, board, large)
        return acc
    board.publish(lane.seq, lane.sig, data, lane.idle)
    _wait_all(lane, board)
    nbytes = len(data)
    if nbytes > board.capacity:
        _check_sizes(lane, board, nbytes)
        acc = lane.allreduce_rounds(values, value)
    else:  # each slot's call and size are checked as it is read
        acc = _combined(lane, board, values, value, data, fits=True)
    _end(lane, board, [])
    return acc


def allreduce_into(lane: Any, board: Board, values: ArrayValues, src: Any, out: Any) -> Any:
    """An Allreduce of arrays with a predefined op (``src``: this rank's contribution,
    ``out``: where its result goes, both contiguous 1-D arrays of one type; the same
    memory with IN_PLACE): every rank publishes ``src``, then combines every rank's
    slot, read where it lies, in rank order (``((v_0 op v_1) op v_2) ...``, the same
    bits as every other path) straight into ``out``: each step copies the next rank's
    data into the array that takes the step's result (``out`` or, from 3 ranks, one
    other array in turn, so that the last step lands in ``out``), with no copy of the
    contribution and no array per rank, as :func:`allreduce` makes. Returns ``out``;
    data larger than a slot go :func:`allreduce`'s way."""
    nbytes = src.nbytes
    if nbytes > board.capacity:
        return allreduce(lane, board, values, src.copy())
    board.publish(lane.seq, lane.sig, values.wire(src), lane.idle)
    _wait_all(lane, board)
    seq, sig, look, size = lane.seq, lane.sig, board.look, lane.size
    views = []
    for r in range(size):  # each slot's call and size are checked as it is read
        data = look(r, seq, sig, nbytes)
        views.append(_take(lane, board, r, nbytes, fits=True) if data is None else data)
    if nbytes:  # after publish: with IN_PLACE, out was this rank's contribution
        spare = np.empty_like(out) if size > 2 else out
        acc = np.frombuffer(views[0], dtype=src.dtype)
        for k in range(1, size):
            step = out if (size - 1 - k) % 2 == 0 else spare
            memoryview(step).cast("B")[:] = views[k]
            acc = values.combine(acc, step)  # step = acc op v_k
    _end(lane, board, [])
    return out


# What the slot of a large Allreduce tells (:func:`allreduce_direct`): the rank's pid, the
# addresses of its contribution and of its result, and whether it can read other ranks'
# memory (1) or not (0).
_WHERE = struct.Struct("<qqqq")
# What the slot of a reader of a large Bcast tells: its pid, its buffer's address, and
# whether it can read other ranks' memory.
_READER = struct.Struct("<qqq")
REFUSED = 3  # the step a rank says it reached when it could not read another's memory


def allreduce_direct(lane: Any, board: Board, values: Values, src: Any, out: Any) -> Any:
    """A large Allreduce of arrays (``src``: this rank's contribution, ``out``: where
    its result goes, both contiguous 1-D arrays of one type; the same memory with
    IN_PLACE) computed where the data lie; returns the result (``out``).

    Rank ``c`` reads the ``c``-th piece of every rank's contribution straight from
    that rank's memory (``process_vm_readv``), combines them in rank order into the
    ``c``-th piece of its result, then reads every other piece of the result from the
    rank that computed it: as many bytes copied as by the ring, in three steps on the
    board instead of ``2 (p - 1)`` rounds of messages (the ring's pieces, for the same
    commutative ops), and every rank gets the same bits. The slot says where the rank's
    arrays are (:data:`_WHERE`; its byte count is checked as on any board call); step 1
    says its piece is computed (or :data:`REFUSED`: a read was refused, and every rank
    fails the call), step 2 that it has read every piece it needs (or failed to: it
    alone fails the call), so no rank leaves (and lets its arrays change) while another
    still reads them. When a rank cannot read other ranks' memory at all, every rank
    takes the recursive doubling instead, in the same call."""
    seq, sig, me, size = lane.seq, lane.sig, lane.rank, lane.size
    vm = lane.engine.vm
    where = _WHERE.pack(os.getpid(), src.ctypes.data, out.ctypes.data, int(vm.available))
    board.publish(seq, sig, memoryview(src), lane.idle, where)
    _wait_all(lane, board)
    _check_sizes(lane, board, src.nbytes)
    places = [_WHERE.unpack(where) if r == me else _where(board, r, seq) for r in range(size)]
    if not all(place[3] for place in places):  # a rank cannot read the others' memory
        acc = lane.allreduce_rounds(values, src.copy())
        _end(lane, board, [])
        return acc
    n, item = src.size, src.itemsize
    bounds = _pieces(n, size)
    lo, hi = bounds[me]
    refused = _combine_piece(vm, places, me, values, src, out, lo, hi)
    board.reach(seq, REFUSED if refused else 1)
    board.wait_step(seq, 1, lane.idle)
    if refused:
        _refuse(lane, f"rank {me} {refused}")
    other = _refused(lane, board)
    if other is not None:
        _refuse(lane, f"rank {other} could not read another rank's memory")
    failed = ""
    result = memoryview(out).cast("B")
    for c in lane.others:
        first, last = bounds[c]
        try:
            _read(vm, places[c][0], places[c][2], result, first * item, last * item)
        except OSError as exc:
            failed = f"rank {me} could not read rank {c}'s memory: {exc}"
            break
    board.reach(seq, 2)
    board.wait_step(seq, 2, lane.idle)  # also after a failure: the others read this rank's
    if failed:
        _refuse(lane, failed)
    _end(lane, board, [])
    return out


def _combine_piece(
    vm: Any, places: list[Any], me: int, values: Values, src: Any, out: Any, lo: int, hi: int
) -> str:
    """Combine piece ``[lo, hi)`` of every rank's contribution (read from its memory at
    ``places``), in rank order, into ``out[lo:hi]``; what went wrong, or ''."""
    if hi == lo:
        return ""
    item = src.itemsize
    n = (hi - lo) * item  # bytes of the piece
    spares = (np.empty(hi - lo, dtype=src.dtype), np.empty(hi - lo, dtype=src.dtype))
    last = len(places) - 1
    acc = None
    for q, (pid, address, _, _) in enumerate(places):
        # the last piece goes straight into the result (with IN_PLACE, this rank's own
        # piece is there: it is read before, into a spare, unless it is the last one)
        target: Any = out[lo:hi] if q == last else spares[q % 2]
        if q == me:
            np.copyto(target, src[lo:hi])
        else:
            try:
                _read(vm, pid, address + lo * item, memoryview(target).cast("B"), 0, n)
            except OSError as exc:
                return f"could not read rank {q}'s memory: {exc}"
        acc = target if acc is None else values.combine(acc, target)
    return ""


def _refuse(lane: Any, why: str) -> None:
    """End the call with ``ERR_OTHER`` (every rank fails it: no report is sent)."""
    lane.engine.ledger.mismatched.add((lane.context, lane.seq))
    lane.engine.abandon_collective(lane.context, lane.seq)
    raise MPIException(ERR_OTHER, f"{lane.call}: {why}")


def _check_sizes(lane: Any, board: Board, nbytes: int) -> None:
    """Raise the general path's error if a rank (its slot written) is in another call,
    or its data is not ``nbytes`` long."""
    seq = lane.seq
    for r in lane.others:
        sig, count, _ = board.read(r, seq)
        if sig != lane.sig:
            lane.fail_with([_outcome(lane, r, sig, count)])
        theirs = board.data_bytes(r, seq)
        if theirs != nbytes:
            _size_mismatch(lane, r, sig, theirs, nbytes)


def _combined(
    lane: Any, board: Board, values: Values, value: Any, data: Any, fits: bool = False
) -> Any:
    """Every rank's value (``value``, whose bytes are ``data``, for this rank's), read
    from the board and combined in rank order. ``fits``: every rank's data must fit in
    its slot (an Allreduce's, alike on every rank): one that did not is a size mismatch."""
    arrays = type(values) is ArrayValues
    decode, combine, nbytes = (values.codec or (None, values.decode, values.combine, None))[1:]
    if nbytes is None:
        nbytes = values.nbytes
    me, seq, sig, look = lane.rank, lane.seq, lane.sig, board.look
    # this rank's own array as it is (a fresh copy, combined into), unless its bytes are
    # still being sent (they did not fit in the slot)
    own = arrays and len(data) <= board.capacity
    acc = None
    for r in range(lane.size):
        if arrays:
            if r == me and own:
                other = value
            else:
                other, target = values.target(value)
                if r == me:
                    target[:] = data  # type: ignore[index]
                else:
                    _take(lane, board, r, target.nbytes, target, fits=fits)  # type: ignore[union-attr]
        elif r == me:
            other = decode(memoryview(data))
        else:
            got = None if nbytes is None else look(r, seq, sig, nbytes)
            other = decode(_take(lane, board, r, nbytes, fits=fits) if got is None else got)
        acc = other if r == 0 else combine(acc, other)
    return acc
