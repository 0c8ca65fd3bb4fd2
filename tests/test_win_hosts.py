"""Windows whose ranks span hosts: every operation served by the target's engine.

Jobs run on two "hosts" (loopback addresses, as in ``test_multihost``), two ranks each,
so a window mixes ranks of the same host and of the other one; ``mpi.win_remote``
serves all of them the same way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program
from kernel_helpers import KernelSession, failing_cell, kernel_env, kernel_specs_installed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loopback")

HOSTS = ("--hosts", "127.0.0.2:2,127.0.0.3:2")


def _run(run_mpi, body: str, n: int = 4, timeout: float = 40) -> None:
    proc = run_mpi(n, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS, timeout=timeout)
    assert_ok(proc, n)


def test_ring_of_puts_under_fence_with_every_flavor(run_mpi) -> None:
    """Create, Allocate and dynamic windows; small and large (chunked) puts and gets."""
    body = """
    from ipympi.mpi.process import PROCESS
    assert len(set(comm.allgather(PROCESS.host_name()))) == 2
    mem = np.zeros(4, dtype='i')
    win = MPI.Win.Create(mem, disp_unit=4, comm=comm)
    assert win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_CREATE
    for step in range(3):
        win.Fence()
        win.Put(np.full(4, rank * 10 + step, dtype='i'), nxt)
        win.Fence()
        assert list(mem) == [prv * 10 + step] * 4, (step, mem)
        comm.Barrier()  # before the next epoch's puts
    win.Fence(MPI.MODE_NOSUCCEED)
    win.Free()
    # a megabyte each way: several frames per request and per reply
    n = 1 << 17
    big = MPI.Win.Allocate(n * 8, 8, comm=comm)
    view = np.frombuffer(big.tomemory(), dtype='d')
    view[:] = -1
    big.Fence()
    big.Put(np.arange(n, dtype='d') + rank, nxt)
    big.Fence()
    assert view[0] == prv and view[-1] == n - 1 + prv, view[[0, -1]]
    back = np.empty(n)
    big.Get(back, prv)
    big.Fence()
    assert np.array_equal(back, np.arange(n, dtype='d') + (prv - 1) % size)
    big.Free()
    # dynamic: regions attached after creation, addressed by absolute address
    dyn = MPI.Win.Create_dynamic(comm=comm)
    region = np.zeros(8, dtype='i8')
    dyn.Attach(region)
    addresses = comm.allgather(MPI.Get_address(region))
    dyn.Fence()
    dyn.Put(np.array([rank + 100], 'i8'), nxt, (addresses[nxt] + 8 * 3, 1, MPI.INT64_T))
    dyn.Fence()
    assert region[3] == prv + 100 and region.sum() == prv + 100, region
    got = np.empty(1, 'i8')
    dyn.Lock(prv, MPI.LOCK_SHARED)
    dyn.Get(got, prv, (addresses[prv] + 24, 1, MPI.INT64_T))
    dyn.Unlock(prv)
    assert got[0] == (prv - 1) % size + 100, got
    comm.Barrier()
    dyn.Detach(region)
    dyn.Free()
    """
    _run(run_mpi, body)


def test_passive_target_progresses_while_the_target_computes(run_mpi) -> None:
    """Lock/Get/Put/Unlock to a rank on the other host that computes (pure Python, then
    numpy) without calling MPI: served by its progress thread, long before it is done."""
    body = """
    win = MPI.Win.Allocate(8 * 16, 8, comm=comm)
    mem = np.frombuffer(win.tomemory(), dtype='d')
    mem[:] = rank
    comm.Barrier()
    if rank == 3:
        began = time.monotonic()
        while time.monotonic() - began < 3.0:  # pure Python, no MPI
            sum(range(2000))
        end = time.monotonic() + 2.0
        a = np.random.rand(300, 300)
        while time.monotonic() < end:  # numpy, no MPI
            a = a @ a
            a /= np.abs(a).max()
    elif rank == 0:
        time.sleep(0.3)
        took = []
        for kind in (MPI.LOCK_EXCLUSIVE, MPI.LOCK_SHARED):
            started = time.monotonic()
            got = np.empty(16)
            win.Lock(3, kind)
            win.Get(got, 3)
            win.Put(np.full(16, 42.0), 3)
            win.Unlock(3)
            took.append(time.monotonic() - started)
            assert (got == (3 if kind == MPI.LOCK_EXCLUSIVE else 42)).all(), got
        assert max(took) < 1.0, f"Lock/Get/Put/Unlock took {took} s while the target computed"
    comm.Barrier()
    if rank == 3:
        assert (mem == 42).all(), mem
    # a target busy with calls on its own memory only (none of which waits for another
    # rank) answers too
    comm.Barrier()
    if rank == 2:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            win.Lock(2)
            win.Put(np.full(16, 7.0), 2)
            win.Unlock(2)
    elif rank == 1:
        time.sleep(0.3)
        started = time.monotonic()
        got = np.empty(16)
        win.Lock(2, MPI.LOCK_SHARED)
        win.Get(got, 2)
        win.Unlock(2)
        took = time.monotonic() - started
        assert (got == 7).all() and took < 1.0, (got, took)
    comm.Barrier()
    win.Free()
    """
    _run(run_mpi, body)


def test_counters_and_exclusive_locks_are_exact(run_mpi) -> None:
    """Fetch_and_op, Accumulate and Compare_and_swap from every rank of both hosts on
    counters of rank 1 (atomic per element), and read-modify-write under an exclusive
    lock (the lock manager excludes)."""
    body = """
    win = MPI.Win.Allocate(8 * 4, 8, comm=comm)
    counters = np.frombuffer(win.tomemory(), dtype='i8')
    counters[:] = 0
    comm.Barrier()
    N = 60
    one, old = np.ones(1, 'i8'), np.empty(1, 'i8')
    seen = []
    win.Lock_all()
    for i in range(N):
        win.Fetch_and_op(one, old, 1, 0, MPI.SUM)
        seen.append(int(old[0]))
        win.Accumulate(np.array([2], 'i8'), 1, 1, MPI.SUM)
    win.Flush(1)
    win.Unlock_all()
    # exclusive: a get, then a put of one more, never interleaved with another rank's
    for i in range(15):
        win.Lock(1, MPI.LOCK_EXCLUSIVE)
        value = np.empty(1, 'i8')
        win.Get(value, 1, 2)
        win.Flush(1)
        win.Put(value + 1, 1, 2)
        win.Unlock(1)
    # Compare_and_swap: every rank tries to claim slot 3; exactly one does
    win.Lock_all()
    win.Compare_and_swap(np.array([rank + 1], 'i8'), np.array([0], 'i8'), old, 1, 3)
    win.Unlock_all()
    assert comm.allreduce(int(old[0] == 0)) == 1
    mine = comm.allgather(seen)
    flat = sorted(v for values in mine for v in values)
    assert flat == list(range(N * size)), flat[:10]  # every fetch saw a distinct value
    comm.Barrier()
    if rank == 1:
        assert counters[0] == N * size and counters[1] == 2 * N * size, counters
        assert counters[2] == 15 * size, counters
        assert 1 <= counters[3] <= size, counters
    comm.Barrier()
    win.Free()
    """
    _run(run_mpi, body)


def test_first_contents_set_right_after_creation_are_not_overtaken(run_mpi) -> None:
    """As in mpi4py's nxtval-mpi3 demo: rank 0 sets its window's first contents right
    after Allocate returns, while the others already Lock and Get_accumulate: their
    requests, come during the creation, are applied after it."""
    body = """
    for attempt in range(5):
        win = MPI.Win.Allocate(4 if rank == 0 else 0, 4, comm=comm)
        if rank == 0:
            win.tomemory()[:] = np.array([1000], 'i').tobytes()
        got = []
        for i in range(3):
            value = np.zeros(1, 'i')
            win.Lock(0)
            win.Get_accumulate(np.ones(1, 'i'), value, 0, op=MPI.SUM)
            win.Unlock(0)
            got.append(int(value[0]))
        seen = sorted(comm.allreduce(got))
        assert seen == list(range(1000, 1000 + 3 * size)), (attempt, seen)
        win.Free()
    """
    _run(run_mpi, body)


def test_a_window_over_alloc_mem_memory_frees_it_through_tomemory(run_mpi) -> None:
    """mpi4py's nxtval-onesided demo: a counter in Alloc_mem memory of rank 0, each rank
    adding to its own element and reading the others' through an indexed datatype; the
    memory is freed with ``Free_mem(win.tomemory())`` (a block is named by its address)."""
    body = """
    mem = MPI.Alloc_mem(4 * size) if rank == 0 else MPI.BOTTOM
    win = MPI.Win.Create(mem, 4, MPI.INFO_NULL, comm)
    others = MPI.INT.Create_indexed([rank, size - rank - 1], [0, rank + 1]).Commit()
    mine, values = 0, []
    for i in range(5):
        vals = np.zeros(size, 'i')
        win.Lock(0)
        win.Accumulate([np.ones(1, 'i'), 1, MPI.INT], 0, [rank, 1, MPI.INT], MPI.SUM)
        win.Get([vals, 1, others], 0, [0, 1, others])
        win.Unlock(0)
        vals[rank] = mine
        mine += 1
        values.append(int(vals.sum()))
    assert sorted(comm.allreduce(values)) == list(range(5 * size))
    others.Free()
    memory = win.tomemory()
    win.Free()
    if rank == 0:
        MPI.Free_mem(memory)
        raises(MPI.ERR_BASE, MPI.Free_mem, memory)  # freed already
    """
    _run(run_mpi, body)


def test_derived_datatypes_accumulates_requests_and_pscw(run_mpi) -> None:
    body = """
    win = MPI.Win.Create(np.zeros(0, 'i'), comm=comm)
    win.Free()
    mem = np.zeros(12, dtype='i')
    win = MPI.Win.Create(mem, disp_unit=4, comm=comm)
    every_other = MPI.INT.Create_vector(3, 1, 2).Commit()
    pairs = MPI.INT.Create_indexed([2, 2], [0, 6]).Commit()
    # Accumulate with a derived target datatype: elements 0, 2, 4 of the target
    win.Fence()
    win.Accumulate(np.array([1, 2, 3], 'i'), nxt, (0, 1, every_other), MPI.SUM)
    win.Accumulate(np.array([1, 2, 3], 'i'), nxt, (0, 1, every_other), MPI.SUM)
    win.Fence()
    assert list(mem[:6]) == [2, 0, 4, 0, 6, 0], mem
    comm.Barrier()  # (each check before the next epoch's operations)
    # a derived origin datatype too: elements 0, 2 of the origin to 6, 7, 12, 13 bytes...
    src = np.array([5, -1, 6, -1, 7, -1], 'i')
    win.Put([src, 1, every_other], nxt, (6, 3, MPI.INT))
    win.Fence()
    assert list(mem[6:9]) == [5, 6, 7], mem
    comm.Barrier()
    # Get_accumulate and Get with a derived target datatype, request forms
    out = np.empty(4, 'i')
    req = win.Rget_accumulate(np.full(4, 10, 'i'), out, prv, (0, 1, pairs), MPI.SUM)
    req.Wait()
    win.Fence()
    assert list(out) == [2, 0, 5, 6], out
    assert list(mem[[0, 1, 6, 7]]) == [12, 10, 15, 16], mem
    comm.Barrier()
    got = np.empty(4, 'i')
    MPI.Request.Waitall([win.Rget(got, nxt, (0, 1, pairs)),
                         win.Rput(np.array([9], 'i'), nxt, 11),
                         win.Raccumulate(np.array([1], 'i'), nxt, 11, MPI.MAX)])
    win.Fence()
    assert list(got) == [12, 10, 15, 16] and mem[11] == 9, (got, mem)
    comm.Barrier()
    # post/start/complete/wait: ranks of the other host only
    group = comm.Get_group()
    other = group.Incl([r for r in range(size) if (r < 2) != (rank < 2)])
    win.Post(other)
    win.Start(other)
    for peer in [(rank + 2) % 4]:
        win.Put(np.array([rank + 50], 'i'), peer, 10)
        win.Accumulate(np.array([1], 'i'), peer, 9, MPI.SUM)
    win.Complete()
    win.Wait()
    assert mem[10] == (rank + 2) % 4 + 50 and mem[9] == 1, mem
    comm.Barrier()
    win.Post(other)
    win.Start(other)
    win.Complete()
    while not win.Test():
        pass
    # Fetch_and_op with NO_OP and REPLACE, Lock_all with flushes
    win.Lock_all()
    old = np.empty(1, 'i')
    win.Fetch_and_op(np.array([0], 'i'), old, nxt, 10, MPI.NO_OP)
    assert old[0] == (rank + 3) % 4 + 50, old  # what nxt's partner put there
    win.Flush_all()
    win.Unlock_all()
    comm.Barrier()
    win.Lock(nxt, MPI.LOCK_EXCLUSIVE)
    win.Fetch_and_op(np.array([-7], 'i'), old, nxt, 10, MPI.REPLACE)
    win.Flush_local(nxt)
    win.Unlock(nxt)
    assert old[0] == (rank + 3) % 4 + 50, old
    comm.Barrier()
    assert mem[10] == -7, mem
    every_other.Free()
    pairs.Free()
    win.Free()
    """
    _run(run_mpi, body)


def test_errors_have_the_classes_of_same_host_windows(run_mpi) -> None:
    body = """
    raises(MPI.ERR_RMA_SHARED, MPI.Win.Allocate_shared, 8, 1, MPI.INFO_NULL, comm)
    win = MPI.Win.Allocate(16, 4, comm=comm)
    win.Set_errhandler(MPI.ERRORS_RETURN)
    four = np.zeros(4, 'i')
    raises(MPI.ERR_RMA_SYNC, win.Put, four, nxt)  # no epoch
    raises(MPI.ERR_RMA_SYNC, win.Unlock, nxt)
    raises(MPI.ERR_RMA_SYNC, win.Flush, nxt)
    win.Lock(nxt, MPI.LOCK_SHARED)
    raises(MPI.ERR_RMA_RANGE, win.Put, four, nxt, 1)
    raises(MPI.ERR_RMA_RANGE, win.Get, np.zeros(5, 'i'), nxt)
    raises(MPI.ERR_RMA_SYNC, win.Lock, nxt)
    raises(MPI.ERR_OP, win.Accumulate, four, nxt, 0, MPI.Op.Create(lambda a, b, t: None))
    raises(MPI.ERR_TYPE, win.Accumulate, four, nxt, (0, 16, MPI.BYTE), MPI.SUM)
    win.Put(four + 3, nxt)  # the window still works after the errors
    win.Unlock(nxt)
    raises(MPI.ERR_LOCKTYPE, win.Lock, nxt, 99)
    comm.Barrier()
    assert list(np.frombuffer(win.tomemory(), 'i')) == [3, 3, 3, 3]
    win.Free()
    dyn = MPI.Win.Create_dynamic(comm=comm)
    dyn.Set_errhandler(MPI.ERRORS_RETURN)
    region = np.zeros(2, 'i8')
    dyn.Attach(region)
    address = comm.allgather(MPI.Get_address(region))[nxt]
    dyn.Lock(nxt)
    # an address the target has not attached: the target says so
    raises(MPI.ERR_RMA_RANGE, dyn.Put, np.ones(1, 'i8'), nxt, (address + 16, 1, MPI.INT64_T))
    raises(MPI.ERR_RMA_RANGE, dyn.Get, np.ones(2, 'i8'), nxt, (address + 8, 2, MPI.INT64_T))
    dyn.Put(np.ones(1, 'i8'), nxt, (address + 8, 1, MPI.INT64_T))
    dyn.Unlock(nxt)
    comm.Barrier()
    assert list(region) == [0, 1], region
    dyn.Detach(region)
    dyn.Free()
    """
    _run(run_mpi, body)


def test_an_interrupted_lock_request_leaves_no_lock_behind(run_mpi) -> None:
    """Rank 0 waits for a lock that rank 3 holds and is interrupted (Ctrl-C): its request
    is withdrawn, so the lock goes to the next one when rank 3 lets go; the same for a
    Lock_all that got some of its locks before the interrupt."""
    body = """
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, interrupt)
    win = MPI.Win.Allocate(8, 8, comm=comm)
    for attempt in ("Lock", "Lock_all"):
        if rank == 3:
            win.Lock(2, MPI.LOCK_EXCLUSIVE)
        comm.Barrier()
        if rank == 0:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            try:
                if attempt == "Lock":
                    win.Lock(2, MPI.LOCK_EXCLUSIVE)
                else:
                    win.Lock_all()
            except KeyboardInterrupt:
                pass
            else:
                raise AssertionError(f"{attempt} was granted while rank 3 held the lock")
        comm.Barrier()
        if rank == 3:
            win.Unlock(2)
        elif rank == 1:  # gets the lock: rank 0's request is gone, its other locks too
            win.Lock(2, MPI.LOCK_EXCLUSIVE)
            win.Unlock(2)
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Unlock(0)
        comm.Barrier()
    win.Lock_all()
    win.Unlock_all()
    win.Free()
    """
    _run(run_mpi, body)


def test_a_target_that_dies_mid_epoch_is_reported(run_mpi) -> None:
    body = """
    import os
    win = MPI.Win.Allocate(8, 8, comm=comm)
    if rank == 2:
        win.Lock(2, MPI.LOCK_EXCLUSIVE)  # holds its own lock, then dies
        comm.Barrier()
        os._exit(3)
    comm.Barrier()
    if rank == 0:
        win.Lock(2, MPI.LOCK_EXCLUSIVE)  # never granted
    comm.Barrier()
    """
    started = time.monotonic()
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body, ok=False), launcher_args=HOSTS, timeout=30)
    assert proc.returncode == 3, proc.stderr
    assert "rank 2 exited with status 3 on host 127.0.0.3" in proc.stderr
    assert time.monotonic() - started < 20


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.mark.timeout(120)
def test_a_notebook_explains_lock_waits_and_a_dead_target(kernel_specs: Path) -> None:
    """In the notebook (4 engines on 2 hosts): a rank that waits for a lock another rank
    kept is reported as waiting in Win.Lock for its target; a rank that waits for the
    lock of a target that dies gets an error naming the dead rank, not a hang."""
    env = kernel_env(np=4, IPYMPI_HOSTS=HOSTS[1])
    with KernelSession("ipympi", env) as kernel:
        kernel.ok("win = MPI.Win.Allocate(8, 8, comm=comm)", timeout=60)
        code = (
            "if rank == 0:\n    win.Lock(2)\n    comm.send(None, dest=3, tag=5)\n"
            "elif rank == 3:\n    comm.recv(source=0, tag=5)\n    win.Lock(2)"
        )
        _, lines, took = failing_cell(kernel, code)
        assert lines[0].startswith(
            "no rank can progress: rank 3 waits in Win.Lock(peer=2) on Allocate window"
        ), lines
        assert took < 15
        kernel.ok("if rank == 0:\n    win.Unlock(2)\nwin.Free()")
        kernel.ok("win = MPI.Win.Allocate(8, 8, comm=comm)")
        code = (
            "import os, time\nif rank == 2:\n    win.Lock(2)\n    comm.Barrier()\n"
            "    time.sleep(0.5)\n    os._exit(3)\nelif rank == 0:\n    comm.Barrier()\n"
            "    win.Lock(2)\nelse:\n    comm.Barrier()"
        )
        _, lines, took = failing_cell(kernel, code)
        text = "\n".join(lines)
        assert lines[0].startswith("rank 2 has died (exited with status 3) while rank 0 "), text
        assert "Lock: rank 2 has died" in text, text
        assert took < 15


def test_lock_manager_grants_in_arrival_order() -> None:
    """Shared holders together, an exclusive one alone, waiters in arrival order (a
    shared request behind a waiting exclusive one waits too: no starvation)."""
    from ipympi.mpi.win_remote import _LockManager

    locks, granted = _LockManager(), []
    assert locks.request(False, lambda: granted.append("s1"))
    assert locks.request(False, lambda: granted.append("s2"))
    assert not locks.request(True, lambda: granted.append("x1"))
    assert not locks.request(False, lambda: granted.append("s3"))
    assert not locks.request(False, lambda: granted.append("s4"))
    locks.release()
    assert granted == []  # one shared holder left
    locks.release()
    assert granted == ["x1"]
    locks.release()
    assert granted == ["x1", "s3", "s4"]
    assert not locks.request(True, lambda: granted.append("x2"))
    locks.release()
    locks.release()
    assert granted[-1] == "x2" and locks.exclusive and not locks.queue
    # withdrawn: a waiting request leaves the queue (and those behind it may fit now);
    # a granted one is released
    locks.release()
    assert locks.request(False, lambda: granted.append("s5"), "s5")
    assert not locks.request(True, lambda: granted.append("x3"), "x3")
    assert not locks.request(False, lambda: granted.append("s6"), "s6")
    locks.cancel("x3")
    assert granted[-1] == "s6" and locks.shared == 2 and not locks.queue
    locks.cancel("s5")
    locks.release()
    assert (locks.shared, locks.exclusive) == (0, False)


def test_spans_read_and_write_the_runs_an_origin_described() -> None:
    import numpy as np

    from ipympi import MPI
    from ipympi.core.typemap_copy import runs
    from ipympi.mpi.win_remote import _Span

    mem = np.arange(48, dtype=np.uint8)
    vector = MPI.INT.Create_vector(2, 1, 3).Commit()  # ints 0 and 3 of each element
    spans = runs(vector._impl.layout, 2)
    span = _Span(mem, 4, 16, spans)  # from byte 4: ints 1, 4 and (extent 16) 5, 8
    assert span.direct() is None
    out = np.zeros(16, np.uint8)
    span.read(out)
    assert list(out.view("<i4")) == list(mem.view("<i4")[[1, 4, 5, 8]])
    span.write(np.full(16, 255, np.uint8))
    assert (mem.view("<i4")[[1, 4, 5, 8]] == -1).all()
    assert mem.view("<i4")[2] == int.from_bytes(bytes(range(8, 12)), "little")
    dense = _Span(mem, 2, 3, None)
    dense.write(np.array([7, 8, 9], np.uint8))
    assert list(mem[:6]) == [0, 1, 7, 8, 9, 255]
    assert list(dense.direct()) == [7, 8, 9]
    vector.Free()
