"""Blocking point-to-point on real ranks: Send/Recv, Sendrecv(_replace), objects, PROC_NULL.

Each program is rank-agnostic (a ring: send to ``nxt``, receive from ``prv``) and
runs at 1, 2 and 4 ranks through the launcher; it makes many checks with plain
``assert`` and prints ``OK <rank>`` at the end. Rules: INVENTORY §2.3 P-1..P-13,
P-21, P-23, P-26, P-49..P-51.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + '''
import array


def ring(sendbuf, recvbuf, tag=0, status=None, send=None):
    """Shift to nxt / from prv with blocking calls, in an order that needs no buffering."""
    send = send or comm.Send
    if size == 1:
        req = comm.Isend(sendbuf, nxt, tag)
        comm.Recv(recvbuf, prv, tag, status)
        req.Wait()
    elif rank == 0:
        send(sendbuf, nxt, tag)
        comm.Recv(recvbuf, prv, tag, status)
    else:
        comm.Recv(recvbuf, prv, tag, status)
        send(sendbuf, nxt, tag)
'''
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_send_recv_buffers_statuses_and_counts(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()
    assert is_empty(st)  # a fresh status is empty

    # every basic type: values, status source/tag, Get_count, Get_elements
    kinds = [("i", MPI.INT), ("d", MPI.DOUBLE), ("f", MPI.FLOAT), ("l", MPI.LONG),
             ("b", MPI.SIGNED_CHAR), ("B", MPI.UNSIGNED_CHAR), ("h", MPI.SHORT),
             ("q", MPI.LONG_LONG), ("D", MPI.C_DOUBLE_COMPLEX), ("?", MPI.C_BOOL),
             ("H", MPI.UNSIGNED_SHORT), ("Q", MPI.UNSIGNED_LONG_LONG)]
    for tag, (code, dt) in enumerate(kinds):
        out = (np.arange(7) % 5 + rank).astype(code)
        inp = np.zeros(7, dtype=code)
        ring(out, inp, tag, st)
        assert (inp == (np.arange(7) % 5 + prv).astype(code)).all(), (code, inp)
        assert (st.source, st.tag, st.Get_source(), st.Get_tag()) == (prv, tag, prv, tag)
        assert st.Get_count(dt) == 7 and st.Get_elements(dt) == 7
        assert st.Get_count() == st.Get_count(MPI.BYTE) == 7 * out.itemsize
        assert st.error == MPI.SUCCESS and not st.Is_cancelled()

    # buffer forms: bytes, bytearray, array.array, memoryview, [buf, count, datatype]...
    payload = bytes(range(rank, rank + 12))
    expect = bytes(range(prv, prv + 12))
    got = bytearray(12)
    ring(payload, got, 100, st)
    assert got == expect and st.Get_count() == 12
    got = array.array("i", [0] * 3)
    ring(array.array("i", [rank, rank + 1, rank + 2]), got, 101)
    assert got.tolist() == [prv, prv + 1, prv + 2]
    got = np.zeros(4)
    ring(memoryview(np.full(4, rank + 0.5)), memoryview(got), 102)
    assert (got == prv + 0.5).all()
    a = np.arange(10, dtype="i") + 10 * rank
    for tag, (sspec, count) in enumerate([
        ([a, MPI.INT], 10), ([a, 3], 3), ([a, 3, MPI.INT], 3), ((a, 3, MPI.INT), 3),
        ([a, "i"], 10), ([a, (3, 2), MPI.INT], 3), ([a, 3, 2, MPI.INT], 3),
    ], start=110):
        r = np.full(10, -1, dtype="i")
        ring(sspec, [r, MPI.INT], tag, st)
        assert st.Get_count(MPI.INT) == count, (sspec, st.Get_count(MPI.INT))
        displ = 2 if tag >= 115 else 0
        assert (r[:count] == np.arange(displ, displ + count) + 10 * prv).all(), (tag, r)
        assert (r[count:] == -1).all(), "P-8: only the received locations change"
    # receive with a displacement: only r[4:7] is written
    r = np.full(10, -1, dtype="i")
    ring([a, 3, MPI.INT], [r, (3, 4), MPI.INT], 120, st)
    assert (r[4:7] == 10 * prv + np.arange(3)).all() and (r[:4] == -1).all()
    assert (r[7:] == -1).all()

    # BYTE: the bytes arrive bit for bit, whatever they encode (P-13)
    doubles = np.array([np.pi, -0.0, np.inf, 1e-300]) * (rank + 1)
    raw = bytearray(32)
    ring([doubles, MPI.DOUBLE], [raw, MPI.BYTE], 130, st)
    assert bytes(raw) == (np.array([np.pi, -0.0, np.inf, 1e-300]) * (prv + 1)).tobytes()
    assert st.Get_count(MPI.BYTE) == 32 and st.Get_count(MPI.DOUBLE) == 4

    # Get_count / Get_elements: UNDEFINED when not a whole number of entries
    ring(bytearray(6), bytearray(16), 121, st)
    assert st.Get_count(MPI.BYTE) == 6 and st.Get_count(MPI.SHORT) == 3
    assert st.Get_count(MPI.INT) == MPI.UNDEFINED
    assert st.Get_elements(MPI.INT) == MPI.UNDEFINED
    assert st.Get_count(MPI.DOUBLE) == MPI.UNDEFINED

    # wildcards: the status holds the actual source and tag (P-9)
    st = MPI.Status()
    ring(np.array([rank], "i"), np.zeros(1, "i"), 122)
    req = comm.Isend(np.array([rank], "i"), nxt, 123)
    r = np.zeros(1, "i")
    comm.Recv(r, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    req.Wait()
    assert (st.source, st.tag, int(r[0])) == (prv, 123, prv)
    req = comm.Isend(np.array([rank], "i"), nxt, 124)
    comm.Recv(r, tag=124, status=st)  # source defaults to ANY_SOURCE
    req.Wait()
    assert (st.source, st.tag) == (prv, 124)
    req = comm.Isend(np.array([rank], "i"), nxt, 125)
    comm.Recv(r, prv, status=st)  # tag defaults to ANY_TAG
    req.Wait()
    assert st.tag == 125

    # a large message (rendezvous) in both blocking directions
    big = np.arange(300_000, dtype="d") + rank
    got = np.empty_like(big)
    ring(big, got, 126, st)
    assert (got == np.arange(300_000) + prv).all() and st.Get_count(MPI.DOUBLE) == 300_000
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_order_tags_and_contexts(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()
    one = lambda v: np.array([v], "i")  # noqa: E731
    r = np.zeros(1, "i")

    # P-21 (Example 4.5): ANY_TAG then a specific tag take the messages in send order
    reqs = [comm.Isend(one(1), nxt, 5), comm.Isend(one(2), nxt, 5)]
    comm.Recv(r, prv, MPI.ANY_TAG, st)
    assert r[0] == 1
    comm.Recv(r, prv, 5, st)
    assert r[0] == 2
    MPI.Request.Waitall(reqs)

    # P-23 (Example 4.6): receiving by tag in reverse order is legal
    reqs = [comm.Isend(one(10), nxt, 1), comm.Isend(one(20), nxt, 2)]
    comm.Recv(r, prv, 2, st)
    assert (r[0], st.tag) == (20, 2)
    comm.Recv(r, prv, 1, st)
    assert (r[0], st.tag) == (10, 1)
    MPI.Request.Waitall(reqs)

    # many messages with one tag from one sender arrive in send order (P-21)
    reqs = [comm.Isend(one(k), nxt, 7) for k in range(50)]
    for k in range(50):
        comm.Recv(r, prv, 7)
        assert r[0] == k, (k, r[0])
    MPI.Request.Waitall(reqs)

    # P-1/P-2: no wildcard for the communicator; messages stay in their context
    req = comm.Isend(one(99), rank, 3)  # to myself on COMM_WORLD
    self_comm = MPI.COMM_SELF
    assert self_comm.Get_size() == 1 and self_comm.Get_rank() == 0
    assert not self_comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
    sreq = self_comm.Isend(one(77), 0, 3)
    assert comm.Iprobe(rank, 3, st) and st.source == rank
    self_comm.Recv(r, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    assert (r[0], st.source, st.tag) == (77, 0, 3)
    comm.Recv(r, rank, 3, st)
    assert (r[0], st.source) == (99, rank)
    req.Wait()
    sreq.Wait()
    assert not comm.Iprobe(rank, 3) and not self_comm.Iprobe()

    # Sendrecv ring (P-49): send and receive differ in count and tag; status is the receive
    send = np.full(rank + 3, rank, "d")
    recv = np.full(size + 5, -1.0)
    comm.Sendrecv(send, nxt, 10 + rank, recv, prv, 10 + prv, st)
    assert (st.source, st.tag, st.Get_count(MPI.DOUBLE)) == (prv, 10 + prv, prv + 3)
    assert (recv[: prv + 3] == prv).all() and (recv[prv + 3:] == -1).all()
    # default source/tag are wildcards
    comm.Sendrecv(np.array([rank], "i"), nxt, 4, r, status=st)
    assert (r[0], st.source, st.tag) == (prv, prv, 4)
    # different send and receive datatypes
    ibuf = np.zeros(3, "i")
    comm.Sendrecv([np.array([rank] * 3, "i"), MPI.INT], nxt, 0, [ibuf, 3, MPI.INT], prv, 0, st)
    assert (ibuf == prv).all() and st.Get_count(MPI.INT) == 3
    # Sendrecv interoperates with plain Isend/Recv
    req = comm.Isend(one(rank + 1000), nxt, 20)
    comm.Sendrecv(one(rank + 2000), nxt, 21, r, prv, 20, st)
    assert (r[0], st.tag) == (prv + 1000, 20)
    comm.Recv(r, prv, 21)
    assert r[0] == prv + 2000
    req.Wait()
    # large Sendrecv in a ring (no cyclic deadlock with rendezvous-sized messages)
    big = np.full(200_000, rank, "d")
    gbig = np.zeros(200_000)
    comm.Sendrecv(big, nxt, 30, gbig, prv, 30, st)
    assert (gbig == prv).all() and st.Get_count(MPI.DOUBLE) == 200_000
    # non-periodic shift: the ends talk to PROC_NULL (P-51 for Sendrecv)
    dest = nxt if rank < size - 1 else MPI.PROC_NULL
    source = prv if rank > 0 else MPI.PROC_NULL
    r[0] = -7
    comm.Sendrecv(one(rank), dest, 31, r, source, 31, st)
    if source == MPI.PROC_NULL:
        assert r[0] == -7 and is_proc_null(st)
    else:
        assert r[0] == prv and st.source == prv

    # Sendrecv_replace (P-50)
    buf = np.arange(5, dtype="i") + 100 * rank
    comm.Sendrecv_replace(buf, nxt, 40, prv, 40, st)
    assert (buf == np.arange(5) + 100 * prv).all() and (st.source, st.tag) == (prv, 40)
    assert st.Get_count(MPI.INT) == 5
    buf = np.arange(5, dtype="i") + 100 * rank
    comm.Sendrecv_replace([buf, 3, MPI.INT], nxt, 41, prv, 41, st)
    assert (buf[:3] == np.arange(3) + 100 * prv).all()
    assert (buf[3:] == [100 * rank + 3, 100 * rank + 4]).all()
    big = np.full(100_000, rank, "d")
    comm.Sendrecv_replace(big, nxt, 42, status=st)
    assert (big == prv).all() and st.source == prv
    buf = np.arange(4, dtype="i")
    comm.Sendrecv_replace(buf, MPI.PROC_NULL, 0, MPI.PROC_NULL, 0, st)
    assert (buf == np.arange(4)).all() and is_proc_null(st)
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_objects_and_proc_null(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()

    # lower-case: any picklable object, small and large (> 64 KiB pickles)
    small = {"rank": rank, "list": [1, 2.5, "x"], "none": None, "t": (rank,)}
    large = {"blob": bytes([rank]) * 300_000, "ints": list(range(40_000)), "rank": rank}
    arr = np.arange(50_000, dtype="d") * rank
    for tag, obj in enumerate([small, large, arr, None, "text" * rank, 3.5]):
        if size == 1:
            req = comm.isend(obj, nxt, tag)
            got = comm.recv(source=prv, tag=tag, status=st)
            req.wait()
        elif rank == 0:
            comm.send(obj, nxt, tag)
            got = comm.recv(None, prv, tag, st)
        else:
            got = comm.recv(None, prv, tag, st)
            comm.send(obj, dest=nxt, tag=tag)
        assert (st.source, st.tag) == (prv, tag) and st.Get_count() > 0
        if tag == 0:
            assert got == dict(small, rank=prv, t=(prv,))
        elif tag == 1:
            assert got["blob"] == bytes([prv]) * 300_000 and got["rank"] == prv
            assert got["ints"] == list(range(40_000))
        elif tag == 2:
            assert isinstance(got, np.ndarray) and (got == np.arange(50_000) * prv).all()
        elif tag == 3:
            assert got is None
        elif tag == 4:
            assert got == "text" * prv
        else:
            assert got == 3.5
    # wildcards with objects
    req = comm.isend(("hi", rank), nxt, 9)
    assert comm.recv(status=st) == ("hi", prv) and (st.source, st.tag) == (prv, 9)
    req.wait()
    # sendrecv of objects, incl. a large one, in a ring
    assert comm.sendrecv(("sr", rank), nxt, 11, None, prv, 11, st) == ("sr", prv)
    assert (st.source, st.tag) == (prv, 11)
    got = comm.sendrecv(large, nxt, 12, source=prv, recvtag=12)
    assert got["rank"] == prv and len(got["blob"]) == 300_000
    assert comm.sendrecv(rank, dest=nxt) == prv

    # P-51: PROC_NULL for every blocking variant
    buf = np.arange(6, dtype="i")
    for send in (comm.Send, comm.Ssend, comm.Rsend, comm.Bsend):  # Bsend: no buffer needed
        send(buf, MPI.PROC_NULL)
        send(buf, MPI.PROC_NULL, 5)
    for send in (comm.send, comm.ssend, comm.bsend):
        send({"x": 1}, MPI.PROC_NULL, 3)
    st.source = 1234
    comm.Recv(buf, MPI.PROC_NULL, 7, st)
    assert (buf == np.arange(6)).all() and is_proc_null(st)
    st.source = 1234
    comm.Recv(buf, MPI.PROC_NULL, MPI.ANY_TAG, st)
    assert is_proc_null(st)
    st.source = 1234
    assert comm.recv(None, MPI.PROC_NULL, 3, st) is None and is_proc_null(st)
    st.source = 1234
    assert comm.sendrecv("x", MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0, st) is None
    assert is_proc_null(st)
    comm.Sendrecv(buf, MPI.PROC_NULL, 0, buf, MPI.PROC_NULL, 0, st)
    assert (buf == np.arange(6)).all() and is_proc_null(st)
    # nothing was actually sent anywhere
    assert not comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)

    # Status accessors and copies
    s2 = MPI.Status(st)
    assert s2 == st and s2.Get_source() == MPI.PROC_NULL
    s2.Set_source(3)
    s2.Set_tag(4)
    s2.Set_error(MPI.ERR_OTHER)
    assert (s2.source, s2.tag, s2.Get_error()) == (3, 4, MPI.ERR_OTHER)
    assert st.source == MPI.PROC_NULL
    """
    assert_ok(run_mpi(n, program(body)), n)
