"""``mpi4py.util.sync``: the service's state machines, and the objects across ranks."""

from __future__ import annotations

import pytest
from conftest import RunMPI

from ipympi.mpi4py.util._syncservice import CondState, CounterState, MutexState


def test_counter_state_answers_then_adds_with_the_c_type() -> None:
    counter = CounterState(32766, "h")
    assert counter.handle("a", "next", (1,)) == [("a", 32766)]
    assert counter.handle("b", "next", (1,)) == [("b", 32767)]
    assert counter.handle("a", "next", (0,)) == [("a", -32768)]  # wrapped as a C short


def test_mutex_state_grants_in_arrival_order() -> None:
    mutex = MutexState()
    assert mutex.handle("a", "lock", ()) == [("a", True)]
    assert mutex.handle("b", "lock", ()) == []  # waits
    assert mutex.handle("c", "trylock", ()) == [("c", False)]
    assert mutex.handle("c", "lock", ()) == []
    assert mutex.handle("a", "unlock", ()) == [("a", None), ("b", True)]
    assert mutex.handle("b", "unlock", ()) == [("b", None), ("c", True)]
    assert mutex.handle("c", "unlock", ()) == [("c", None)]
    assert mutex.holder is None


def test_condition_state_wakes_the_oldest_waiters() -> None:
    cond = CondState()
    assert cond.handle("n", "notify", (1,)) == [("n", 0)]
    for waiter in "abc":
        assert cond.handle(waiter, "wait", ()) == [(waiter, None)]
    assert cond.handle("n", "notify", (2,)) == [("a", None), ("b", None), ("n", 2)]
    assert cond.handle("n", "notify", (None,)) == [("c", None), ("n", 1)]


SYNC = """
import time
from mpi4py import MPI
from mpi4py.util import sync

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# A counter and a sequential section: values in rank order.
counter = sync.Counter(10, comm=comm)
with sync.Sequential(comm):
    value = next(counter)
assert comm.allgather(value) == [10 + r for r in range(size)]
counter.free()

# A mutex keeps a read-modify-write of a shared counter whole, while the root is busy
# in a Barrier of its own.
mutex = sync.Mutex(comm=comm)
shared = sync.Counter(comm=comm, root=size - 1)
for _ in range(5):
    with mutex:
        before = shared.next(0)
        time.sleep(0.001)
        assert shared.next(1) == before
    if rank == 0:
        comm.Barrier()
if rank != 0:
    for _ in range(5):
        comm.Barrier()
assert shared.next(0) == 5 * size
comm.Barrier()
assert not mutex.locked()
try:
    mutex.release()
except RuntimeError:
    pass
else:
    raise AssertionError("released a mutex not held")
shared.free()
mutex.free()

# A condition variable: rank 0 notifies until every other rank has been woken.
cv = sync.Condition(comm=comm)
if rank == 0:
    woken = 0
    while woken < size - 1:
        with cv:
            woken += cv.notify()
else:
    with cv:
        cv.wait()
cv.free()

# A semaphore of 1: one holder at a time.
sem = sync.Semaphore(1, comm=comm)
holders = sync.Counter(comm=comm)
with sem:
    assert holders.next(1) == 0
    time.sleep(0.001)
    holders.next(-1)
comm.Barrier()
if rank == 0:
    try:
        sem.release()
    except ValueError:
        pass
    else:
        raise AssertionError("a bounded semaphore went past its value")
holders.free()
sem.free()
print(f"rank {rank} sync ok")
"""


@pytest.mark.timeout(90)
def test_sync_objects_across_ranks(run_mpi: RunMPI) -> None:
    result = run_mpi(3, SYNC, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("sync ok") == 3
