"""Persistent requests on real ranks: *_init, Start, Startall, reuse, Free, Cancel.

Rank-agnostic programs at 1, 2 and 4 ranks. Rules: INVENTORY §2.3 P-22, P-28,
P-33, P-45..P-48, P-51.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + """
Request, Prequest = MPI.Request, MPI.Prequest
"""
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_start_wait_reuse(run_mpi, n: int) -> None:
    body = """
    sbuf = np.zeros(8, "d")
    rbuf = np.zeros(8, "d")
    sreq = comm.Send_init(sbuf, nxt, 1)
    rreq = comm.Recv_init(rbuf, prv, 1)
    assert isinstance(sreq, MPI.Prequest) and isinstance(rreq, MPI.Prequest)
    assert isinstance(sreq, MPI.Request)
    # created inactive (P-46): Wait/Test return at once with an empty status
    for req in (sreq, rreq):
        assert req and req != MPI.REQUEST_NULL
        st = dirty()
        assert req.Test(st) and is_empty(st)
        st = dirty()
        req.Wait(st)
        assert is_empty(st) and req, "an inactive request stays allocated"
        st = dirty()
        assert req.Get_status(st) and is_empty(st)
    assert not comm.Iprobe(prv, 1)  # *_init communicates nothing
    handshake()

    # Start/Wait several times; the buffer is read at each Start (P-47)
    st = MPI.Status()
    for it in range(5):
        sbuf[:] = np.arange(8) + 100 * it + rank
        rreq.Start()
        sreq.Start()
        rreq.Wait(st)
        sreq.Wait()
        assert (rbuf == np.arange(8) + 100 * it + prv).all(), (it, rbuf)
        assert (st.source, st.tag, st.Get_count(MPI.DOUBLE)) == (prv, 1, 8)
        assert rreq and sreq and rreq != MPI.REQUEST_NULL  # inactive, not freed
    # Test loop completion also leaves it inactive; then it can start again
    sbuf[:] = -1
    rreq.Start()
    sreq.start()
    deadline = time.monotonic() + 10
    while not Request.Testall([rreq, sreq]):
        assert time.monotonic() < deadline
    assert (rbuf == -1).all() and rreq and sreq

    # Startall + Waitall, several rounds, several tags (P-46)
    sbufs = [np.zeros(3, "i") for _ in range(3)]
    rbufs = [np.zeros(3, "i") for _ in range(3)]
    reqs = [comm.Recv_init(rbufs[k], prv, 10 + k) for k in range(3)]
    reqs += [comm.Send_init(sbufs[k], nxt, 10 + k) for k in range(3)]
    for it in range(4):
        for k in range(3):
            sbufs[k][:] = 1000 * it + 10 * k + rank
        Prequest.Startall(reqs)
        sts = []
        Request.Waitall(reqs, sts)
        for k in range(3):
            assert (rbufs[k] == 1000 * it + 10 * k + prv).all()
            assert sts[k].tag == 10 + k and sts[k].source == prv
        assert all(reqs)
    Prequest.startall(reqs)
    Request.waitall(reqs)

    # persistent sends match ordinary receives and vice versa (P-48)
    sbuf[:] = rank
    sreq.Start()
    got = np.zeros(8)
    comm.Recv(got, prv, 1)
    sreq.Wait()
    assert (got == prv).all()
    rreq.Start()
    comm.Isend(np.full(8, rank + 0.5), nxt, 1).Wait()
    rreq.Wait()
    assert (rbuf == prv + 0.5).all()
    # ANY_SOURCE / ANY_TAG persistent receive
    anyreq = comm.Recv_init(rbuf, MPI.ANY_SOURCE, MPI.ANY_TAG)
    for tag in (3, 4):
        anyreq.Start()
        comm.Isend(np.full(8, tag, "d"), nxt, tag).Wait()
        anyreq.Wait(st)
        assert (st.source, st.tag) == (prv, tag) and (rbuf == tag).all()

    # order follows the order of the Start calls (P-22)
    a, b = np.array([1], "i"), np.array([2], "i")
    pa, pb = comm.Send_init(a, nxt, 5), comm.Send_init(b, nxt, 5)
    got = np.zeros(1, "i")
    for first, second in ((pa, pb), (pb, pa)):
        first.Start()
        second.Start()
        comm.Recv(got, prv, 5)
        v1 = int(got[0])
        comm.Recv(got, prv, 5)
        v2 = int(got[0])
        assert (v1, v2) == ((1, 2) if first is pa else (2, 1))
        Request.Waitall([pa, pb])

    # Waitany/Waitsome make persistent requests inactive, not null (P-33)
    r1 = comm.Recv_init(np.zeros(1, "i"), prv, 6)
    s1 = comm.Send_init(np.array([6], "i"), nxt, 6)
    r1.Start()
    s1.Start()
    assert Request.Waitany([r1]) == 0 and r1 and r1 != MPI.REQUEST_NULL
    assert Request.Waitany([r1]) == MPI.UNDEFINED  # inactive again
    s1.Wait()
    r1.Start()
    s1.Start()
    idx = []
    while not idx:
        idx = Request.Waitsome([r1, s1])
    Request.Waitall([r1, s1])
    assert Request.Waitsome([r1, s1]) is None and r1 and s1

    # large (rendezvous) persistent messages, reused with new contents each time
    big = np.zeros(300_000)
    gbig = np.zeros(300_000)
    bs, br = comm.Send_init(big, nxt, 8), comm.Recv_init(gbig, prv, 8)
    for it in range(3):
        big[:] = it * 10 + rank
        Prequest.Startall([br, bs])
        Request.Waitall([br, bs])
        assert (gbig == it * 10 + prv).all(), it
    # Free of an active request: allowed; the communication still completes (P-47)
    big[:] = -rank
    bs.Start()
    bs.Free()
    assert bs == MPI.REQUEST_NULL and not bs
    comm.Recv(gbig, prv, 8)
    assert (gbig == -prv).all()
    br.Free()

    # Free: the handle becomes REQUEST_NULL (P-47)
    for req in [sreq, rreq, anyreq, pa, pb, r1, s1, *reqs]:
        req.Free()
        assert req == MPI.REQUEST_NULL and not req
    st = dirty()
    assert r1.Test(st) and is_empty(st)  # a freed (null) request
    # a request freed right after its last Wait: the message was delivered
    last = comm.Send_init(np.array([77], "i"), nxt, 7)
    last.Start()
    last.Wait()
    last.Free()
    comm.Recv(got, prv, 7)
    assert got[0] == 77
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_modes_cancel_and_proc_null(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()
    got = np.zeros(4, "i")
    # Ssend_init: does not complete before the matching receive is posted (P-18)
    ssreq = comm.Ssend_init(np.arange(4, dtype="i") + rank, nxt, 1)
    for it in range(2):
        ssreq.Start()
        t_end = time.monotonic() + 0.1
        while time.monotonic() < t_end:
            assert not ssreq.Test(), "a synchronous send completed before its receive"
        release()  # prv has checked its pending Ssend too; now receive it
        comm.Recv(got, prv, 1)
        ssreq.Wait()
        assert (got == np.arange(4) + prv).all() and ssreq
    ssreq.Free()

    # Bsend_init: buffered, local; the attached buffer is reused at each Start
    MPI.Attach_buffer(bytearray(4 * 4 + MPI.BSEND_OVERHEAD))
    bbuf = np.zeros(4, "i")
    breq = comm.Bsend_init(bbuf, nxt, 2)
    for it in range(3):
        bbuf[:] = it + rank
        breq.Start()
        breq.Wait()  # local: completes without the receiver
        bbuf[:] = -1
        comm.Recv(got, prv, 2)
        assert (got == it + prv).all()
    breq.Free()
    MPI.Detach_buffer()

    # Rsend_init: the matching receive is posted before Start (P-48)
    rsreq = comm.Rsend_init(np.full(4, rank, "i"), nxt, 3)
    rreq = comm.Recv_init(got, prv, 3)
    for it in range(2):
        rreq.Start()
        handshake()  # my receive is posted; nxt's receive is posted
        rsreq.Start()
        Request.Waitall([rreq, rsreq])
        assert (got == prv).all()
        got[:] = 0
        handshake()
    rsreq.Free()

    # Cancel of an active persistent receive: cancels the communication, not the
    # request; after Wait it is inactive and can be started again (P-45)
    got[:] = -5
    rreq.Start()
    rreq.Cancel()
    rreq.Wait(st)
    assert st.Is_cancelled() and rreq and (got == -5).all()
    handshake()
    rreq.Start()
    comm.Isend(np.full(4, 9, "i"), nxt, 3).Wait()
    rreq.Wait(st)
    assert not st.Is_cancelled() and (got == 9).all() and st.source == prv
    rreq.Free()

    # PROC_NULL persistent requests complete at once on every Start (P-51)
    buf = np.arange(4, dtype="i")
    nulls = [comm.Send_init(buf, MPI.PROC_NULL), comm.Ssend_init(buf, MPI.PROC_NULL, 1),
             comm.Bsend_init(buf, MPI.PROC_NULL, 2), comm.Rsend_init(buf, MPI.PROC_NULL, 3),
             comm.Recv_init(buf, MPI.PROC_NULL, 4)]
    for it in range(2):
        Prequest.Startall(nulls)
        sts = [dirty() for _ in nulls]
        assert Request.Testall(nulls, sts)
        assert (sts[4].source, sts[4].tag, sts[4].Get_count()) == (MPI.PROC_NULL, MPI.ANY_TAG, 0)
        assert (buf == np.arange(4)).all() and all(nulls)
    for req in nulls:
        req.Free()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", [2])
def test_a_plain_handle_of_a_persistent_request_is_the_same_request(run_mpi, n: int) -> None:
    # mpi4py allows Request(preq): a plain MPI.Request handle of the same persistent
    # request, equal to it, which sees it started and deactivates it by completing
    body = """
    buf = np.zeros(3)
    preq = comm.Send_init(np.arange(3.0), nxt, 5) if rank == 0 else comm.Recv_init(buf, prv, 5)
    view = Request(preq)
    assert type(view) is Request and view == preq and view and view.handle == preq.handle
    assert Prequest(view) == preq and type(Prequest(view)) is Prequest
    st = dirty()
    assert view.Test(st) and is_empty(st) and view  # inactive: at once, and it stays
    for it in range(3):
        buf[:] = 0
        preq.Start()
        if it == 0:
            view.Wait()  # the activation started through the other handle
        elif it == 1:
            Request.Waitall([view])
        else:
            while not view.Test():
                pass
        assert rank == 0 or buf.tolist() == [0.0, 1.0, 2.0], (it, buf)
        assert preq.Test() and view  # deactivated, not freed: it starts again
    view.Free()
    assert not view and view == MPI.REQUEST_NULL
    preq.Free()
    """
    assert_ok(run_mpi(n, program(body)), n)
