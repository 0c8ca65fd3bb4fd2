"""Partitioned communication (MPI 4 chapter 5) on real ranks, and its pure arithmetic.

Rank-agnostic programs at 1, 2 and 4 ranks: a ring of partitioned sends started
several times, parts leaving as they are readied and arriving partition by
partition (``Parrived`` true before the whole message is in), different partition
counts on the two sides, matching in the order of initialization, and the errors.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.mpi.partitioned import covering

NPROCS = [1, 2, 4]


def program(body: str) -> str:
    return mpi_program(MPI_PRELUDE, body)


def test_covering_maps_sender_parts_onto_receive_partitions() -> None:
    assert list(covering(0, 2, 4)) == [0, 1]
    assert list(covering(1, 2, 4)) == [2, 3]
    assert list(covering(0, 4, 2)) == [0]
    assert list(covering(3, 4, 2)) == [1]
    assert list(covering(1, 2, 3)) == [1, 2]  # the middle sender part straddles both
    assert list(covering(0, 3, 3)) == [0]


@pytest.mark.parametrize("n", NPROCS)
def test_ring_restart_and_partial_arrival(run_mpi, n: int) -> None:
    body = """
    parts = 4
    sbuf = np.zeros(8 * parts, "d")
    rbuf = np.full(8 * parts, -1.0)
    sreq = comm.Psend_init(sbuf, parts, nxt, 5)
    rreq = comm.Precv_init(rbuf, parts, prv, 5)
    assert isinstance(sreq, MPI.Prequest) and isinstance(rreq, MPI.Prequest)
    assert rreq.Parrived(0), "an inactive request reports every partition arrived"
    for it in range(3):
        sbuf[:] = np.repeat(np.arange(parts) + 100 * it + rank, 8)
        rreq.Start()
        assert not any(rreq.Parrived(i) for i in range(parts))
        comm.Barrier()
        sreq.Start()
        sreq.Pready(2)
        comm.Barrier()
        # partition 2 left on its own: it arrives while the others are not ready
        t0 = time.monotonic()
        while not rreq.Parrived(2):
            assert time.monotonic() - t0 < 20
        assert not rreq.Parrived(0) and not rreq.Parrived(3)
        assert not rreq.Test()
        assert (rbuf[16:24] == 2 + 100 * it + prv).all()
        comm.Barrier()
        sreq.Pready_list([0, 3])
        sreq.Pready_range(1, 1)
        st = MPI.Status()
        rreq.Wait(st)
        sreq.Wait()
        assert st.Get_source() == prv and st.Get_tag() == 5 and st.Get_count(MPI.DOUBLE) == 32
        assert (rbuf == np.repeat(np.arange(parts) + 100 * it + prv, 8)).all()
        assert all(rreq.Parrived(i) for i in range(parts))
        comm.Barrier()
    # also completed by Waitall, Start by Startall
    MPI.Prequest.Startall([rreq, sreq])
    sreq.Pready_range(0, parts - 1)
    MPI.Request.Waitall([rreq, sreq])
    sreq.Free(); rreq.Free()
    assert sreq == MPI.REQUEST_NULL and rreq == MPI.REQUEST_NULL
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_different_partition_counts_and_large_parts(run_mpi, n: int) -> None:
    body = """
    def covering_first(rparts, sparts):
        # the receive partitions that sender part 0 covers entirely
        return [j for j in range(rparts) if (j + 1) * sparts <= rparts]

    for sparts, rparts, count in [(2, 4, 8), (3, 1, 6), (4, 2, 400000)]:
        sbuf = np.arange(count, dtype="i") + rank
        rbuf = np.zeros(count, "i")
        sreq = comm.Psend_init(sbuf, sparts, nxt, 1)
        rreq = comm.Precv_init(rbuf, rparts, prv, 1)
        rreq.Start(); sreq.Start()
        comm.Barrier()
        sreq.Pready(0)
        for j in covering_first(rparts, sparts):
            t0 = time.monotonic()
            while not rreq.Parrived(j):
                assert time.monotonic() - t0 < 20
        sreq.Pready_range(1, sparts - 1) if sparts > 1 else None
        rreq.Wait(); sreq.Wait()
        assert (rbuf == np.arange(count, dtype="i") + prv).all()
        sreq.Free(); rreq.Free()
        comm.Barrier()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", [2, 4])
def test_matching_in_order_of_initialization(run_mpi, n: int) -> None:
    body = """
    a, b = np.zeros(4, "i"), np.zeros(4, "i")
    s1 = comm.Psend_init(np.full(4, 1, "i"), 2, nxt, 0)
    s2 = comm.Psend_init(np.full(4, 2, "i"), 2, nxt, 0)
    r1 = comm.Precv_init(a, 2, prv, 0)
    r2 = comm.Precv_init(b, 2, prv, 0)
    # the second pair runs first, the first pair's parts come in between
    s2.Start(); s1.Start(); r2.Start()
    s1.Pready(1); s2.Pready_range(0, 1)
    r2.Wait(); s2.Wait()
    assert (b == 2).all()
    r1.Start(); s1.Pready(0)
    r1.Wait(); s1.Wait()
    assert (a == 1).all()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", [1, 2])
def test_errors(run_mpi, n: int) -> None:
    body = """
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    buf = np.zeros(6, "i")
    raises(MPI.ERR_ARG, comm.Psend_init, buf, 0, nxt)
    raises(MPI.ERR_RANK, comm.Psend_init, buf, 2, size)
    raises(MPI.ERR_TAG, comm.Psend_init, buf, 2, nxt, -5)
    raises(MPI.ERR_RANK, comm.Precv_init, buf, 2, MPI.ANY_SOURCE, 0)
    raises(MPI.ERR_TAG, comm.Precv_init, buf, 2, prv, MPI.ANY_TAG)
    try:
        comm.Psend_init(np.zeros(5, "i"), 2, nxt)
        raise AssertionError("an indivisible buffer was accepted")
    except ValueError:
        pass
    sreq = comm.Psend_init(buf, 3, nxt, 7)
    rreq = comm.Precv_init(np.zeros(6, "i"), 3, prv, 7)
    raises(MPI.ERR_REQUEST, sreq.Pready, 0)  # not started
    sreq.Start()
    raises(MPI.ERR_ARG, sreq.Pready, 3)
    raises(MPI.ERR_ARG, sreq.Pready, -1)
    raises(MPI.ERR_ARG, sreq.Pready_range, 1, 3)
    raises(MPI.ERR_REQUEST, rreq.Pready, 0)  # a receive
    raises(MPI.ERR_REQUEST, sreq.Parrived, 0)  # a send
    raises(MPI.ERR_REQUEST, MPI.Prequest(comm.Send_init(buf, nxt)).Pready, 0)
    sreq.Pready(0)
    raises(MPI.ERR_ARG, sreq.Pready, 0)  # already ready
    sreq.Pready_list([1, 2])
    rreq.Start()
    raises(MPI.ERR_ARG, rreq.Parrived, 3)
    rreq.Wait(); sreq.Wait()
    # the total sizes must match
    big = comm.Psend_init(np.zeros(8, "i"), 2, nxt, 8)
    small = comm.Precv_init(np.zeros(6, "i"), 3, prv, 8)
    big.Start(); small.Start()
    big.Pready_range(0, 1)
    raises(MPI.ERR_TRUNCATE, small.Wait)
    big.Wait()
    # PROC_NULL completes at once
    p = comm.Precv_init(np.zeros(2, "i"), 2, MPI.PROC_NULL, 0)
    q = comm.Psend_init(np.zeros(2, "i"), 2, MPI.PROC_NULL, 0)
    p.Start(); q.Start(); q.Pready_range(0, 1)
    p.Wait(); q.Wait()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", [2, 4])
def test_over_an_intercommunicator(run_mpi, n: int) -> None:
    body = """
    color = rank % 2
    local = comm.Split(color, rank)
    inter = local.Create_intercomm(0, comm, 1 - color, 9)
    me = local.Get_rank()
    out = np.zeros(6, "i")
    sreq = inter.Psend_init(np.full(6, rank, "i"), 3, me, 2)
    rreq = inter.Precv_init(out, 2, me, 2)
    for _ in range(2):
        out[:] = -1
        rreq.Start(); sreq.Start()
        sreq.Pready_list([2, 0, 1])
        MPI.Request.Waitall([rreq, sreq])
        assert (out == (rank + 1 if color == 0 else rank - 1)).all()
    """
    assert_ok(run_mpi(n, program(body)), n)
