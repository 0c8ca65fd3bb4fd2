"""Errors of one-sided communication on real ranks, through the window's error handler.

Each error class the standard names for windows is raised where it applies, the
window's user error handler sees it, and the window stays usable afterwards (nothing
hangs, no data is lost): ``ERR_RMA_RANGE``, ``ERR_RMA_SYNC``, ``ERR_RMA_CONFLICT`` (a
cycle of lock waits, detected by the kernel), ``ERR_RMA_FLAVOR``, ``ERR_DISP``,
``ERR_SIZE``, ``ERR_LOCKTYPE``, ``ERR_ASSERT``, ``ERR_BASE``, ``ERR_WIN``, ``ERR_OP``.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program


def program(body: str) -> str:
    return mpi_program(MPI_PRELUDE, body)


@pytest.mark.parametrize("n", [1, 2])
def test_error_classes_and_recovery(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        mem = np.zeros(4, 'i')
        win = MPI.Win.Create(mem, disp_unit=4, comm=comm)
        seen = []
        handler = MPI.Win.Create_errhandler(lambda w, code: seen.append(code))
        win.Set_errhandler(handler)
        one = np.ones(1, 'i')

        raises(MPI.ERR_RMA_SYNC, win.Put, one, nxt)          # no epoch at all
        raises(MPI.ERR_RMA_SYNC, win.Unlock, nxt)            # unlock without lock
        raises(MPI.ERR_RMA_SYNC, win.Flush, nxt)
        raises(MPI.ERR_RMA_SYNC, win.Complete)
        raises(MPI.ERR_RMA_SYNC, win.Wait)
        raises(MPI.ERR_LOCKTYPE, win.Lock, nxt, 999)
        raises(MPI.ERR_ASSERT, win.Fence, 1)
        win.Fence()
        raises(MPI.ERR_RMA_RANGE, win.Put, one, nxt, 4)      # one past the end
        raises(MPI.ERR_RMA_RANGE, win.Get, np.zeros(5, 'i'), nxt)
        raises(MPI.ERR_DISP, win.Put, one, nxt, -1)
        raises(MPI.ERR_RMA_FLAVOR, win.Attach, bytearray(8))
        myop = MPI.Op.Create(lambda a, b, t: None)
        raises(MPI.ERR_OP, win.Accumulate, one, nxt, 0, myop)
        myop.Free()
        raises(MPI.ERR_OP, win.Accumulate, np.ones(1, 'd'), nxt, (0, 1, MPI.DOUBLE), MPI.BAND)
        win.Lock_all()
        raises(MPI.ERR_RMA_SYNC, win.Fence)                  # inside a passive epoch
        raises(MPI.ERR_RMA_SYNC, win.Lock, nxt)
        win.Unlock_all()
        assert seen.count(MPI.ERR_RMA_SYNC) == 7 and MPI.ERR_OP in seen, seen

        # the window still works after all that
        win.Fence()
        win.Put(np.array([rank + 7], 'i'), nxt, 3)
        win.Fence()
        assert mem[3] == prv + 7 and list(mem[:3]) == [0, 0, 0], mem

        raises(MPI.ERR_DISP, MPI.Win.Create, bytearray(8), 0, MPI.INFO_NULL, comm)
        raises(MPI.ERR_SIZE, MPI.Win.Allocate, -1, 1, MPI.INFO_NULL, comm)
        raises(MPI.ERR_BASE, MPI.Free_mem, bytearray(8))
        raises(MPI.ERR_WIN, MPI.WIN_NULL.Fence)
        dyn = MPI.Win.Create_dynamic(comm=comm)
        dyn.Lock(rank)
        raises(MPI.ERR_RMA_RANGE, dyn.Put, one, rank, MPI.Get_address(mem))  # not attached
        dyn.Unlock(rank)
        dyn.Free()
        win.Set_errhandler(MPI.ERRORS_RETURN)
        handler.Free()
        win.Free()
        raises(MPI.ERR_WIN, win.Fence)                       # freed
        """),
    )
    assert_ok(proc, n)


def test_a_dynamic_window_refuses_what_its_target_has_not_attached(run_mpi) -> None:
    """On one host an origin reaches a dynamic window's target memory directly: an
    address the target has not attached (never, no longer, or only partly) is
    ``ERR_RMA_RANGE`` at the origin, and the target's memory is left as it was."""
    proc = run_mpi(
        2,
        program("""
        dyn = MPI.Win.Create_dynamic(comm=comm)
        exposed, private = np.zeros(4, 'i'), np.zeros(4, 'i')
        dyn.Attach(exposed)
        there = comm.bcast((MPI.Get_address(exposed), MPI.Get_address(private)), root=1)
        one = np.ones(1, 'i')
        if rank == 0:
            dyn.Lock(1)
            dyn.Put(one, 1, there[0] + 12)                            # the last element
            raises(MPI.ERR_RMA_RANGE, dyn.Put, one, 1, there[0] + 16)  # one past it
            raises(MPI.ERR_RMA_RANGE, dyn.Put, np.ones(2, 'i'), 1, there[0] + 12)
            raises(MPI.ERR_RMA_RANGE, dyn.Put, one, 1, there[1])      # never attached
            raises(MPI.ERR_RMA_RANGE, dyn.Get, one, 1, there[1])
            dyn.Unlock(1)
        comm.Barrier()
        if rank == 1:
            assert list(exposed) == [0, 0, 0, 1] and not private.any(), (exposed, private)
            dyn.Detach(exposed)
        comm.Barrier()
        if rank == 0:
            dyn.Lock(1)
            raises(MPI.ERR_RMA_RANGE, dyn.Put, one, 1, there[0])      # detached
            dyn.Unlock(1)
        comm.Barrier()
        many = [np.zeros(1, 'i') for _ in range(40)]  # more than a row lists
        for buf in many:
            dyn.Attach(buf)
        last = comm.bcast(MPI.Get_address(many[-1]), root=1)
        if rank == 0:
            dyn.Lock(1)
            dyn.Put(one, 1, last)
            dyn.Unlock(1)
        comm.Barrier()
        if rank == 1:
            assert many[-1][0] == 1
        for buf in many:
            dyn.Detach(buf)
        dyn.Free()
        """),
    )
    assert_ok(proc, 2)


def test_lock_cycle_is_a_conflict_not_a_hang(run_mpi) -> None:
    proc = run_mpi(
        2,
        program("""
        win = MPI.Win.Allocate(8, comm=comm)
        win.Lock(rank)                  # each holds its own lock exclusively ...
        comm.Barrier()
        if rank == 1:
            time.sleep(0.5)             # ... rank 0 waits for rank 1's first
        try:
            win.Lock(1 - rank)          # ... and asks for the other's: a cycle
            got = "lock"
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_RMA_CONFLICT, exc
            got = "conflict"
        win.Unlock(rank)
        if got == "lock":
            win.Unlock(1 - rank)
        outcomes = comm.allgather(got)
        assert sorted(outcomes) == ["conflict", "lock"], outcomes
        win.Free()
        """),
        timeout=40,
    )
    assert_ok(proc, 2)


def test_a_rank_stuck_in_lock_or_fence_is_reported(run_mpi) -> None:
    proc = run_mpi(
        3,
        program("""
        win = MPI.Win.Allocate(8, comm=comm)
        if rank == 0:
            win.Lock(1)                  # ... and never unlocks
            comm.Barrier()
            comm.recv(source=1, tag=3)   # waits for a message rank 1 never sends
        elif rank == 1:
            comm.Barrier()
            win.Lock(1)                  # waits for rank 0's lock
        else:
            comm.Barrier()
            win.Fence()                  # waits for the others to fence
        """),
        timeout=40,
    )
    err = proc.stderr
    assert proc.returncode == 125, err  # the launcher's deadlock status
    assert "rank 1 waits in Win.Lock(peer=1) on Allocate window" in err, err
    assert "rank 0 waits in recv(source=1, tag=3) on MPI_COMM_WORLD" in err, err
    assert "rank 2 waits in " in err and "on Allocate window" in err, err


def test_a_shared_window_larger_than_the_shared_memory_is_refused_not_a_crash(run_mpi) -> None:
    # the memory of a shared window is taken page by page as it is written: one larger
    # than the room left in the segment folder would end a rank with SIGBUS when written
    # past that room; it is refused at once with ERR_NO_MEM, and the next one works
    proc = run_mpi(
        2,
        program("""
        import os
        from ipympi.progress.shm import segment_folder
        room = os.statvfs(segment_folder())
        free = room.f_bavail * room.f_frsize
        try:
            MPI.Win.Allocate_shared(free // 2 + (1 << 30), 1, comm=comm)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_NO_MEM, exc
            assert "free in" in str(exc), exc
        else:
            raise AssertionError("allocated")
        win = MPI.Win.Allocate_shared(8, 8, comm=comm)
        np.frombuffer(win.tomemory(), dtype="d")[:] = rank
        win.Fence()
        assert np.frombuffer(win.Shared_query(1 - rank)[0], dtype="d")[0] == 1 - rank
        win.Free()
        """),
        timeout=40,
    )
    assert_ok(proc, 2)
