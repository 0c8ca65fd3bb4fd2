"""Accumulates: element-wise atomicity across ranks, exact results, and locks of the dead.

* ranks hammering one counter at once with ``Fetch_and_op``, ``Accumulate``,
  ``Get_accumulate`` and ``Compare_and_swap`` (the direct paths and the general one,
  over shared memory and over program memory) lose no update;
* the one-element direct path gives exactly what numpy's ufuncs give (wrap-around,
  NaN, ties), ``REPLACE``/``NO_OP``, and ``Compare_and_swap`` compares bit for bit;
* ``progress.shmlock``: a mutex whose holder died (with or without its pid written)
  is freed for the others, an interrupted wait keeps nothing, and the names are gone
  once every process has them open;
* ``Fence`` through the window's shared counters pairs the ranks' fences (every
  neighbour's ``Put`` is seen after it), a rank that dies before fencing ends the job
  instead of hanging it, and an interrupted wait takes its arrival back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.progress import shmlock
from ipympi.progress.shm import process_alive
from ipympi.progress.shmlock import HostMutexes


def program(body: str) -> str:
    return mpi_program(MPI_PRELUDE, body)


@pytest.mark.parametrize("n", [2, 4])
def test_ranks_hammering_one_counter_lose_no_update(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        K = 300
        one, old = np.ones(1, 'q'), np.zeros(1, 'q')
        mem = np.zeros(4, 'q')
        for win in (MPI.Win.Allocate(32 if rank == 0 else 0, 8, comm=comm),
                    MPI.Win.Create(mem if rank == 0 else None, 8, comm=comm)):
            win.Lock_all()
            seen = []
            comm.Barrier()
            for i in range(K):
                win.Fetch_and_op(one, old, 0, 0, MPI.SUM)           # direct path
                seen.append(int(old[0]))
                win.Accumulate(one, 0, 1, MPI.SUM)                  # direct path
                win.Accumulate([one, 1, MPI.INT64_T], 0, (2, 1, MPI.INT64_T), MPI.SUM)
                while True:                                         # a CAS increment
                    cur = np.zeros(1, 'q')
                    win.Fetch_and_op(one, cur, 0, 3, MPI.NO_OP)
                    win.Compare_and_swap(cur + 1, cur, old, 0, 3)
                    if old[0] == cur[0]:
                        break
            win.Unlock_all()
            every = comm.gather(seen)
            comm.Barrier()
            if rank == 0:
                values = sorted(v for s in every for v in s)
                assert values == list(range(K * size)), values[:20]  # each value fetched once
                got = np.frombuffer(win.tomemory(), 'q').tolist()
                assert got == [K * size] * 4, got
            win.Free()
        """),
        timeout=50,
    )
    assert_ok(proc, n)


def test_one_element_combines_exactly_as_numpy(run_mpi) -> None:
    proc = run_mpi(
        2,
        program("""
        win = MPI.Win.Allocate(64, 1, comm=comm)
        peer = 1 - rank
        ops = {'SUM': np.add, 'PROD': np.multiply, 'MAX': np.maximum, 'MIN': np.minimum}
        cases = [('b', [127, -128, 5]), ('B', [255, 3]), ('q', [2**63 - 1, -2**63, 7]),
                 ('Q', [2**64 - 1, 1]), ('i', [2**31 - 1, -5]), ('H', [65535, 2]),
                 ('d', [1.5, -0.0, 0.0, float('nan'), float('inf'), -float('inf')])]
        with np.errstate(all='ignore'):
            for char, values in cases:
                for name, ufunc in ops.items():
                    for a in values:
                        for b in values:
                            x = np.array([a], char)
                            y = np.array([b], char)
                            want = ufunc(x, y)     # origin op target, origin on the left
                            win.Lock(peer)
                            win.Put(y, peer, 8)
                            res = np.zeros(1, char)
                            win.Fetch_and_op(x, res, peer, 8, getattr(MPI, name))
                            got = np.zeros(1, char)
                            win.Get(got, peer, 8)
                            win.Unlock(peer)
                            assert res.tobytes() == y.tobytes(), (char, name, a, b, res)
                            assert got.tobytes() == want.tobytes(), (char, name, a, b, got, want)
        # REPLACE, NO_OP, Get_accumulate of one and of many elements
        win.Lock(peer)
        win.Put(np.array([5.0]), peer, 0)
        res = np.zeros(1)
        win.Fetch_and_op(np.array([7.0]), res, peer, 0, MPI.REPLACE)
        assert res[0] == 5.0, res
        win.Fetch_and_op(np.array([9.0]), res, peer, 0, MPI.NO_OP)
        assert res[0] == 7.0, res
        win.Get_accumulate(np.array([1.0]), res, peer, 0, MPI.SUM)
        assert res[0] == 7.0, res
        many = np.zeros(4, 'i')
        win.Put(np.arange(4, dtype='i'), peer, 16)
        win.Get_accumulate(np.full(4, 10, 'i'), many, peer, 16, MPI.SUM)
        after = np.zeros(4, 'i')
        win.Get(after, peer, 16)
        assert many.tolist() == [0, 1, 2, 3] and after.tolist() == [10, 11, 12, 13], (many, after)
        # what the direct paths leave to the general one keeps its errors, and loses nothing
        raises(MPI.ERR_RMA_RANGE, win.Accumulate, np.ones(4, 'i'), peer, 60, MPI.SUM)
        raises(MPI.ERR_RMA_RANGE, win.Fetch_and_op, np.ones(1), res, peer, 60, MPI.SUM)
        readonly = np.zeros(4, 'i')
        readonly.flags.writeable = False
        try:
            win.Get_accumulate(np.ones(4, 'i'), readonly, peer, 16, MPI.SUM)
        except (BufferError, TypeError, ValueError):
            pass
        else:
            raise AssertionError("a read-only result was accepted")
        try:
            win.Compare_and_swap(np.ones(1), np.ones(1), np.zeros(1, 'f'), peer, 0)
        except (MPI.Exception, ValueError):
            pass
        else:
            raise AssertionError("a result of another type was accepted")
        raises(MPI.ERR_OP, win.Accumulate, np.ones(1), peer, 0, MPI.Op.Create(lambda a, b, t: None))
        win.Get(after, peer, 16)
        assert after.tolist() == [10, 11, 12, 13], after
        win.Unlock(peer)
        win.Fence()
        win.Free()
        # Compare_and_swap compares the bits: -0.0 is not 0.0, a NaN is itself
        win = MPI.Win.Allocate(8, 8, comm=comm)
        win.Lock(peer)
        for stored, compare, swaps in ((0.0, -0.0, False), (0.0, 0.0, True),
                                       (float('nan'), float('nan'), True)):
            win.Put(np.array([stored]), peer, 0)
            res = np.zeros(1)
            win.Compare_and_swap(np.array([42.0]), np.array([compare]), res, peer, 0)
            after = np.zeros(1)
            win.Get(after, peer, 0)
            assert np.array([stored]).tobytes() == res.tobytes(), (stored, res)
            assert (after[0] == 42.0) == swaps, (stored, compare, after)
        win.Unlock(peer)
        win.Free()
        """),
        timeout=50,
    )
    assert_ok(proc, 2)


# -- progress.shmlock, in plain processes -------------------------------------------
_HOLDER = """
import os, sys, time
from ipympi.progress.shmlock import HostMutexes
mutexes = HostMutexes.open(sys.argv[1], 2)
if sys.argv[2] == "pid":
    mutexes.acquire(1)             # as a holder does: semaphore taken, pid in the slot
else:
    mutexes._sems[1].acquire()     # dies before writing its pid
print("held", flush=True)
time.sleep(60)
"""


def _holder(name: str, how: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HOLDER), name, how],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def _end(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait(10)
    if child.stdout is not None:
        child.stdout.close()


@pytest.mark.parametrize("how", ["pid", "no pid"])
def test_a_mutex_whose_holder_died_is_freed(how: str) -> None:
    mutexes = HostMutexes.create(2)
    child = _holder(mutexes.name, how)
    try:
        mutexes.peers = [child.pid]
        mutexes.unlink()
        assert not mutexes._sems[1].acquire(False)  # held by the child
        child.send_signal(signal.SIGKILL)
        time.sleep(0.1)
        assert not process_alive(child.pid)  # a zombie, not reaped yet
        t0 = time.monotonic()
        mutexes.acquire(1)
        took = time.monotonic() - t0
        limit = 5 * shmlock.SLICE if how == "pid" else shmlock.ORPHANED + 5 * shmlock.SLICE
        assert took < limit + 1.0, took
        assert int(mutexes._slots[1]) == os.getpid()
        mutexes.release(1)
        mutexes.acquire(1)  # freed once, not twice: still a mutex
        assert not mutexes._sems[1].acquire(False)
        mutexes.release(1)
        mutexes.acquire(0)  # the other mutex was never involved
        mutexes.release(0)
    finally:
        _end(child)
        mutexes.close()


def test_an_interrupted_wait_keeps_nothing_and_names_are_gone() -> None:
    mutexes = HostMutexes.create(2)
    child = _holder(mutexes.name, "pid")
    names = [f"/dev/shm/sem.{os.path.basename(mutexes.name)}-{i}" for i in range(2)]
    try:
        mutexes.unlink()
        assert not any(os.path.exists(p) for p in [*names, mutexes.name])

        class Interrupted(Exception):
            pass

        def interrupt(signum: int, frame: object) -> None:
            raise Interrupted

        old = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                mutexes.acquire(1)  # the live child holds it: waits until interrupted
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert not mutexes._sems[1]._is_mine()
        child.kill()
        child.wait(10)
        mutexes.acquire(1)  # then freed for this process, as the holder died
        mutexes.release(1)
    finally:
        _end(child)
        mutexes.close()


def test_the_accumulate_locks_leave_nothing_behind(run_mpi) -> None:
    proc = run_mpi(
        3,
        program(
            """
        import glob
        wins = [MPI.Win.Allocate(8, comm=comm), MPI.Win.Create(None, comm=comm)]
        assert all(w._impl.mutexes is not None for w in wins)  # named semaphores here
        comm.Barrier()
        pids = comm.allgather(os.getpid())
        left = [p for p in glob.glob('/dev/shm/*ipympi-mtx-*')
                if any(f'-{pid}-' in p for pid in pids)]
        assert not left, left
        for w in wins:
            w.Free()
        """.replace("import glob", "import glob, os")
        ),
    )
    assert_ok(proc, 3)


# -- Fence through the shared counters --------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_fences_pair_up_and_show_every_put(run_mpi, n: int) -> None:
    proc = run_mpi(
        n,
        program("""
        win = MPI.Win.Allocate(8 * size, 8, comm=comm)
        mine = np.frombuffer(win.tomemory(), 'q')
        win.Fence()
        for i in range(1, 401):
            win.Put(np.array([i * size + rank], 'q'), nxt, rank)
            if i % 7 == 0:
                time.sleep(0.002 * rank)     # arrive at different times, some sleep
            win.Fence()
            assert mine[prv] == i * size + prv, (i, mine)   # the neighbour's Put is here
            win.Fence()                                     # before anyone overwrites it
        win.Fence(MPI.MODE_NOSUCCEED)
        win.Free()
        """),
        timeout=50,
    )
    assert_ok(proc, n)


def test_a_rank_that_dies_before_fencing_ends_the_job(run_mpi) -> None:
    t0 = time.monotonic()
    proc = run_mpi(
        3,
        mpi_program(
            MPI_PRELUDE,
            """
        import os
        win = MPI.Win.Allocate(8, comm=comm)
        win.Fence()
        if rank == 1:
            os._exit(7)
        win.Fence()                  # waits for rank 1, which is gone
        """,
            ok=False,
        ),
        timeout=40,
    )
    assert proc.returncode != 0, proc.stderr
    assert time.monotonic() - t0 < 30, proc.stderr


def test_the_shared_barrier_takes_an_interrupted_arrival_back() -> None:
    import threading

    first = HostMutexes.create(2)
    second = HostMutexes.open(first.name, 2)
    first.unlink()

    class Interrupted(Exception):
        pass

    def interrupted() -> None:
        raise Interrupted

    try:
        with pytest.raises(Interrupted):
            first.barrier(0, interrupted)  # the other never came
        assert first._arrivals[first._arrived[0]] == 0 and first._epoch == 0
        done = []
        other = threading.Thread(target=lambda: done.append(second.barrier(1, lambda: None)))
        other.start()
        first.barrier(0, lambda: None)  # pairs with the other's first barrier
        other.join(10)
        assert done == [None]
        assert first._epoch == second._epoch == 1
    finally:
        first.close()
        second.close()


def test_the_shared_barrier_calls_between_while_it_looks() -> None:
    """``between`` runs among the looks (a fence reads its socket there while frames
    are awaited); here its first call is what brings the other process."""
    import threading

    first = HostMutexes.create(2)
    second = HostMutexes.open(first.name, 2)
    first.unlink()
    calls: list[int] = []
    others: list[threading.Thread] = []

    def between() -> None:
        if not calls:
            others.append(threading.Thread(target=second.barrier, args=(1, lambda: None)))
            others[0].start()
        calls.append(1)

    try:
        first.barrier(0, lambda: None, between)
        others[0].join(10)
        assert calls and first._epoch == second._epoch == 1
    finally:
        first.close()
        second.close()
