"""Collectives through a shared board (``progress.shmcoll``, ``mpi.coll.shmpath``).

The board's pieces as pure logic in one process (two mappings of one segment, a
second thread as the other rank); then real ranks on one host: every call against
numpy at 2, 4 and 16 ranks, calls that overflow their slot, the board beside the
general path and nonblocking calls on one communicator, Ctrl-C during a wait, a
deadlock report that names the wait, and nothing left in ``/dev/shm``. (A rank that
dies while the others wait on the board: ``test_faults.py``, in a notebook session,
where the others go on.)
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, ROOT, assert_ok, mpi_program

from ipympi.progress import shmcoll
from ipympi.progress.shmcoll import (
    DEPTH,
    DEPTH_SMALL,
    OVERFLOW,
    SLOT_DATA,
    SMALL,
    Board,
    board_bytes,
    depth,
)

pytestmark = pytest.mark.skipif(not shmcoll.available(), reason="boards need Linux on x86-64")


@pytest.fixture
def run_mpi(run_mpi):
    """Jobs whose communicators get their boards at their first collective (as those of
    more than 8 ranks do), so that every call of these tests runs on one; the rule for
    small communicators (from their fifth) has tests of its own, at the end."""

    def run(*args, env=None, **kwargs):
        return run_mpi(*args, env={"IPYMPI_SHM_COLL_AFTER": "1", **(env or {})}, **kwargs)

    return run


# -- the board, in one process ---------------------------------------------------------
@pytest.fixture
def pair():
    first = Board.create(0, 2)
    second = Board.open(first.name, 1, 2)
    first.unlink()
    first.begin(0)  # as the set-up's last collective does
    second.begin(0)
    yield first, second
    second.close()
    first.close()


def _no_idle() -> None:
    pass


def test_a_published_slot_is_read_with_its_signature_and_data(pair) -> None:
    first, second = pair
    assert not second.slot_ready(0, 1)
    first.begin(1)
    first.publish(1, 77, b"hello", _no_idle)
    assert second.slot_ready(0, 1) and not second.slot_ready(0, 3)
    sig, count, data = second.read(0, 1)
    assert (sig, count, bytes(data)) == (77, 5, b"hello")
    # the next collective's slot is another one: a rank may run ahead
    first.publish(2, 78, memoryview(b"xy"), _no_idle)
    assert bytes(second.read(0, 1)[2]) == b"hello"
    second.begin(1)  # publishing #2 needs every rank to have started #1
    assert bytes(second.read(0, 2)[2]) == b"xy"


def test_data_larger_than_a_slot_is_marked_as_overflow(pair) -> None:
    first, second = pair
    second.begin(1)
    first.publish(1, 5, bytes(SLOT_DATA + 1), _no_idle)
    assert second.read(0, 1)[:2] == (5, OVERFLOW)
    first.publish(2, 5, bytes(SLOT_DATA), _no_idle)
    assert second.read(0, 2)[1] == SLOT_DATA


def test_a_sleeping_reader_is_woken_by_the_write(pair) -> None:
    first, second = pair
    second.spin = 0.0  # sleep at once
    second._timeout.tv_sec = 10  # a sleep that times out cannot end this wait in time
    second.begin(2)
    timer = threading.Timer(0.2, first.publish, (3, 1, b"z", _no_idle))
    idles = []
    t0 = time.monotonic()
    timer.start()
    second.wait_slot(0, 3, lambda: idles.append(1))
    took = time.monotonic() - t0
    timer.join()
    assert second.slot_ready(0, 3)
    assert 0.15 < took < 5, took  # woken by the write
    assert idles == []  # no wake-up before it
    assert second.flags[1] == 0  # no longer flagged as sleeping


@pytest.mark.parametrize("whole", [False, True])
def test_a_reader_asleep_on_its_socket_is_nudged_by_the_write(pair, whole: bool) -> None:
    """A rank that awaits frames sleeps on its socket (``socket_sleep``) instead of its
    bell; the write that ends its wait nudges it (``nudge``), also when it waits for
    the whole collective (``wait_all``). No wake-up comes from anywhere else here:
    without the nudge it would sleep for the 5 s this test gives it."""
    first, second = pair
    second.spin = 0.0  # sleep at once
    frame = threading.Event()  # the socket: a nudge puts a frame in it
    naps: list[float] = []
    nudged: list[int] = []

    def nap() -> None:
        start = time.monotonic()
        frame.wait(5)
        naps.append(time.monotonic() - start)

    second.socket_sleep = lambda: nap
    first.nudge = lambda rank: (nudged.append(rank), frame.set())
    first.begin(3)
    second.begin(3)
    writer = threading.Timer(0.15, first.publish, (3, 7, b"x", _no_idle))
    start = time.monotonic()  # before the timer starts: the wait lasts at least 0.15 s
    writer.start()
    if whole:
        second.publish(3, 7, b"y", _no_idle)
        second.wait_all(3, _no_idle)
    else:
        second.wait_slot(0, 3, _no_idle)
    took = time.monotonic() - start
    writer.join()
    assert 0.15 < took < 4 and len(naps) == 1 and naps[0] < 4, (took, naps)
    assert nudged == [1]
    assert second.flags[1] == 0 and second.words[second._how[1]] == 0


def test_a_rank_that_awaits_frames_handles_them_while_it_spins(pair) -> None:
    """Between the looks of its spin, a rank that awaits frames runs ``idle`` (which
    reads its socket): here the frame that ``idle`` finds is what ends the wait."""
    first, second = pair
    second.spin = 30.0

    def nap() -> None:
        raise AssertionError("slept: the spin did not look at the socket")

    second.socket_sleep = lambda: nap
    first.begin(3)
    second.begin(3)
    idles: list[int] = []

    def idle() -> None:  # as if a frame came that lets rank 0 write
        idles.append(1)
        first.publish(3, 7, b"x", _no_idle)

    second.wait_slot(0, 3, idle)
    assert idles == [1]


def test_a_slot_is_rewritten_only_once_every_reader_has_moved_on(pair) -> None:
    first, second = pair
    slots = depth(first.size)
    second.begin(1)
    for seq in range(1, slots + 1):  # as many slots: the writer runs ahead of the reader
        first.begin(seq)
        first.publish(seq, 1, bytes([seq]), _no_idle)
    first.begin(slots + 1)
    done = threading.Event()

    def write_next() -> None:
        first.publish(slots + 1, 1, b"c", _no_idle)  # the slot of #1: rank 1 may read it
        done.set()

    writer = threading.Thread(target=write_next)
    writer.start()
    assert not done.wait(0.2)
    assert bytes(second.read(0, 1)[2]) == bytes([1])
    second.begin(2)
    second.notify()
    assert done.wait(5)
    writer.join()
    assert bytes(second.read(0, slots + 1)[2]) == b"c"


def test_a_small_board_has_more_slots_per_rank_than_a_large_one() -> None:
    assert depth(2) == depth(SMALL) == DEPTH_SMALL > depth(SMALL + 1) == DEPTH
    assert board_bytes(SMALL) < (2 << 20) + 4096  # slots of 2 MiB at most


def test_an_idle_check_that_raises_ends_the_wait(pair) -> None:
    _, second = pair
    second.spin = 0.0

    def idle() -> None:
        raise KeyboardInterrupt

    second.ring_self()  # wakes nobody, but changes the bell: the first sleep returns
    timer = threading.Timer(0.05, second.ring_self)  # a backstop, should the first not
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        second.wait_slot(0, 9, idle)
    timer.join()  # before the board is closed
    assert second.flags[1] == 0


def test_scans_of_many_ranks_with_numpy_answer_as_the_loops_do(monkeypatch) -> None:
    # above MANY ranks a board scans its slot headers with numpy; below, with a loop
    boards = {}
    for many in (1 << 20, 2):
        monkeypatch.setattr(shmcoll, "MANY", many)
        first = Board.create(0, 5)
        rest = [Board.open(first.name, r, 5) for r in range(1, 5)]
        first.unlink()
        boards[many] = [first, *rest]
    try:
        answers = []
        for many, board in boards.items():
            monkeypatch.setattr(shmcoll, "MANY", many)
            assert bool(board[0]._headers) == (many == 2)
            for b in board:
                b.begin(0)
            got = [board[0].missing(0), board[0].missing(0, everyone=True)]
            board[0].publish(0, 7, b"ab", _no_idle)
            board[2].publish(0, 7, b"ab", _no_idle)
            board[3].publish(0, 8, b"ab", _no_idle)  # another call
            board[4].publish(0, 7, b"abc", _no_idle)  # another size
            got += [board[0].missing(0), board[1].missing(0), board[1].missing(0, True)]
            got += [board[0].first_other_call(0, 7), board[0].first_unlike(0, 7, 2)]
            board[1].publish(0, 7, b"ab", _no_idle)
            got += [board[0].missing(0), board[0].missing(0, everyone=True)]
            board[3].publish(1, 7, b"ab", _no_idle)  # every slot of #1: only rank 4's differs
            for r in (0, 1, 2, 4):
                board[r].begin(1)
                board[r].publish(1, 7, b"abc" if r == 4 else b"ab", _no_idle)
            got += [board[0].first_unlike(0, 7, 2), board[0].first_unlike(1, 7, 2)]
            got += [board[2].first_other_call(1, 7)]
            answers.append(got)
        assert answers[0] == answers[1] == [1, 0, 1, -1, 1, 3, 1, -1, -1, 3, 4, -1]
    finally:
        for board in boards.values():
            for b in board:
                b.close()


# -- real ranks --------------------------------------------------------------------------
EVERY_CALL = """
from ipympi.progress.shmcoll import Board
for step in range(4):
    for root in range(size):
        comm.Barrier()
        for n in (1, 3, 5000):  # 5000 float64: more than a slot holds
            buf = np.arange(n, dtype=float) + step if rank == root else np.zeros(n)
            comm.Bcast(buf, root=root)
            assert np.array_equal(buf, np.arange(n, dtype=float) + step), (n, buf)
            mine = np.arange(n, dtype=float) + 1000 * rank + step
            every = np.concatenate(
                [np.arange(n, dtype=float) + 1000 * r + step for r in range(size)]
            )
            out = np.full(n * size, -1.0) if rank == root else None
            comm.Gather(mine, out, root=root)
            assert rank != root or np.array_equal(out, every), (n, out)
            got = np.full(n, -1.0)
            comm.Scatter(every if rank == root else None, got, root=root)
            assert np.array_equal(got, mine), (n, got)
            total = np.zeros(n) if rank == root else None
            comm.Reduce(mine, total, MPI.SUM, root=root)
            assert rank != root or np.allclose(total, every.reshape(size, n).sum(axis=0))
        obj = {"step": step, "blob": list(range(3000 if step % 2 else 3))}  # 3000: overflows
        assert comm.bcast(obj if rank == root else None, root=root) == obj
    for n in (1, 4, 3000):
        mine = np.arange(n, dtype=float) * (rank + 1) + step
        every = np.concatenate([np.arange(n, dtype=float) * (r + 1) + step for r in range(size)])
        out = np.full(n * size, -1.0)
        comm.Allgather(mine, out)
        assert np.array_equal(out, every), (n, out)
        total = np.zeros(n)
        comm.Allreduce(mine, total, MPI.SUM)
        assert np.array_equal(total, every.reshape(size, n).sum(axis=0)), total
        high = np.zeros(n)
        comm.Allreduce(mine, high, MPI.MAX)
        assert np.array_equal(high, every.reshape(size, n).max(axis=0))
        sends = np.concatenate([np.arange(n, dtype=float) + 1000 * rank + r for r in range(size)])
        wants = np.concatenate([np.arange(n, dtype=float) + 1000 * r + rank for r in range(size)])
        out = np.full(n * size, -1.0)
        comm.Alltoall(sends, out)
        assert np.array_equal(out, wants), (n, out)
    ints = np.zeros(1, dtype=np.int64)
    comm.Allreduce(np.array([rank + step], dtype=np.int64), ints, MPI.SUM)
    assert ints[0] == size * (size - 1) // 2 + size * step
    assert comm.allreduce(rank + step) == size * (size - 1) // 2 + size * step
    assert comm.allreduce([rank] * 3000) == [r for r in range(size) for _ in range(3000)]
    assert comm.allreduce(rank, op=MPI.MAX) == size - 1
    # a non-commutative operation: every rank gets the rank-ordered result, bit for bit
    cat = MPI.Op.Create(lambda a, b, t: b.__setitem__(slice(None), a * 10 + b), commute=False)
    digits = np.zeros(1)
    comm.Allreduce(np.array([float(rank + 1)]), digits, cat)
    expected = 0.0
    for r in range(size):
        expected = expected * 10 + (r + 1) if r else 1.0
    assert digits[0] == expected, (digits, expected)
    cat.Free()
    values = comm.allgather(float(np.float64(1) / (rank + 3)))
    summed = np.zeros(1)
    comm.Allreduce(np.array([values[rank]]), summed)
    assert comm.allgather(summed[0].tobytes()) == [summed[0].tobytes()] * size
assert isinstance(comm._live().lane.board, Board), comm._live().lane.board
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [2, 4, 16])
def test_every_call_gives_numpy_s_results(run_mpi, size: int) -> None:
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, EVERY_CALL), timeout=110), size)


MIXED = """
from ipympi.progress.shmcoll import Board
big = np.arange(300_000, dtype=float) if rank == 0 else np.zeros(300_000)
for step in range(3):
    comm.Barrier()
    small = np.zeros(1)
    comm.Allreduce(np.ones(1), small)
    assert small[0] == size
    req = comm.Ibarrier()
    total = np.zeros(4)
    ireq = comm.Iallreduce(np.full(4, float(rank)), total)
    comm.Bcast(big, root=0)  # large: the general path, on the same communicator
    assert big[-1] == 299_999.0
    one = np.zeros(1)
    comm.Allreduce(np.full(1, 2.0), one)
    assert one[0] == 2 * size
    assert comm.bcast({"step": step} if rank == 0 else None, root=0) == {"step": step}
    req.Wait()
    ireq.Wait()
    assert total.tolist() == [size * (size - 1) / 2] * 4
    comm.Barrier()
    sub = comm.Split(rank % 2, rank)
    got = np.zeros(sub.Get_size())
    sub.Allgather(np.array([float(rank)]), got)
    assert got.tolist() == [float(r) for r in range(size) if r % 2 == rank % 2]
    sub.Free()
    dup = comm.Dup()
    dup.Barrier()
    assert isinstance(dup._live().lane.board, Board)
    dup.Free()
assert isinstance(comm._live().lane.board, Board)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [2, 4])
def test_board_calls_meet_large_and_nonblocking_ones(run_mpi, size: int) -> None:
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, MIXED), timeout=110), size)


BCAST_FORMS = """
comm.Barrier()  # the board is set up
def forms(rank):
    base = np.arange(12, dtype=np.int32) + 100 * rank
    return [
        base.reshape(3, 4),  # a plain array of any shape: its bytes
        base.astype(np.int8), base.astype(np.complex128), base % 2 == 0,
        np.array(7.5 + rank),  # 0-d: the general parser's form of one element
        [base, MPI.INT],  # explicit forms
        [base, 6, MPI.INT],
        bytearray(base.tobytes()),
    ]
for root in range(size):
    want = forms(root)
    got = want if rank == root else forms(size + rank)
    for i, (w, g) in enumerate(zip(want, got)):
        comm.Bcast(g, root=root)
        mine = bytes(memoryview(g[0] if isinstance(g, list) else g))
        sent = bytes(memoryview(w[0] if isinstance(w, list) else w))
        if isinstance(g, list) and len(g) == 3:  # six elements of twelve
            mine, sent = mine[:24], sent[:24]
        assert mine == sent, i
# what mpi4py refuses, refused as it does, before the call
ro = np.arange(3.0)
ro.flags.writeable = False
try:
    comm.Bcast(ro, root=0)  # the root may send from read-only memory, no rank receive into it
except BufferError:
    assert rank != 0
    out = np.zeros(3)
    comm.Bcast(out, root=0)  # the call the root made
    assert out.tolist() == [0.0, 1.0, 2.0], out
else:
    assert rank == 0
record = np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])  # no predefined datatype
for bad, error in ((np.zeros(6)[::2], BufferError), (None, TypeError), (record, KeyError)):
    try:
        comm.Bcast(bad, root=size - 1)
    except error:
        pass
    else:
        raise AssertionError(f"rank {rank}: {bad!r} was taken")
comm.Barrier()
assert isinstance(comm._live().lane.board, Board)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3])
def test_bcast_on_the_board_takes_every_buffer_form(run_mpi, size: int) -> None:
    prelude = MPI_PRELUDE + "\nfrom ipympi.progress.shmcoll import Board\n"
    assert_ok(run_mpi(size, mpi_program(prelude, BCAST_FORMS), timeout=50), size)


PLAIN_ARRAYS = """
from ipympi.mpi.coll import fast
comm.Barrier()  # the board is set up
impl = comm._live()
ledger = impl.engine.ledger
context = impl.lane.context


def handled(call, *args):
    # whether the shortcut did the call (None) or left it untouched (GENERAL: the
    # call not numbered, so the general parsing then does all of it)
    before = ledger.upcoming(context)
    got = call(comm, impl, *args)
    assert got is None or (got is fast.GENERAL and ledger.upcoming(context) == before)
    return got is None


for root in range(size):
    # plain whole arrays of any shape and predefined type: one step on the board
    mine = (np.arange(6, dtype=np.int16) + 10 * rank).reshape(2, 3)
    out = np.full((size, 2, 3), -1, dtype=np.int16)
    assert handled(fast.gather_arrays, mine, out if rank == root else None, root)
    if rank == root:
        assert out.tolist() == [(np.arange(6) + 10 * r).reshape(2, 3).tolist() for r in range(size)]
    every = np.arange(3 * size, dtype=np.float32) + root
    got = np.zeros(3, dtype=np.float32)
    assert handled(fast.scatter_arrays, every if rank == root else None, got, root)
    assert got.tolist() == list(every[3 * rank : 3 * rank + 3]), got
    buf = np.arange(5.0) if rank == root else np.zeros(5)
    assert handled(fast.bcast_array, buf, root)
    assert buf.tolist() == list(np.arange(5.0))
# the blocks' types may differ between send and receive buffers: only bytes count, as
# in the general parsing
both = np.zeros(size, dtype=np.int64)
assert handled(fast.allgather_arrays, np.array([rank], dtype=np.uint64), both)
assert both.tolist() == list(range(size))
sends = np.array([100 * rank + r for r in range(size)], dtype=np.int32)
recvs = np.zeros(size, dtype=np.float32)
assert handled(fast.alltoall_arrays, sends, recvs)
assert recvs.view(np.int32).tolist() == [100 * r + rank for r in range(size)]
# anything else goes the general way, nothing done: a root not a plain rank, a
# receive buffer of another size or not writable, memory that is not contiguous, a
# block larger than a slot, blocks that do not split evenly
ro = np.zeros(size)
ro.flags.writeable = False
for call, args in (
    (fast.bcast_array, (np.zeros(2), np.int64(0))),
    (fast.bcast_array, (np.zeros(4)[::2], 0)),
    (fast.gather_arrays, (np.zeros(1), np.zeros(size + 1), 0)),
    (fast.gather_arrays, (np.zeros(1), ro, 0)),
    (fast.gather_arrays, (np.zeros(5000), np.zeros(5000 * size), 0)),
    (fast.scatter_arrays, (np.zeros(size), np.zeros(2), 0)),
    (fast.allgather_arrays, (np.zeros(1), np.zeros(size)[::-1])),
    (fast.alltoall_arrays, (np.zeros(size + 1), np.zeros(size + 1))),
    (fast.alltoall_arrays, (np.zeros(size), np.zeros(2 * size))),
):
    if call in (fast.gather_arrays, fast.scatter_arrays) and rank != 0:
        continue  # the root's own buffer of blocks matters at the root alone
    assert not handled(call, *args), (call, args)
comm.Barrier()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3])
def test_plain_arrays_go_to_the_board_in_one_step_and_anything_else_the_general_way(
    run_mpi, size: int
) -> None:
    proc = run_mpi(size, mpi_program(MPI_PRELUDE, PLAIN_ARRAYS), timeout=50)
    assert_ok(proc, size)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3])
def test_sizes_that_differ_across_a_slot_s_size_raise_on_every_rank(run_mpi, size: int) -> None:
    # rank 0's buffer fits in its slot, the others' do not: every rank still gets the
    # size-mismatch error (none waits on a path that another rank did not take); the
    # Bcast's root learns of it at its next call, so the Bcast comes last
    body = """
    comm.Barrier()  # the board is set up
    big = np.arange(4096.0)  # all ranks above a slot's size: the straight rounds
    out = np.zeros(4096)
    comm.Allreduce(big, out)
    assert (out == size * big).all()
    comm.Bcast(big if rank == 0 else out, root=0)
    assert (out == big).all() or rank == 0
    n = 1 if rank == 0 else 4096
    try:
        comm.Allreduce(np.ones(n), np.zeros(n))
    except MPI.Exception as exc:
        assert "size mismatch" in str(exc), exc
        print(f"Allreduce ERR {rank}", flush=True)
    comm.Barrier()
    try:
        comm.Bcast(np.ones(n), root=0)
    except MPI.Exception as exc:
        assert "size mismatch" in str(exc), exc
        print(f"Bcast ERR {rank}", flush=True)
    """
    proc = run_mpi(size, mpi_program(MPI_PRELUDE, body), timeout=50)
    assert_ok(proc, size)
    assert {f"Bcast ERR {r}" for r in range(1, size)} <= set(proc.stdout.splitlines())
    assert {f"Allreduce ERR {r}" for r in range(size)} <= set(proc.stdout.splitlines())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("other", [1, 30000])
def test_a_large_bcast_reads_the_root_s_memory_and_its_sizes_are_checked(
    run_mpi, other: int
) -> None:
    # larger than an eager message: every other rank reads the root's buffer (the root
    # waits for them, so it may change it afterwards; the tree when a rank cannot read
    # memory); a rank whose buffer has another size gets the size-mismatch error, and
    # so does the root, which waits for it; none waits forever
    body = f"""
    from ipympi.mpi.coll import shmpath
    from ipympi.progress.shmcoll import Board
    reads = []
    vm = comm._live().engine.vm
    inner = vm.read
    vm.read = lambda *args: (reads.append(1), inner(*args))[1]
    comm.Barrier()  # the board is set up
    comm._live().lane.board.cores = 1  # no root writes a piece: each reader reads it all
    for n, root in ((40000, 1), (3000, 3), (200000, 0)):  # read, eager down the tree, read
        want = np.arange(float(n))
        big = want.copy() if rank == root else np.zeros(n)
        comm.Bcast(big, root=root)
        assert (big == want).all()
        if rank == root:
            big[:] = -1  # the others have read it all
    assert len(reads) == (rank != 1) + (rank != 0), reads  # one per read Bcast, not at its root
    assert isinstance(comm._live().lane.board, Board)
    if rank == 2:
        vm.available = False  # this rank cannot read: the tree, for every rank
    got = np.zeros(40000) if rank else np.arange(40000.0)
    comm.Bcast(got, root=0)
    assert (got == np.arange(40000.0)).all()
    vm.available = True
    n = 40000 if rank == 1 else {other}
    try:
        comm.Bcast(np.ones(n), root=1)
    except MPI.Exception as exc:
        assert "size mismatch" in str(exc), exc
        print(f"Bcast ERR {{rank}}", flush=True)
    comm.Barrier()
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), timeout=50)
    assert_ok(proc, 4)
    assert {f"Bcast ERR {r}" for r in range(4)} <= set(proc.stdout.splitlines()), proc.stdout


DIRECT = """
from ipympi.mpi.coll import shmpath
direct = []  # the large Allreduces that took the board's direct reads
inner = shmpath.allreduce_direct
shmpath.allreduce_direct = lambda *args: (direct.append(1), inner(*args))[1]
comm.Barrier()  # the board is set up
calls = 0
add = MPI.Op.Create(lambda a, b, t: np.add(np.frombuffer(a, "d"), np.frombuffer(b, "d"),
                                           out=np.frombuffer(b, "d")), commute=True)
for n in (70000, 100003):  # 256 KiB and more (4-byte types too); not a multiple of size
    for dtype, op in (("d", MPI.SUM), ("i", MPI.SUM), ("f", MPI.MAX), ("d", MPI.PROD), ("d", add)):
        mine = (np.arange(n) % 7 + rank + 1).astype(dtype)
        every = [(np.arange(n) % 7 + r + 1).astype(dtype) for r in range(size)]
        if op is MPI.MAX:
            want = every[-1]
        else:
            want = every[0].copy()
            for other in every[1:]:
                want = want * other if op is MPI.PROD else want + other
        out = np.full(n, -1, dtype)
        comm.Allreduce(mine, out, op=op)
        assert np.allclose(out, want, rtol=1e-6), (n, dtype, op)
        # every rank holds the same bits
        assert len(set(comm.allgather(hash(out.tobytes())))) == 1
        inplace = mine.copy()
        comm.Allreduce(MPI.IN_PLACE, inplace, op=op)
        assert inplace.tobytes() == out.tobytes(), (n, dtype, op)
        calls += 2
    # an explicit form of the receive buffer
    out = np.zeros(n)
    comm.Allreduce([np.ones(n), MPI.DOUBLE], [out, n, MPI.DOUBLE])
    assert (out == size).all()
    calls += 1
assert len(direct) == calls, (len(direct), calls)
add.Free()
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_large_allreduce_on_one_host_reads_the_other_ranks_memory(run_mpi, size: int) -> None:
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, DIRECT), timeout=80), size)


INTO = """
from ipympi.mpi.coll import shmpath
into = []  # the Allreduces combined from the board into the output
inner = shmpath.allreduce_into
shmpath.allreduce_into = lambda *args: (into.append(1), inner(*args))[1]
comm.Barrier()  # the board is set up
calls = 0
rng = np.random.default_rng(rank)
user = MPI.Op.Create(lambda a, b, t: None, commute=True)
for n in (0, 2, 1024, 2047, 3000):  # 3000 float64 do not fit in a slot
    for dtype, op, fold in (
        ("d", MPI.SUM, np.add), ("d", MPI.MIN, np.minimum), ("d", MPI.MAX, np.maximum),
        ("f", MPI.PROD, np.multiply), ("i", MPI.BXOR, np.bitwise_xor),
        ("q", MPI.SUM, np.add), ("?", MPI.LOR, np.logical_or),
    ):
        # signed zeros and ties: a min or max of equal values keeps the left one's bits
        mine = rng.choice([-0.0, 0.0, 1.5, -2.25, 3.0], n).astype(dtype)
        every = comm.allgather(mine)
        want = every[0].copy()
        for other in every[1:]:  # rank order, left to right
            want = fold(want, other)
        out = np.full(n, 7, dtype)
        comm.Allreduce(mine, out, op=op)
        assert out.tobytes() == want.astype(dtype).tobytes(), (n, dtype, out, want)
        inplace = mine.copy()
        comm.Allreduce(MPI.IN_PLACE, inplace, op=op)
        assert inplace.tobytes() == out.tobytes(), (n, dtype)
        calls += 2
# explicit forms of the buffers, a part of a larger receive buffer
out = np.zeros(10)
comm.Allreduce([np.full(8, rank + 1.0), MPI.DOUBLE], [out, 8, MPI.DOUBLE], op=MPI.SUM)
assert list(out) == [size * (size + 1) / 2] * 8 + [0, 0], out
calls += 1
# a user's operation gets copies, the general way
comm.Allreduce(np.ones(4), np.zeros(4), op=user)
user.Free()
assert len(into) == calls, (len(into), calls)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_small_allreduce_of_arrays_combines_from_the_board_into_the_output(
    run_mpi, size: int
) -> None:
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, INTO), timeout=80), size)


@pytest.mark.timeout(60)
def test_a_large_allreduce_without_memory_reads_takes_the_rounds_or_fails_on_every_rank(
    run_mpi,
) -> None:
    # a rank that cannot read the others' memory at all: every rank takes the recursive
    # doubling in the same call; a read refused during the call: every rank fails it
    # with ERR_OTHER (none waits), and the next call works
    body = """
    comm.Barrier()
    vm = comm._live().engine.vm
    n = 50000
    out = np.zeros(n)
    if rank == 1:
        vm.available = False
    comm.Allreduce(np.arange(n, dtype=float), out)
    assert (out == size * np.arange(n)).all()
    vm.available = True
    read = vm.read
    if rank == 2:
        vm.read = lambda *args: False
        vm.reason = "refused on purpose"
    try:
        comm.Allreduce(np.ones(n), out)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_OTHER, exc
        assert "rank 2" in str(exc), exc
        print(f"ERR {rank}", flush=True)
    vm.read = read
    comm.Allreduce(np.ones(n), out)
    assert (out == size).all()
    # a read refused once the pieces are computed: that rank alone fails the call, after
    # the others have read its piece (they get the whole result)
    if rank == 1:
        left = [1, 1]  # its two reads of the first step succeed
        vm.read = lambda *args: bool(left) and (left.pop(), read(*args))[1]
    out[:] = 0
    try:
        comm.Allreduce(np.full(n, 2.0), out)
    except MPI.Exception as exc:
        assert rank == 1 and exc.Get_error_class() == MPI.ERR_OTHER, exc
        print(f"LATE {rank}", flush=True)
    else:
        assert rank != 1 and (out == 2 * size).all()
    vm.read = read
    comm.Allreduce(np.ones(n), out)
    assert (out == size).all()
    """
    proc = run_mpi(3, mpi_program(MPI_PRELUDE, body), timeout=50)
    assert_ok(proc, 3)
    lines = set(proc.stdout.splitlines())
    assert {"ERR 0", "ERR 1", "ERR 2", "LATE 1"} <= lines, proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("other", [1, 50000])
def test_sizes_that_differ_beside_a_large_allreduce_raise_on_every_rank(
    run_mpi, other: int
) -> None:
    body = f"""
    comm.Barrier()
    n = 40000 if rank == 0 else {other}
    try:
        comm.Allreduce(np.ones(n), np.zeros(n))
    except MPI.Exception as exc:
        assert "size mismatch" in str(exc), exc
        print(f"ERR {{rank}}", flush=True)
    comm.Barrier()
    """
    proc = run_mpi(3, mpi_program(MPI_PRELUDE, body), timeout=50)
    assert_ok(proc, 3)
    assert {"ERR 0", "ERR 1", "ERR 2"} <= set(proc.stdout.splitlines()), proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_root_that_spreads_the_copying_writes_a_piece_of_a_large_bcast_into_each_reader(
    run_mpi, size: int
) -> None:
    # 2 or 4 ranks on 2 cores (3 on as many cores as ranks, which the root says, and the
    # readers follow): the root writes each reader's own piece while the reader reads the
    # rest; when its writes fail, the readers read that piece too
    body = """
    from ipympi.mpi.coll import shmpath
    comm.Barrier()  # the board is set up
    board = comm._live().lane.board
    board.cores = 2 if size != 3 else 3
    writes = []
    def count(*args, kept=shmpath.remote_copy):
        writes.append(args[0])
        return kept(*args)
    shmpath.remote_copy = count
    for n, fail in ((200001, False), (100003, True), (70001, False)):
        if fail and rank == size - 1:
            def refuse(*args):
                raise OSError("refused on purpose")
            shmpath.remote_copy, kept = refuse, shmpath.remote_copy
        writes.clear()
        want = np.arange(float(n)) * 3
        got = want.copy() if rank == size - 1 else np.zeros(n)
        comm.Bcast(got, root=size - 1)
        assert (got == want).all(), (n, fail)
        if rank == size - 1 and not fail:
            assert len(writes) == size - 1, writes  # one piece into each reader
        if fail and rank == size - 1:
            shmpath.remote_copy = kept
    """
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, body), timeout=50), size)


def test_the_root_of_a_large_bcast_writes_when_the_busiest_core_then_copies_less() -> None:
    from ipympi.mpi.coll.shmpath import _root_writes

    assert [p for p in range(2, 10) if _root_writes(p, 2)] == [2, 4, 6, 8]
    assert [p for p in range(2, 10) if _root_writes(p, 4)] == [2, 3, 4, 6, 7, 8]
    assert _root_writes(16, 64) and not _root_writes(65, 64)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count", [1, 4096, 40000])
def test_a_rank_in_another_call_is_named_also_beside_a_large_allreduce(run_mpi, count: int) -> None:
    # rank 0's Allreduce fits in its slot or not; rank 1 is in a Bcast: a collective
    # mismatch on both, not a size mismatch
    body = f"""
    comm.Barrier()
    try:
        if rank == 0:
            comm.Allreduce(np.ones({count}), np.zeros({count}))
        else:
            comm.Bcast(np.ones(1), root=0)
    except MPI.Exception as exc:
        assert "collective mismatch" in str(exc) and "size" not in str(exc), exc
        print(f"ERR {{rank}}", flush=True)
    """
    proc = run_mpi(2, mpi_program(MPI_PRELUDE, body), timeout=50)
    assert_ok(proc, 2)
    assert {"ERR 0", "ERR 1"} <= set(proc.stdout.splitlines()), proc.stdout


@pytest.mark.timeout(60)
def test_a_program_that_never_uses_numpy_does_not_import_it_for_its_board(run_mpi) -> None:
    # every rank importing numpy for the board alone made a 128-rank job start 8x slower
    prelude = (
        "import sys\nfrom ipympi import MPI\n"
        "comm = MPI.COMM_WORLD\nrank, size = comm.Get_rank(), comm.Get_size()\n"
    )
    body = """
    from ipympi.progress.shmcoll import Board
    NAME = "nu" + "mpy"  # a program whose text names it gets it imported before the fork
    comm.Barrier()
    assert comm.bcast({"a": rank}, root=1) == {"a": 1}
    assert comm.allreduce(rank) == size * (size - 1) // 2
    assert comm.allgather(rank) == list(range(size))
    assert isinstance(comm._live().lane.board, Board)
    assert NAME not in sys.modules, "the board imported it"
    """
    assert_ok(run_mpi(3, mpi_program(prelude, body), timeout=50), 3)


@pytest.mark.timeout(60)
def test_without_boards_the_calls_take_the_datagram_path(run_mpi) -> None:
    body = """
    comm.Barrier()
    assert comm.allreduce(rank) == size * (size - 1) // 2
    assert comm._live().lane.board is False
    """
    env = {"IPYMPI_SHM_COLL": "0"}
    assert_ok(run_mpi(3, mpi_program(MPI_PRELUDE, body), env=env), 3)


QUEUED_SENDS = """
n = 600  # far more small messages than a datagram socket holds (10 by default)
comm.Barrier()  # the board is set up
if rank == 0:
    for i in range(n):
        comm.send(i, dest=1, tag=5)
    comm.Barrier()  # waits on the board while most of them still wait for room
else:
    import sys

    sys.setswitchinterval(10)  # hold the GIL: the progress thread reads nothing meanwhile
    busy_until = time.perf_counter() + 0.2
    while time.perf_counter() < busy_until:
        pass
    sys.setswitchinterval(0.005)
    start = time.perf_counter()
    got = [comm.recv(source=0, tag=5) for _ in range(n)]
    took = time.perf_counter() - start
    assert got == list(range(n))
    # Each time the socket is full again, the rest go once rank 0 sees the room; before,
    # each ten waited for rank 0's next wake-up on the board (50 ms): 3 s in all.
    assert took < 1.5, f"600 queued messages took {took:.2f} s to arrive"
    comm.Barrier()
"""


@pytest.mark.timeout(60)
def test_sends_queued_for_a_full_peer_go_on_while_the_sender_waits_on_the_board(
    run_mpi,
) -> None:
    assert_ok(run_mpi(2, mpi_program(MPI_PRELUDE, QUEUED_SENDS), timeout=50), 2)


POSTED_RECEIVE = """
buf = np.zeros(100_000, np.uint8)  # sent as a large message: the receiver must answer
comm.Barrier()
start = time.perf_counter()
for i in range(40):
    if rank == 1:
        req = comm.Irecv(buf, 0, tag=3)
        comm.Barrier()  # waits on the board while rank 0's Send awaits its answer
        req.Wait()
    elif rank == 0:
        comm.Send(np.full(100_000, i, np.uint8), 1, tag=3)
        comm.Barrier()
    else:
        comm.Barrier()
took = time.perf_counter() - start
if rank == 1:
    assert (buf == 39).all()
# Rank 1 answers as the message comes; before, at its next wake-up on the board (50 ms
# later): 2 s in all.
assert took < 1.0, f"40 Sends to a posted receive took {took:.2f} s"
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3])
def test_a_rank_waiting_on_the_board_answers_a_send_to_its_posted_receive(
    run_mpi, size: int
) -> None:
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, POSTED_RECEIVE), timeout=50), size)


@pytest.mark.timeout(60)
def test_a_deadlock_report_names_the_wait_on_the_board(run_mpi) -> None:
    body = """
    comm.Barrier()
    if rank != 2:
        comm.Barrier()
    """
    proc = run_mpi(3, mpi_program(MPI_PRELUDE, body, ok=False), timeout=40)
    assert proc.returncode != 0
    # the wait on the board reads as any other: the call, its number, its one round
    assert re.search(r"rank 0 waits in Barrier \(collective #1, round 1\)", proc.stderr), (
        proc.stderr
    )


def _shm_files(pids: list[int]) -> list[str]:
    """This job's boards still named in /dev/shm (those of the given rank pids)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names if any(n.startswith(f"ipympi-coll-{pid}-") for pid in pids)]


CTRL_C = """
import sys
comm.Barrier()
comm.Barrier()
print(f"READY {rank} {os.getpid()}", flush=True)
try:
    if rank == 0:
        comm.Barrier()  # alone: waits on the board until Ctrl-C
    else:
        time.sleep(30)
except KeyboardInterrupt:
    print(f"INTERRUPTED {rank}", flush=True)
    sys.exit(0)
"""


def _launch(tmp_path: Path, n: int, source: str) -> subprocess.Popen[str]:
    path = tmp_path / "prog.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["TMPDIR"] = str(tmp_path)
    cmd = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "40"]
    cmd += ["--no-deadlock-check", str(path)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )


def _ready(proc: subprocess.Popen[str], n: int) -> dict[int, int]:
    assert proc.stdout is not None
    pids: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(pids) < n:
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, "the ranks never got ready"
        if line.startswith("READY"):
            _, r, pid = line.split()
            pids[int(r)] = int(pid)
    return pids


@pytest.mark.timeout(60)
def test_ctrl_c_interrupts_a_wait_on_the_board_and_leaves_nothing(tmp_path: Path) -> None:
    prog = "import os, time\nfrom ipympi import MPI\ncomm = MPI.COMM_WORLD\n"
    prog += "rank = comm.Get_rank()\n" + textwrap.dedent(CTRL_C)
    proc = _launch(tmp_path, 2, prog)
    try:
        pids = _ready(proc, 2)
        time.sleep(0.5)  # rank 0 sleeps on its bell now
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "INTERRUPTED 0" in out, (out, err)
    assert elapsed < 10, elapsed
    assert _shm_files(list(pids.values())) == []


@pytest.mark.timeout(60)
def test_a_job_killed_while_ranks_wait_on_a_board_leaves_nothing(tmp_path: Path) -> None:
    prog = "import os, time\nfrom ipympi import MPI\ncomm = MPI.COMM_WORLD\n"
    prog += textwrap.dedent(
        """
        rank = comm.Get_rank()
        comm.Barrier()
        print(f"READY {rank} {os.getpid()}", flush=True)
        if rank:
            comm.Barrier()  # waits for rank 0, which never comes
        time.sleep(30)
        """
    )
    proc = _launch(tmp_path, 3, prog)
    try:
        pids = _ready(proc, 3)
        time.sleep(0.3)
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert _shm_files(list(pids.values())) == []


@pytest.mark.timeout(60)
def test_a_normal_end_leaves_nothing_in_dev_shm(run_mpi) -> None:
    body = """
    import os
    comm.Barrier()
    dup = comm.Dup()
    dup.Allreduce(np.ones(1), np.zeros(1))
    dup.Free()
    print(f"PID {os.getpid()}", flush=True)
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body))
    assert_ok(proc, 4)
    pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("PID")]
    assert len(pids) == 4 and _shm_files(pids) == []


@pytest.mark.timeout(60)
def test_a_board_not_every_rank_mapped_goes_with_its_job(run_mpi) -> None:
    # Rank 0 sets a board up (a Bcast's root needs no one), the others never map it:
    # its name stays until the job ends, which removes the noted file.
    body = """
    import os
    if rank == 0:
        comm.Bcast(np.zeros(1), root=0)
        print(f"PID {os.getpid()}", flush=True)
        time.sleep(20)
    else:
        time.sleep(1)
        os._exit(3)
    """
    proc = run_mpi(3, mpi_program(MPI_PRELUDE, body, ok=False), timeout=40)
    assert proc.returncode != 0
    pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("PID")]
    assert pids and _shm_files(pids) == [], proc.stdout


@pytest.mark.timeout(60)
def test_the_first_board_of_a_job_reaps_names_left_by_killed_jobs(run_mpi) -> None:
    # names as a killed job leaves them: its creator gone; one old, one just made; and
    # an old one whose creator lives (this test): only the first is stale for certain
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(gone.stdout)
    paths = {
        "stale": f"/dev/shm/ipympi-coll-{dead}-{os.urandom(8).hex()}",
        "young": f"/dev/shm/ipympi-{dead}-{os.urandom(8).hex()}",
        "alive": f"/dev/shm/ipympi-coll-{os.getpid()}-{os.urandom(8).hex()}",
    }
    try:
        for kind, path in paths.items():
            with open(path, "wb") as out:
                out.write(b"x" * 64)
            if kind != "young":
                old = time.time() - 3600
                os.utime(path, (old, old))
        assert_ok(run_mpi(2, mpi_program(MPI_PRELUDE, "comm.Barrier()\n")), 2)
        assert not os.path.exists(paths["stale"])
        assert os.path.exists(paths["young"]) and os.path.exists(paths["alive"])
    finally:
        for path in paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
