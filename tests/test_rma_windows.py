"""One-sided communication on real ranks: windows, operations, synchronisation, progress.

* a ring of ``Put`` under ``Fence`` over program memory (``Win.Create``) and over
  ``Win.Allocate`` memory, with a derived (strided) target datatype;
* a counter shared through ``Lock``/``Fetch_and_op`` and ``Accumulate`` (every
  increment counted: element-wise atomicity);
* passive-target progress: ``Lock``/``Get``/``Unlock`` complete while the target
  computes in pure Python without calling MPI;
* ``Allocate_shared``: numpy views from ``Shared_query`` alias across ranks;
* post/start/complete/wait, ``Compare_and_swap``, dynamic windows, request forms;
* the segment files are gone once the windows exist (nothing left in the temp folder).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program


def program(body: str) -> str:
    return mpi_program(MPI_PRELUDE, body)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_ring_put_under_fence_create_and_allocate(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        mem = np.full(8, -1, dtype='i')
        for win in (MPI.Win.Create(mem, disp_unit=mem.itemsize, comm=comm),
                    MPI.Win.Allocate(8 * 4, disp_unit=4, comm=comm)):
            local = np.frombuffer(win.tomemory(), dtype='i')
            local[:] = -1
            win.Fence()
            win.Put(np.arange(4, dtype='i') + 100 * rank, nxt, 2)
            win.Fence()
            assert list(local) == [-1, -1] + [100 * prv + i for i in range(4)] + [-1, -1], local
            win.Fence()  # everyone has looked before the next epoch's puts
            # a strided target: every other element from 0
            strided = MPI.INT.Create_vector(4, 1, 2).Commit()
            win.Put(np.arange(4, dtype='i'), nxt, (0, 1, strided))
            win.Fence()
            assert list(local[::2]) == [0, 1, 2, 3], local
            win.Fence()
            got = np.zeros(4, dtype='i')
            win.Get(got, prv, (0, 1, strided))
            win.Fence(MPI.MODE_NOSUCCEED)
            assert list(got) == [0, 1, 2, 3]
            strided.Free()
            win.Free()
        """),
    )
    assert_ok(proc, n)


@pytest.mark.parametrize("n", [2, 4])
def test_lock_fetch_and_op_counter(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        win = MPI.Win.Allocate(8 if rank == 0 else 0, disp_unit=8, comm=comm)
        one, old = np.ones(1, 'l'), np.zeros(1, 'l')
        seen = []
        for i in range(50):
            win.Lock(0, MPI.LOCK_SHARED)
            win.Fetch_and_op(one, old, 0, 0, MPI.SUM)
            win.Unlock(0)
            seen.append(int(old[0]))
        assert seen == sorted(seen), seen  # increments of one origin stay in order
        win.Lock_all()
        for i in range(50):
            win.Accumulate(one, 0, 0, MPI.SUM)
        win.Unlock_all()
        every = comm.allgather(seen)
        comm.Barrier()
        if rank == 0:
            values = sorted(v for s in every for v in s)
            assert len(set(values)) == 50 * size, values  # no two fetched the same value
            total = np.frombuffer(win.tomemory(), 'l')[0]
            assert total == 100 * size, total
        win.Free()
        """),
    )
    assert_ok(proc, n)


def test_passive_target_progresses_while_target_computes(run_mpi) -> None:
    proc = run_mpi(
        2,
        program("""
        mem = np.arange(1000, dtype='d')
        win = MPI.Win.Create(mem, disp_unit=8, comm=comm)
        comm.Barrier()
        if rank == 1:
            t0 = time.monotonic()
            x = 0
            while time.monotonic() - t0 < 3.0:   # pure Python, no MPI call
                x += 1
            comm.Barrier()
        else:
            time.sleep(0.3)
            t0 = time.monotonic()
            got = np.zeros(10)
            win.Lock(1, MPI.LOCK_EXCLUSIVE)
            win.Get(got, 1, 990)
            win.Put(np.full(3, -5.0), 1, 0)
            win.Unlock(1)
            took = time.monotonic() - t0
            assert list(got) == list(range(990, 1000)), got
            assert took < 1.0, took  # the target never called MPI meanwhile
            comm.Barrier()
        if rank == 1:
            assert list(mem[:4]) == [-5, -5, -5, 3], mem[:4]
        win.Free()
        """),
    )
    assert_ok(proc, 2)


@pytest.mark.parametrize("n", [1, 3])
def test_shared_window_views_alias(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        win = MPI.Win.Allocate_shared(4 * 8, disp_unit=8, comm=node)
        views = [np.frombuffer(win.Shared_query(r)[0], dtype='d') for r in range(size)]
        assert all(win.Shared_query(r)[1] == 8 for r in range(size))
        win.Lock_all()
        views[nxt][rank % 4] = rank + 0.5     # a plain numpy store into a neighbour
        win.Sync()
        comm.Barrier()
        win.Sync()
        mine = np.frombuffer(win.tomemory(), dtype='d')
        assert mine[prv % 4] == prv + 0.5, mine  # ... is a load here
        win.Unlock_all()
        # the default layout is contiguous: rank r's memory follows rank r-1's
        base = MPI.Get_address(win.Shared_query(0)[0])
        assert all(MPI.Get_address(win.Shared_query(r)[0]) == base + 32 * r for r in range(size))
        win.Free()
        node.Free()
        """),
    )
    assert_ok(proc, n)


@pytest.mark.parametrize("n", [2, 3])
def test_pscw_cas_dynamic_and_requests(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        win = MPI.Win.Allocate(4 * size, disp_unit=4, comm=comm)
        mine = np.frombuffer(win.tomemory(), 'i')
        mine[:] = 0
        group = win.Get_group()
        everyone = group.Excl([rank])
        comm.Barrier()
        win.Post(everyone)
        win.Start(everyone)
        for r in range(size):
            if r != rank:
                win.Put(np.array([rank + 1], 'i'), r, rank)
        win.Complete()
        assert win.Wait() is True
        assert sorted(mine) == sorted([r + 1 for r in range(size) if r != rank] + [0]), mine
        # compare-and-swap: one winner per target slot
        won = np.zeros(1, 'i')
        comm.Barrier()
        win.Lock_all()
        win.Compare_and_swap(np.array([rank + 100], 'i'), np.array([0], 'i'), won, 0, 0)
        win.Unlock_all()
        olds = comm.allgather(int(won[0]))
        assert olds.count(0) == 1, olds  # exactly one rank swapped
        winner = olds.index(0)
        assert all(v == winner + 100 for v in olds if v), olds
        comm.Barrier()
        if rank == 0:
            assert mine[0] == winner + 100, mine
        win.Free()
        everyone.Free(); group.Free()

        dyn = MPI.Win.Create_dynamic(comm=comm)
        region = np.zeros(16, 'd')
        dyn.Attach(region)
        addresses = comm.allgather(MPI.Get_address(region))
        dyn.Lock(nxt, MPI.LOCK_EXCLUSIVE)
        req = dyn.Rput(np.full(2, float(rank)), nxt, addresses[nxt])
        req.Wait()
        dyn.Flush(nxt)
        back = np.zeros(2)
        dyn.Rget(back, nxt, addresses[nxt]).Wait()
        got = np.zeros(2)
        dyn.Rget_accumulate(np.ones(2), got, nxt, addresses[nxt], MPI.SUM).Wait()
        dyn.Raccumulate(np.ones(2), nxt, addresses[nxt], MPI.SUM).Wait()
        dyn.Unlock(nxt)
        assert list(back) == [rank, rank] and list(got) == [rank, rank], (back, got)
        comm.Barrier()
        assert list(region[:3]) == [prv + 2, prv + 2, 0], region[:3]
        dyn.Detach(region)
        dyn.Free()
        """),
    )
    assert_ok(proc, n)


def test_segments_leave_nothing_behind(run_mpi, tmp_path: Path) -> None:
    folder = tmp_path / "private-tmp"
    folder.mkdir()
    proc = run_mpi(
        2,
        program("""
        import os, glob
        wins = [MPI.Win.Allocate_shared(100, comm=comm), MPI.Win.Allocate(10, comm=comm),
                MPI.Win.Create(bytearray(8), comm=comm)]
        comm.Barrier()
        left = glob.glob('/dev/shm/ipympi-win-' + '*') + glob.glob(os.path.join(
            os.environ['TMPDIR'], 'ipympi-win-*'))
        mine = [p for p in left if any(str(pid) in p for pid in comm.allgather(os.getpid()))]
        assert not mine, mine
        for w in wins:
            w.Free()
        """),
        env={"TMPDIR": str(folder)},
    )
    assert_ok(proc, 2)
    assert list(folder.iterdir()) == [] or all(
        not p.name.startswith("ipympi-win") for p in folder.iterdir()
    )


def test_whole_array_puts_and_gets_and_their_edges(run_mpi) -> None:
    # Whole numpy arrays at an int displacement move with one copy; every other form
    # (strided, read-only, out of range, another dtype's view) keeps the general rules.
    proc = run_mpi(
        2,
        program("""
        peer = 1 - rank
        win = MPI.Win.Allocate(10 * 8, disp_unit=8, comm=comm)
        local = np.frombuffer(win.tomemory(), dtype='d')
        local[:] = -1
        comm.Barrier()
        win.Lock_all()
        win.Put(np.arange(3.0) + 10 * rank, peer, 2)
        win.Flush(peer)
        got = np.zeros(3)
        win.Get(got, peer, 2)
        win.Flush(peer)
        assert list(got) == [10.0 * rank, 10.0 * rank + 1, 10.0 * rank + 2], got
        try:  # not contiguous: a BufferError, as in mpi4py
            win.Put(np.arange(8.0)[::2], peer)
        except BufferError:
            pass
        else:
            raise AssertionError("a strided origin")
        win.Put([np.arange(8.0), 2, MPI.DOUBLE], peer)  # a buffer spec: the general path
        win.Put(np.array([7], dtype='i'), peer, 9)  # 4 bytes into the last slot
        win.Flush(peer)
        whole = np.zeros(10)
        win.Get(whole, peer)
        win.Flush(peer)
        assert list(whole[:5]) == [0.0, 1.0, 10.0 * rank, 10.0 * rank + 1, 10.0 * rank + 2], whole
        assert whole[9:].view('i')[0] == 7
        raises(MPI.ERR_RMA_RANGE, win.Put, np.zeros(3), peer, 8)
        readonly = np.zeros(2)
        readonly.flags.writeable = False
        try:
            win.Get(readonly, peer)
        except (BufferError, ValueError, TypeError):
            pass
        else:
            raise AssertionError("a Get into read-only memory")
        win.Unlock_all()
        comm.Barrier()
        assert list(local[2:5]) == [10.0 * peer, 10.0 * peer + 1, 10.0 * peer + 2]
        win.Free()
        """),
    )
    assert_ok(proc, 2)


def test_fetch_and_op_on_one_element_arrays_and_its_errors(run_mpi) -> None:
    # One-element arrays of one datatype go straight to the combine once the operation
    # is known to suit the datatype; every other form keeps the general rules.
    proc = run_mpi(
        2,
        program("""
        win = MPI.Win.Allocate(4 * 8, disp_unit=8, comm=comm)
        local = np.frombuffer(win.tomemory(), dtype='l')
        local[:] = 0
        comm.Barrier()
        win.Lock_all()
        one, old = np.ones(1, 'l'), np.zeros(1, 'l')
        for _ in range(50):
            win.Fetch_and_op(one, old, 0, 1)
        win.Fetch_and_op(np.array([5], 'l'), old, 0, 2, MPI.REPLACE)
        win.Fetch_and_op(one, old, 0, 2, MPI.MAX)
        win.Flush(0)
        comm.Barrier()
        win.Fetch_and_op(one, old, 0, 1, MPI.NO_OP)
        win.Flush(0)
        assert old[0] == 100, old  # 50 increments from each rank
        try:  # a result of another type: mpi4py's ValueError
            win.Fetch_and_op(one, np.zeros(1, 'i'), 0, 1)
        except ValueError:
            pass
        else:
            raise AssertionError("mismatched result type")
        readonly = np.zeros(1, 'l')
        readonly.flags.writeable = False
        try:
            win.Fetch_and_op(one, readonly, 0, 1)
        except (BufferError, ValueError, TypeError):
            pass
        else:
            raise AssertionError("a read-only result")
        raises(MPI.ERR_RMA_RANGE, win.Fetch_and_op, one, old, 0, 4)
        fone, fold = np.ones(1), np.zeros(1)
        raises(MPI.ERR_OP, win.Fetch_and_op, fone, fold, 0, 3, MPI.BAND)
        win.Unlock_all()
        comm.Barrier()
        if rank == 0:
            assert list(local[:3]) == [0, 100, 5], local
        win.Free()
        """),
    )
    assert_ok(proc, 2)
