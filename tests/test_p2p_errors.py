"""Bad input to point-to-point calls on real ranks: the error class, then a usable rank.

Invalid rank -> ERR_RANK, bad tag -> ERR_TAG, COMM_NULL -> ERR_COMM, a message that
does not fit -> ERR_TRUNCATE with the status still naming source and tag. Buffer forms
that cannot be parsed raise what mpi4py raises for them, before any MPI call: a negative
count ValueError, what is not memory TypeError, read-only memory for a receive
BufferError, an unknown type code KeyError; a null datatype with a count ERR_TYPE.
After every error the rank keeps working and no message is lost or invented: a message
sent before the errors and one sent after them arrive back to back.
Rules: INVENTORY §2.3 P-3, P-4, P-6, P-7, P-8; E-8.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + '''
Request = MPI.Request
checks = 0


def raises(cls, fn, *args, **kwargs):
    global checks
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == cls, (fn, args, exc, cls)
        assert str(exc), "the exception says what went wrong"
        checks += 1
        return exc
    raise AssertionError(f"{fn} {args} did not raise MPI.Exception of class {cls}")


def fails(error, fn, *args, **kwargs):
    """``fn(*args)`` raises ``error`` (a Python exception, not MPI.Exception)."""
    global checks
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        raise AssertionError(f"{fn} {args} raised {exc!r}, not {error.__name__}") from exc
    except error as exc:
        assert str(exc), "the exception says what went wrong"
        checks += 1
        return exc
    raise AssertionError(f"{fn} {args} did not raise {error.__name__}")


def still_in_order(tag_before, tag_after):
    """prv's message from before its errors, then its next one: nothing in between."""
    st = MPI.Status()
    got = np.zeros(2, "i")
    req = comm.Isend(np.array([rank, tag_after], "i"), nxt, tag_after)
    comm.Recv(got, prv, MPI.ANY_TAG, st)
    assert (st.tag, list(got)) == (tag_before, [prv, tag_before]), (st.tag, got)
    comm.Recv(got, prv, MPI.ANY_TAG, st)
    assert (st.tag, list(got)) == (tag_after, [prv, tag_after]), (st.tag, got)
    req.Wait()
'''
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_argument_errors_leave_the_rank_usable(run_mpi, n: int) -> None:
    body = """
    TAG_UB = comm.Get_attr(MPI.TAG_UB)
    assert TAG_UB >= 32767
    a = np.zeros(4, "i")
    # a message in flight before the errors, and a receive posted before them
    before = comm.Isend(np.array([rank, 1], "i"), nxt, 1)
    pending = comm.Irecv(np.zeros(1, "i"), prv, 2)
    MPI.Attach_buffer(bytearray(1000))

    # invalid ranks -> ERR_RANK (P-4); ANY_SOURCE is not a valid destination
    for bad in (size, size + 3, -5, MPI.ANY_SOURCE, 10**9):
        for send in (comm.Send, comm.Ssend, comm.Rsend, comm.Bsend, comm.Isend, comm.Issend,
                     comm.Irsend, comm.Ibsend, comm.Send_init, comm.Ssend_init,
                     comm.Rsend_init, comm.Bsend_init):
            raises(MPI.ERR_RANK, send, a, bad, 0)
        for send in (comm.send, comm.ssend, comm.bsend, comm.isend, comm.issend, comm.ibsend):
            raises(MPI.ERR_RANK, send, "obj", bad, 0)
        raises(MPI.ERR_RANK, comm.Sendrecv, a, bad, 0, a, prv, 0)
        raises(MPI.ERR_RANK, comm.Sendrecv_replace, a, bad, 0, prv, 0)
        raises(MPI.ERR_RANK, comm.sendrecv, "obj", bad, 0, None, prv, 0)
    for bad in (size, size + 3, -5, 10**9):
        for recv in (comm.Recv, comm.Irecv, comm.Recv_init):
            raises(MPI.ERR_RANK, recv, a, bad, 0)
        for call in (comm.recv, comm.irecv):
            raises(MPI.ERR_RANK, call, None, bad, 0)
        for probe in (comm.Probe, comm.Iprobe, comm.Mprobe, comm.Improbe,
                      comm.probe, comm.iprobe, comm.mprobe, comm.improbe):
            raises(MPI.ERR_RANK, probe, bad, 0)
        raises(MPI.ERR_RANK, comm.Sendrecv, a, nxt, 0, a, bad, 0)
        raises(MPI.ERR_RANK, comm.Sendrecv_replace, a, nxt, 0, bad, 0)
        raises(MPI.ERR_RANK, comm.sendrecv, "obj", nxt, 0, None, bad, 0)
    exc = raises(MPI.ERR_RANK, comm.Send, a, size + 3, 0)
    assert str(size + 3) in str(exc), str(exc)  # names the bad rank

    # bad tags -> ERR_TAG (P-3): ANY_TAG and negatives are not send tags; > TAG_UB never
    for bad in (MPI.ANY_TAG, -5, -100, TAG_UB + 1):
        for send in (comm.Send, comm.Ssend, comm.Rsend, comm.Bsend, comm.Isend, comm.Issend,
                     comm.Irsend, comm.Ibsend, comm.Send_init, comm.Ssend_init,
                     comm.Rsend_init, comm.Bsend_init):
            raises(MPI.ERR_TAG, send, a, nxt, bad)
        for send in (comm.send, comm.ssend, comm.bsend, comm.isend, comm.issend, comm.ibsend):
            raises(MPI.ERR_TAG, send, "obj", nxt, bad)
        raises(MPI.ERR_TAG, comm.Sendrecv, a, nxt, bad, a, prv, 0)
        raises(MPI.ERR_TAG, comm.Sendrecv_replace, a, nxt, bad, prv, 0)
        raises(MPI.ERR_TAG, comm.sendrecv, "obj", nxt, bad, None, prv, 0)
    for bad in (-5, -100, TAG_UB + 1):  # ANY_TAG is fine for receives
        for recv in (comm.Recv, comm.Irecv, comm.Recv_init):
            raises(MPI.ERR_TAG, recv, a, prv, bad)
        for call in (comm.recv, comm.irecv):
            raises(MPI.ERR_TAG, call, None, prv, bad)
        for probe in (comm.Probe, comm.Iprobe, comm.Mprobe, comm.Improbe,
                      comm.probe, comm.iprobe, comm.mprobe, comm.improbe):
            raises(MPI.ERR_TAG, probe, prv, bad)
        raises(MPI.ERR_TAG, comm.Sendrecv, a, nxt, 0, a, prv, bad)
        raises(MPI.ERR_TAG, comm.Sendrecv_replace, a, nxt, 0, prv, bad)
    # the largest tag is valid
    req = comm.Isend(a, rank, TAG_UB)
    comm.Recv(a, rank, TAG_UB)
    req.Wait()

    # negative count (P-6): ValueError, as mpi4py raises it before calling MPI
    for spec in ([a, -1, MPI.INT], [a, -1], [a, (-2, 0), MPI.INT]):
        for send in (comm.Send, comm.Isend, comm.Ssend, comm.Rsend, comm.Bsend, comm.Send_init):
            fails(ValueError, send, spec, nxt, 0)
        for recv in (comm.Recv, comm.Irecv, comm.Recv_init):
            fails(ValueError, recv, spec, prv, 0)
        fails(ValueError, comm.Sendrecv, spec, nxt, 0, a, prv, 0)
        fails(ValueError, comm.Sendrecv, a, nxt, 0, spec, prv, 0)

    # unusable buffers and datatypes, as mpi4py raises them
    for bad, error in (("text", TypeError), (42, TypeError), ([1, 2, 3], TypeError),
                       ({"a": 1}, TypeError), (object(), TypeError),
                       ([a, 5, MPI.INT], ValueError),  # more elements than the buffer has
                       ([bytearray(7), MPI.INT], ValueError)):  # not a whole number of ints
        for call in (comm.Send, comm.Isend, comm.Recv, comm.Irecv):
            fails(error, call, bad, nxt, 0)
    for readonly in (b"abcd", np.zeros(4, "i").view(), memoryview(b"xyzw")):
        if isinstance(readonly, np.ndarray):
            readonly.flags.writeable = False
        fails(BufferError, comm.Recv, readonly, prv, 0)
        fails(BufferError, comm.Irecv, readonly, prv, 0)
        fails(BufferError, comm.Sendrecv_replace, readonly, nxt, 0, prv, 0)
    for spec, error in (([a, MPI.DATATYPE_NULL], ValueError), ([a, 2, "zz"], KeyError)):
        for call in (comm.Send, comm.Recv, comm.Isend, comm.Irecv):
            fails(error, call, spec, nxt, 0)
    for call in (comm.Send, comm.Recv, comm.Isend, comm.Irecv):
        raises(MPI.ERR_TYPE, call, [a, 2, MPI.DATATYPE_NULL], nxt, 0)

    # COMM_NULL -> ERR_COMM
    null = MPI.COMM_NULL
    assert not null and null != comm
    for call, args in ((null.Send, (a, 0)), (null.Recv, (a, 0)), (null.Isend, (a, 0)),
                       (null.Irecv, (a, 0)), (null.Ssend, (a, 0)), (null.Bsend, (a, 0)),
                       (null.Rsend, (a, 0)), (null.Send_init, (a, 0)),
                       (null.Recv_init, (a, 0)), (null.Sendrecv, (a, 0, 0, a, 0)),
                       (null.Sendrecv_replace, (a, 0)), (null.Probe, (0,)),
                       (null.Iprobe, (0,)), (null.Mprobe, (0,)), (null.Improbe, (0,)),
                       (null.send, ("x", 0)), (null.recv, ()), (null.isend, ("x", 0)),
                       (null.irecv, ()), (null.Get_rank, ()), (null.Get_size, ())):
        raises(MPI.ERR_COMM, call, *args)
    raises(MPI.ERR_COMM, lambda: null.rank)
    raises(MPI.ERR_COMM, MPI.Comm().Send, a, 0)

    # nothing was sent by the failed calls; the pending operations are intact
    assert not pending.Test()
    handshake()
    comm.Isend(np.array([5], "i"), nxt, 2).Wait()
    pending.Wait()
    before.Wait()
    still_in_order(1, 3)
    MPI.Detach_buffer()
    assert checks > 400, checks
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_truncation_keeps_status_and_later_messages(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()

    def send(data, tag):
        return comm.Isend(data, nxt, tag)

    def dirty():
        s = MPI.Status()
        s.source, s.tag = 1234, 5678
        return s

    # Recv: ERR_TRUNCATE, status source/tag set, nothing outside the buffer written (P-7)
    for source, tag in ((prv, 10), (MPI.ANY_SOURCE, MPI.ANY_TAG)):
        req = send(np.arange(5, dtype="i") + 10 * rank, 10)
        buf = np.full(6, -1, "i")
        st = dirty()
        exc = raises(MPI.ERR_TRUNCATE, comm.Recv, [buf, 3, MPI.INT], source, tag, st)
        assert (st.source, st.tag) == (prv, 10), (st.source, st.tag)
        assert (buf[:3] == np.arange(3) + 10 * prv).all() and (buf[3:] == -1).all()
        assert "trunc" in str(exc).lower() or "fit" in str(exc).lower()
        req.Wait()
        still_in_order_check = comm.Isend(np.array([rank, 11], "i"), nxt, 11)
        got = np.zeros(2, "i")
        comm.Recv(got, prv, MPI.ANY_TAG, st)  # the truncated message is consumed
        assert st.tag == 11 and list(got) == [prv, 11]
        still_in_order_check.Wait()

    # Irecv + Wait / Test: the error comes when the request completes
    buf = np.zeros(2)
    rreq = comm.Irecv(buf, prv, 12)
    req = send(np.ones(3), 12)
    st = dirty()
    raises(MPI.ERR_TRUNCATE, rreq.Wait, st)
    assert (st.source, st.tag) == (prv, 12) and rreq == MPI.REQUEST_NULL and (buf == 1).all()
    req.Wait()
    rreq = comm.Irecv(buf, prv, 13)
    req = send(np.ones(3), 13)
    while True:
        try:
            if rreq.Test():
                raise AssertionError("Test completed a truncated receive without an error")
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_TRUNCATE
            break
    req.Wait()

    # Sendrecv and Sendrecv_replace truncate the receive part
    st = dirty()
    raises(MPI.ERR_TRUNCATE, comm.Sendrecv, np.ones(4), nxt, 14, np.zeros(3), prv, 14, st)
    assert (st.source, st.tag) == (prv, 14)
    small = np.zeros(2, "i")
    sreq = send(np.arange(5, dtype="i"), 15)
    st = dirty()
    raises(MPI.ERR_TRUNCATE, comm.Sendrecv_replace, small, nxt, 16, prv, 15, st)
    assert (st.source, st.tag) == (prv, 15) and list(small) == [0, 1]
    comm.Recv(np.zeros(2, "i"), prv, 16)
    sreq.Wait()

    # a persistent receive that truncates stays usable for the next Start
    pbuf = np.zeros(2, "i")
    preq = comm.Recv_init(pbuf, prv, 17)
    preq.Start()
    req = send(np.arange(4, dtype="i"), 17)
    raises(MPI.ERR_TRUNCATE, preq.Wait)
    req.Wait()
    assert preq  # inactive, not freed
    preq.Start()
    req = send(np.array([7, 8], "i"), 17)
    preq.Wait(st)
    assert list(pbuf) == [7, 8] and st.tag == 17
    req.Wait()
    preq.Free()

    # large (> 64 KiB) messages truncate the same way
    big = np.arange(200_000, dtype="d")
    req = send(big, 18)
    dst = np.full(150_000, -1.0)
    st = dirty()
    raises(MPI.ERR_TRUNCATE, comm.Recv, [dst, 100_000, MPI.DOUBLE], prv, 18, st)
    assert (st.source, st.tag) == (prv, 18)
    assert (dst[:100_000] == big[:100_000]).all() and (dst[100_000:] == -1).all()
    req.Wait()

    # zero-size receive buffer, non-empty message
    req = send(np.ones(1, "i"), 19)
    raises(MPI.ERR_TRUNCATE, comm.Recv, [None, MPI.BYTE], prv, 19, st)
    assert st.tag == 19
    req.Wait()

    # after all this, the ranks still exchange messages in order
    handshake()
    req = comm.Isend(np.array([rank, 20], "i"), nxt, 20)
    still_in_order(20, 21)
    req.Wait()
    """
    assert_ok(run_mpi(n, program(body)), n)
