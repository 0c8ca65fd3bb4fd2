"""THREAD_MULTIPLE: several threads of one rank in MPI calls at once.

Real ranks under the launcher: threads blocked in point-to-point calls, probes,
waits and collectives on different communicators at the same time, each woken
when its own call completes, whichever thread read the message; a deadlock
among threads is reported and a thread's progress is not taken for one;
Ctrl-C and a peer's death reach threads waiting beside others. Also mpi4py's
per-communicator lock table (``MPI._comm_lock_table``).
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.launch.launcher import DEADLOCK_STATUS

THREADS_PRELUDE = (
    MPI_PRELUDE
    + '''
import os
import threading

assert MPI.Query_thread() == MPI.THREAD_MULTIPLE


def run_threads(*targets):
    """Run each target in a thread of its own; re-raise the first failure here."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    return threads, errors


def join(threads, errors):
    for t in threads:
        t.join(20)
        assert not t.is_alive(), "a thread is still blocked"
    if errors:
        raise errors[0]
'''
)

SAFETY = 40  # the launcher's --timeout: far beyond what any of these takes


def program(body: str, ok: bool = True) -> str:
    return mpi_program(THREADS_PRELUDE, body, ok)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [2, 4])
def test_three_threads_in_send_recv_beside_a_collective_of_the_main_thread(run_mpi, n) -> None:
    source = program(
        """
        dup = comm.Dup()
        ROUNDS = 100

        def ring(tag):
            def run():
                for i in range(ROUNDS):
                    if rank % 2 == 0:
                        comm.send((rank, tag, i), dest=nxt, tag=tag)
                        got = comm.recv(source=prv, tag=tag)
                    else:
                        got = comm.recv(source=prv, tag=tag)
                        comm.send((rank, tag, i), dest=nxt, tag=tag)
                    assert got == (prv, tag, i), (got, tag, i)
            return run

        threads, errors = run_threads(ring(1), ring(2), ring(3))
        total = 0
        for i in range(50):
            total += dup.allreduce(i)
            dup.Barrier()
            assert dup.bcast(i if rank == 0 else None, root=0) == i
        join(threads, errors)
        assert total == size * sum(range(50))
        dup.Free()
        """
    )
    assert_ok(run_mpi(n, source, timeout=SAFETY), n)


@pytest.mark.timeout(90)
def test_probes_and_waits_from_several_threads(run_mpi) -> None:
    source = program(
        """
        TAGS = (11, 12, 13)

        def prober(tag):
            def run():
                # Iprobe until the message is there, then Probe and receive it
                st = MPI.Status()
                while not comm.Iprobe(source=prv, tag=tag, status=st):
                    time.sleep(0.001)
                assert (st.Get_source(), st.Get_tag()) == (prv, tag)
                comm.Probe(source=prv, tag=tag + 10)
                buf = np.zeros(3, "i")
                comm.Recv(buf, source=prv, tag=tag)
                assert list(buf) == [prv, tag, 1]
                assert comm.recv(source=prv, tag=tag + 10) == tag
            return run

        def waiter(tag):
            def run():
                bufs = [np.zeros(2, "i") for _ in range(3)]
                reqs = [comm.Irecv(b, source=prv, tag=10 * tag + k) for k, b in enumerate(bufs)]
                idx = MPI.Request.Waitany(reqs)
                assert 0 <= idx < 3
                MPI.Request.Waitall(reqs)
                assert [list(b) for b in bufs] == [[prv, k] for k in range(3)]
                req = comm.irecv(source=prv, tag=tag + 200)
                assert req.wait() == ("last", tag)
            return run

        threads, errors = run_threads(*[prober(t) for t in TAGS], *[waiter(t) for t in TAGS])
        time.sleep(0.2)  # let every thread block first
        sends = []
        for tag in reversed(TAGS):
            sends.append(comm.Isend(np.array([rank, tag, 1], "i"), dest=nxt, tag=tag))
            comm.send(tag, dest=nxt, tag=tag + 10)
            for k in (2, 0, 1):
                sends.append(comm.Isend(np.array([rank, k], "i"), dest=nxt, tag=10 * tag + k))
            comm.send(("last", tag), dest=nxt, tag=tag + 200)
        MPI.Request.Waitall(sends)
        join(threads, errors)
        """
    )
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)
    assert_ok(run_mpi(3, source, timeout=SAFETY), 3)


@pytest.mark.timeout(90)
def test_a_thread_blocked_in_recv_while_the_main_thread_does_collectives(run_mpi) -> None:
    source = program(
        """
        got = []
        threads, errors = run_threads(lambda: got.append(comm.recv(source=prv, tag=77)))
        for i in range(200):
            comm.Barrier()
            assert comm.allreduce(1) == size
            a = np.full(4, float(rank))
            comm.Allreduce(MPI.IN_PLACE, a)
            assert a[0] == sum(range(size))
            b = np.arange(3.0) if rank == 0 else np.zeros(3)
            comm.Bcast(b, root=0)
            assert list(b) == [0.0, 1.0, 2.0]
        comm.send(f"from {rank}", dest=nxt, tag=77)
        join(threads, errors)
        assert got == [f"from {prv}"]
        """
    )
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)
    assert_ok(run_mpi(4, source, timeout=SAFETY), 4)


@pytest.mark.timeout(60)
def test_threads_in_collectives_on_different_communicators(run_mpi) -> None:
    source = program(
        """
        comms = [comm.Dup() for _ in range(3)]

        def collectives(c, k):
            def run():
                for i in range(100):
                    assert c.allreduce(k + i) == size * (k + i)
                    c.Barrier()
                    assert c.bcast((k, i) if c.rank == 0 else None, root=0) == (k, i)
                    assert c.allgather(rank) == list(range(size))
            return run

        join(*run_threads(*[collectives(c, k) for k, c in enumerate(comms)]))
        for c in comms:
            c.Free()
        """
    )
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)
    assert_ok(run_mpi(4, source, timeout=SAFETY), 4)


@pytest.mark.timeout(60)
def test_a_message_to_itself_between_threads(run_mpi) -> None:
    # mpi4py's demo profiling/threads.py, large and small: the receiving thread may
    # block first, holding the socket, while the sending thread enters
    source = program(
        """
        for n in (10, 1_000_000):
            out = np.arange(n, dtype="i")
            into = np.zeros(n, dtype="i")
            recv = lambda: comm.Recv(into, source=rank, tag=n % 7)
            send = lambda: (time.sleep(0.1), comm.Send(out, dest=rank, tag=n % 7))
            join(*run_threads(recv, send))
            assert (into == out).all()
        """
    )
    assert_ok(run_mpi(1, source, timeout=SAFETY), 1)
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)


@pytest.mark.timeout(60)
def test_a_deadlock_of_threads_is_reported(run_mpi) -> None:
    source = program(
        """
        threads, errors = run_threads(
            lambda: comm.recv(source=prv, tag=5), lambda: comm.Recv(np.zeros(1), prv, 6)
        )
        join(threads, errors)
        """,
        ok=False,
    )
    proc = run_mpi(2, source, timeout=SAFETY)
    assert proc.returncode == DEADLOCK_STATUS, proc.stderr
    assert "deadlock" in proc.stderr and "waits in" in proc.stderr, proc.stderr
    # each rank's report names every thread blocked in MPI
    for call in ("recv(source=", "Recv(source="):
        assert call in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_a_thread_making_progress_is_not_a_deadlock(run_mpi) -> None:
    # one thread waits 3 s for a message while the main thread exchanges messages
    source = program(
        """
        threads, errors = run_threads(lambda: comm.recv(source=prv, tag=9))
        for _ in range(300):  # about 3 s
            comm.sendrecv(rank, dest=nxt, sendtag=1, source=prv, recvtag=1)
            time.sleep(0.01)
        comm.send("done", dest=nxt, tag=9)
        join(threads, errors)
        """
    )
    proc = run_mpi(2, source, timeout=SAFETY)
    assert_ok(proc, 2)
    assert "deadlock" not in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_ctrl_c_reaches_the_main_thread_waiting_beside_others(run_mpi) -> None:
    source = program(
        """
        import signal

        got = []
        threads, errors = run_threads(
            lambda: got.append(comm.recv(source=prv, tag=3)),
            lambda: got.append(comm.recv(source=prv, tag=4)),
        )
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            comm.recv(source=prv, tag=2)
            raise AssertionError("recv returned with nothing sent")
        except KeyboardInterrupt:
            assert time.monotonic() - t0 < 5
        comm.send("three", dest=nxt, tag=3)
        comm.send("four", dest=nxt, tag=4)
        join(threads, errors)
        assert sorted(got) == ["four", "three"]
        comm.Barrier()
        """
    )
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)


@pytest.mark.timeout(60)
def test_threads_waiting_on_a_rank_that_died_fail(run_mpi) -> None:
    # what the progress thread does when the controller says that rank 1 died
    source = program(
        """
        def waits_on_rank_1(call):
            def run():
                try:
                    call()
                except MPI.Exception as exc:
                    assert "rank 1 has died (killed)" in str(exc), exc
                    return
                raise AssertionError("returned from a wait on a dead rank")
            return run

        if rank == 0:
            threads, errors = run_threads(
                waits_on_rank_1(lambda: comm.recv(source=1, tag=1)),
                waits_on_rank_1(lambda: comm.Recv(np.zeros(2), source=1, tag=2)),
                waits_on_rank_1(lambda: comm.irecv(source=1, tag=3).wait()),
            )
            time.sleep(0.3)
            comm._impl.engine.note_peer_exit(1, "killed")
            join(threads, errors)
        """
    )
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)


@pytest.mark.timeout(60)
def test_comm_lock_table(run_mpi) -> None:
    source = program(
        """
        Lock = type(threading.Lock())
        c = comm.Dup()
        table = MPI._comm_lock_table(c)
        assert table == {} and MPI._comm_lock_table(c) is table
        assert MPI._comm_lock_table(MPI.Comm(c)) is table  # the communicator's, not the handle's
        c.bcast(None, root=0)
        assert set(table) == {"bcast"} and isinstance(table["bcast"], Lock)
        c.gather(1), c.scatter([1] * size), c.allgather(1), c.alltoall([1] * size)
        assert set(table) == {"bcast", "gather", "scatter", "allgather", "alltoall"}
        c.allreduce(1), c.Barrier(), c.send(1, rank), c.recv()
        assert len(table) == 5
        lock = MPI._comm_lock(c)
        assert isinstance(lock, Lock) and MPI._comm_lock(c, None) is lock is table[None]
        assert MPI._comm_lock(c, "bcast") is table["bcast"]
        d = c.Dup()
        assert MPI._comm_lock_table(d) == {}
        d.Free()

        # a thread holding the lock keeps another thread out of c.bcast on this rank
        order = []
        with MPI._comm_lock(c, "bcast"):
            threads, errors = run_threads(lambda: order.append(c.bcast("b", root=0)))
            time.sleep(0.3)
            order.append("released")
        join(threads, errors)
        assert order == ["released", "b"], order

        c.Free()
        raises(MPI.ERR_COMM, MPI._comm_lock_table, c)
        raises(MPI.ERR_COMM, MPI._comm_lock, MPI.COMM_NULL)
        try:
            MPI._comm_lock_table(5)
            raise AssertionError("no TypeError")
        except TypeError:
            pass
        """
    )
    assert_ok(run_mpi(1, source, timeout=SAFETY), 1)
    assert_ok(run_mpi(2, source, timeout=SAFETY), 2)
