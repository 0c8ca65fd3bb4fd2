"""Send modes on real ranks: buffered (Attach/Detach, ERR_BUFFER), synchronous, ready.

Rank-agnostic programs at 1, 2 and 4 ranks; the checks that need a sender and a
separate receiver pair even ranks with odd ones. "Before"/"after" checks compare
``time.monotonic()`` (one clock for every process on the host) across ranks, so
they are causal, not timing margins. Rules: INVENTORY §2.3 P-14..P-20, P-23; E-17.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + """
Request = MPI.Request
# pairs for one-directional checks: even ranks send to rank + 1 (none at size 1)
paired = size > 1 and not (size % 2 and rank == size - 1)
sender = paired and rank % 2 == 0
peer = rank + 1 if sender else rank - 1
"""
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_buffered_mode(run_mpi, n: int) -> None:
    body = """
    OVER = MPI.BSEND_OVERHEAD
    assert isinstance(OVER, int) and OVER >= 0
    small = np.arange(10, dtype="i") + rank
    # no buffer attached: like a zero-size buffer, Bsend fails with ERR_BUFFER (P-15)
    MPI.Detach_buffer()  # detaching when nothing is attached is harmless
    raises(MPI.ERR_BUFFER, comm.Bsend, small, nxt, 1)
    raises(MPI.ERR_BUFFER, comm.Ibsend, small, nxt, 1)
    raises(MPI.ERR_BUFFER, comm.bsend, {"x": 1}, nxt, 1)
    raises(MPI.ERR_BUFFER, comm.ibsend, {"x": 1}, nxt, 1)

    # Bsend is local: several messages return before any receive is posted
    need = 3 * (small.nbytes + OVER)
    attached = bytearray(need)
    MPI.Attach_buffer(attached)
    raises(MPI.ERR_BUFFER, MPI.Attach_buffer, bytearray(need))  # only one at a time
    for k in range(3):
        comm.Bsend(small * (k + 1), nxt, 10 + k)
    small[:] = -1  # the user may reuse the buffer at once
    # the buffer model: a message that does not fit -> ERR_BUFFER
    raises(MPI.ERR_BUFFER, comm.Bsend, np.zeros(need), nxt, 14)
    handshake()  # only now does prv's data get received
    got = np.zeros(10, "i")
    st = MPI.Status()
    for k in range(3):
        comm.Recv(got, prv, 10 + k, st)
        assert (got == (np.arange(10) + prv) * (k + 1)).all() and st.tag == 10 + k
    assert MPI.Detach_buffer() is attached  # returns the attached buffer

    # exact fit: nbytes + BSEND_OVERHEAD fits; one more byte does not
    buf = np.zeros(16, "B")
    MPI.Attach_buffer(bytearray(buf.nbytes + OVER))
    raises(MPI.ERR_BUFFER, comm.Bsend, np.zeros(17, "B"), nxt, 20)
    comm.Bsend(buf, nxt, 20)
    comm.Recv(np.zeros(16, "B"), prv, 20)
    # space is given back once messages are transmitted: reuse it many times
    for k in range(20):
        comm.Bsend(np.full(16, k, "B"), nxt, 21)
        got = np.zeros(16, "B")
        comm.Recv(got, prv, 21)
        assert (got == k).all()
    MPI.Detach_buffer()

    # Ibsend / bsend / ibsend / Bsend with buffer specs
    MPI.Attach_buffer(np.zeros(4 * (1000 + OVER) + 300_000, "B"))
    req = comm.Ibsend([np.arange(6, dtype="i"), 4, MPI.INT], nxt, 30)
    req.Wait()  # local completion
    comm.bsend({"r": rank}, nxt, 31)
    rreq = comm.irecv(source=prv, tag=32)
    handshake()
    req = comm.ibsend(["big", bytes(200_000)], nxt, 32)
    req.wait()
    got = np.zeros(6, "i")
    comm.Recv(got, prv, 30, st)
    assert st.Get_count(MPI.INT) == 4 and (got == [0, 1, 2, 3, 0, 0]).all()
    assert comm.recv(source=prv, tag=31) == {"r": prv}
    assert rreq.wait() == ["big", bytes(200_000)]

    # order between modes is kept (P-21): Bsend then Send with one tag
    comm.Bsend(np.array([1], "i"), nxt, 33)
    sreq = comm.Isend(np.array([2], "i"), nxt, 33)
    one = np.zeros(1, "i")
    comm.Recv(one, prv, 33)
    assert one[0] == 1
    comm.Recv(one, prv, 33)
    assert one[0] == 2
    sreq.Wait()
    MPI.Detach_buffer()

    # Detach blocks until every buffered message is transmitted (P-17)
    huge = np.ones(500_000)  # 4 MB: moves only once the receive is posted
    if paired:
        MPI.Attach_buffer(bytearray(huge.nbytes + OVER))
        if sender:
            comm.Bsend(huge, peer, 40)
            MPI.Detach_buffer()
            returned = time.monotonic()
            posted = comm.recv(source=peer, tag=41)
            assert returned >= posted, (returned, posted)
        else:
            time.sleep(0.2)
            posted = time.monotonic()
            gh = np.zeros_like(huge)
            comm.Recv(gh, peer, 40)
            assert (gh == 1).all()
            comm.send(posted, peer, 41)
            MPI.Detach_buffer()

    # Example 4.6: Bsend(tag 1) then Ssend(tag 2); the receiver takes tag 2 first
    MPI.Attach_buffer(bytearray(1000))
    one = np.zeros(1, "i")
    if size == 1:
        comm.Bsend(np.array([1], "i"), rank, 1)
        req = comm.Issend(np.array([2], "i"), rank, 2)
        comm.Recv(one, rank, 2)
        assert one[0] == 2
        comm.Recv(one, rank, 1)
        assert one[0] == 1
        req.Wait()
    elif sender:
        comm.Bsend(np.array([1], "i"), peer, 1)
        comm.Ssend(np.array([2], "i"), peer, 2)
    elif paired:
        comm.Recv(one, peer, 2)
        assert one[0] == 2
        comm.Recv(one, peer, 1)
        assert one[0] == 1

    # the failed Bsends sent nothing (prv's later messages all arrived, so would they)
    assert not comm.Iprobe(prv, 1) and not comm.Iprobe(prv, 14)

    # E-17: Finalize detaches the buffer itself; leave a buffered message in flight
    if paired:
        if sender:
            comm.Bsend(np.arange(100, dtype="i"), peer, 50)
        else:
            late = np.zeros(100, "i")
            comm.Recv(late, peer, 50)
            assert (late == np.arange(100)).all()
    """
    proc = run_mpi(n, program(body))
    assert_ok(proc, n)
    assert "Finalize" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("n", NPROCS)
def test_synchronous_and_ready_modes(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()
    # Issend (small and large) does not complete before the receive is posted (P-18)
    for tag, data in ((1, np.arange(8, dtype="i") + rank), (2, np.full(200_000, rank, "d"))):
        req = comm.Issend(data, nxt, tag)
        t_end = time.monotonic() + 0.15
        while time.monotonic() < t_end:
            assert not req.Test(), "Issend completed before the receive was posted"
        release()
        got = np.zeros_like(data)
        comm.Recv(got, prv, tag, st)
        assert (got == data - rank + prv).all() and st.tag == tag
        req.Wait()
        assert req == MPI.REQUEST_NULL
    # issend (objects) likewise
    req = comm.issend({"r": rank}, nxt, 3)
    assert not req.Test()
    release()
    assert comm.recv(source=prv, tag=3) == {"r": prv}
    req.wait()

    # Example 4.14: Ssend completes once the peer's Irecv is posted, before its Wait
    for tag, count in ((4, 10), (5, 100_000)):
        got = np.zeros(count)
        rreq = comm.Irecv(got, prv, tag)
        handshake()  # my receive is posted; so is nxt's
        comm.Ssend(np.full(count, rank, "d"), nxt, tag)
        rreq.Wait(st)
        assert (got == prv).all() and st.Get_count(MPI.DOUBLE) == count
    rreq = comm.irecv(source=prv, tag=6)
    handshake()
    comm.ssend(("s", rank), nxt, 6)
    assert rreq.wait() == ("s", prv)

    # blocking Ssend returns only after the receiver posted its receive (causal check)
    if paired:
        for tag, count in ((7, 4), (8, 100_000)):
            if sender:
                comm.Ssend(np.ones(count), peer, tag)
                returned = time.monotonic()
                posted = comm.recv(source=peer, tag=tag + 100)
                assert returned >= posted, (tag, returned, posted)
            else:
                time.sleep(0.15)
                posted = time.monotonic()
                comm.Recv(np.zeros(count), peer, tag)
                comm.send(posted, peer, tag + 100)

    # Rsend / Irsend: correct when the receive is already posted (P-19)
    for tag, count in ((10, 5), (11, 300_000)):
        got = np.zeros(count)
        rreq = comm.Irecv(got, prv, tag)
        handshake()
        comm.Rsend(np.full(count, rank + 0.5), nxt, tag)
        rreq.Wait(st)
        assert (got == prv + 0.5).all() and (st.source, st.tag) == (prv, tag)
    got = np.zeros(4, "i")
    rreq = comm.Irecv([got, 3, MPI.INT], prv, 12)
    handshake()
    comm.Rsend([np.arange(4, dtype="i"), 3, MPI.INT], nxt, 12)
    rreq.Wait(st)
    assert (got == [0, 1, 2, 0]).all() and st.Get_count(MPI.INT) == 3
    # a ready send is matched by a plain blocking Recv posted as a receive
    rreq = comm.Irecv(got, MPI.ANY_SOURCE, 13)
    handshake()
    req = comm.Irsend(np.full(4, 7, "i"), nxt, 13)
    rreq.Wait(st)
    req.Wait()
    assert (got == 7).all() and st.tag == 13

    # every send mode is matched by one kind of receive (P-20)
    MPI.Attach_buffer(bytearray(200 + 4 * MPI.BSEND_OVERHEAD))
    gots = [np.zeros(2, "i") for _ in range(4)]
    rreqs = [comm.Irecv(gots[k], prv, 20) for k in range(4)]
    handshake()
    sreqs = [comm.Isend(np.array([0, rank], "i"), nxt, 20),
             comm.Issend(np.array([1, rank], "i"), nxt, 20),
             comm.Irsend(np.array([2, rank], "i"), nxt, 20),
             comm.Ibsend(np.array([3, rank], "i"), nxt, 20)]
    Request.Waitall(rreqs + sreqs)
    assert [list(g) for g in gots] == [[k, prv] for k in range(4)]
    MPI.Detach_buffer()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", [2])
def test_large_buffered_send_is_local(run_mpi, n: int) -> None:
    body = """
    big = np.arange(150_000, dtype="d") + rank  # 1.2 MB: beyond the eager size
    MPI.Attach_buffer(bytearray(2 * (big.nbytes + MPI.BSEND_OVERHEAD)))
    comm.Bsend(big, nxt, 1)  # returns before nxt posts its receive (P-15)
    comm.Ibsend(big, nxt, 2).Wait()  # completes locally
    big[:] = -1
    handshake()
    got = np.zeros(150_000)
    for tag in (1, 2):
        comm.Recv(got, prv, tag)
        assert (got == np.arange(150_000) + prv).all()
    MPI.Detach_buffer()
    """
    assert_ok(run_mpi(n, program(body), timeout=5), n)
