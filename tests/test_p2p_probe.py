"""Probes and matched probes on real ranks: Probe/Iprobe, Mprobe/Improbe, Message.

Rank-agnostic programs at 1, 2 and 4 ranks. Rules: INVENTORY §2.3 P-11, P-40..P-43,
P-51.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = MPI_PRELUDE


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_probe_and_iprobe(run_mpi, n: int) -> None:
    body = """
    st = MPI.Status()
    # nothing pending: Iprobe is false (and leaves no trace)
    assert comm.Iprobe(prv, 1) is False and comm.iprobe(prv, 1) is False
    handshake()

    # Probe: blocks until the message exists; status as Recv would give (P-40)
    reqs = [comm.Isend(np.arange(6, dtype="i") + rank, nxt, 1)]
    st = dirty()
    assert comm.Probe(prv, 1, st) in (None, True)
    assert (st.source, st.tag, st.Get_count(MPI.INT), st.Get_count()) == (prv, 1, 6, 24)
    assert st.Get_count(MPI.DOUBLE) == 3 and st.Get_count(MPI.INT64_T) == 3
    # probed several times before it is received
    for _ in range(3):
        s2 = MPI.Status()
        assert comm.Iprobe(prv, 1, s2) and (s2.source, s2.tag, s2.Get_count()) == (prv, 1, 24)
        assert comm.Iprobe(prv, MPI.ANY_TAG, s2) and s2.tag == 1
    # Recv with the returned source and tag gets that exact message
    got = np.zeros(6, "i")
    r = MPI.Status()
    comm.Recv(got, st.source, st.tag, r)
    assert (got == np.arange(6) + prv).all()
    assert (r.source, r.tag, r.Get_count()) == (st.source, st.tag, st.Get_count())
    assert not comm.Iprobe(prv, 1)

    # the probe sees the earliest pending message of that source and tag (P-41)
    handshake()
    reqs += [comm.Isend(np.full(k + 1, k, "d"), nxt, 2) for k in range(4)]
    reqs += [comm.Isend(np.full(2, 9, "d"), nxt, 3)]
    for k in range(4):
        comm.Probe(prv, 2, st)
        assert st.Get_count(MPI.DOUBLE) == k + 1, (k, st.Get_count(MPI.DOUBLE))
        buf = np.zeros(st.Get_count(MPI.DOUBLE))
        comm.Recv(buf, prv, 2)
        assert (buf == k).all()
    comm.Probe(prv, MPI.ANY_TAG, st)
    assert st.tag == 3
    comm.Recv(np.zeros(2), prv, 3)

    # Iprobe with a Test-like loop eventually sees a message that was sent (P-24)
    handshake()
    reqs.append(comm.Isend(np.zeros(1), nxt, 4))
    deadline = time.monotonic() + 10
    while not comm.Iprobe(source=prv, tag=4, status=st):
        assert time.monotonic() < deadline
    comm.Recv(np.zeros(1), prv, 4)

    # a large (rendezvous) message: probe gives its size; receive sized from the probe
    reqs.append(comm.Isend(np.full(150_000, rank, "d"), nxt, 5))
    comm.Probe(prv, 5, st)
    assert st.Get_count(MPI.DOUBLE) == 150_000 and st.Get_count() == 1_200_000
    buf = np.empty(st.Get_count(MPI.DOUBLE))
    comm.Recv(buf, prv, 5)
    assert (buf == prv).all()
    # Get_count UNDEFINED through a probe status (P-11)
    reqs.append(comm.Isend(bytearray(7), nxt, 6))
    comm.Probe(prv, 6, st)
    assert st.Get_count(MPI.INT) == MPI.UNDEFINED and st.Get_count(MPI.BYTE) == 7
    comm.Recv(bytearray(7), prv, 6)

    # lower case: probe/iprobe with objects, then recv sized by nobody
    reqs.append(comm.isend({"r": rank, "blob": b"x" * 100_000}, nxt, 7))
    assert comm.probe(prv, 7, st) in (None, True) and st.tag == 7 and st.Get_count() > 100_000
    assert comm.iprobe(prv, 7)
    assert comm.recv(source=prv, tag=7)["r"] == prv
    MPI.Request.Waitall(reqs)

    # PROC_NULL: probes succeed at once with the PROC_NULL status (P-51)
    st = dirty()
    assert comm.Iprobe(MPI.PROC_NULL, 3, st) is True and is_proc_null(st)
    st = dirty()
    comm.Probe(MPI.PROC_NULL, MPI.ANY_TAG, st)
    assert is_proc_null(st)
    st = dirty()
    assert comm.iprobe(MPI.PROC_NULL, status=st) and is_proc_null(st)
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize(
    ("n", "env"),
    [(1, None), (2, None), (4, None), (2, {"IPYMPI_NO_VM_READV": "1"})],
    ids=["1", "2", "4", "2-no_vm_readv"],
)
def test_matched_probe_and_messages(run_mpi, n: int, env: dict[str, str] | None) -> None:
    body = """
    st = MPI.Status()
    assert comm.Improbe(prv, 1) is None and comm.improbe(prv, 1) is None
    handshake()

    # Mprobe takes the message off ordinary matching (P-42)
    reqs = [comm.Isend(np.array([1, 1], "i"), nxt, 1), comm.Isend(np.array([2, 2], "i"), nxt, 1)]
    msg = comm.Mprobe(prv, 1, st)
    assert isinstance(msg, MPI.Message) and msg and msg != MPI.MESSAGE_NULL
    assert (st.source, st.tag, st.Get_count(MPI.INT)) == (prv, 1, 2)
    # the second message is now the one other probes and receives see
    deadline = time.monotonic() + 10
    while not comm.Iprobe(prv, 1):
        assert time.monotonic() < deadline
    got = np.zeros(2, "i")
    comm.Recv(got, prv, 1)
    assert (got == 2).all(), "Recv must not match a message taken by Mprobe"
    assert not comm.Iprobe(prv, 1)
    r = MPI.Status()
    msg.Recv(got, r)
    assert (got == 1).all() and (r.source, r.tag, r.Get_count(MPI.INT)) == (prv, 1, 2)
    assert msg == MPI.MESSAGE_NULL and not msg  # Mrecv nulls the handle
    raises(MPI.ERR_REQUEST, msg.Recv, got)  # erroneous; reported, not hung

    # Improbe + Message.Irecv, with a large message
    reqs.append(comm.Isend(np.arange(200_000, dtype="d") + rank, nxt, 2))
    msg = None
    while msg is None:
        msg = comm.Improbe(prv, 2, st)
        assert time.monotonic() < deadline
    assert st.Get_count(MPI.DOUBLE) == 200_000
    big = np.zeros(200_000)
    req = msg.Irecv(big)
    assert msg == MPI.MESSAGE_NULL
    req.Wait(r)
    assert (big == np.arange(200_000) + prv).all() and r.source == prv and r.tag == 2

    # Message.Recv into a buffer too small -> ERR_TRUNCATE, status source/tag set
    reqs.append(comm.Isend(np.arange(5, dtype="i"), nxt, 3))
    msg = comm.Mprobe(prv, 3)
    small = np.full(3, -1, "i")
    r = dirty()
    raises(MPI.ERR_TRUNCATE, msg.Recv, small, r)
    assert (r.source, r.tag) == (prv, 3) and (small == [0, 1, 2]).all()

    # lower case: mprobe/improbe/Message.recv/irecv, wildcards (P-42)
    reqs.append(comm.isend({"k": 4, "r": rank}, nxt, 4))
    reqs.append(comm.isend(["big", bytes(150_000)], nxt, 5))
    msg = comm.mprobe(MPI.ANY_SOURCE, 4, st)
    assert st.source == prv and st.tag == 4
    assert msg.recv() == {"k": 4, "r": prv} and not msg
    msg = comm.mprobe(prv, MPI.ANY_TAG, st)
    assert st.tag == 5
    req = msg.irecv()
    assert req.wait() == ["big", bytes(150_000)]
    reqs.append(comm.isend(6, nxt, 6))
    msg = None
    while msg is None:
        msg = comm.improbe(prv, 6)
    r = MPI.Status()
    assert msg.recv(r) == 6 and r.tag == 6 and r.source == prv
    # Message.probe / Message.iprobe class methods
    reqs.append(comm.isend("seven", nxt, 7))
    msg = MPI.Message.probe(comm, prv, 7)
    assert msg.recv() == "seven"
    reqs.append(comm.isend("eight", nxt, 8))
    msg = None
    while msg is None:
        msg = MPI.Message.iprobe(comm, prv, 8)
    assert msg.irecv().wait() == "eight"
    MPI.Request.Waitall(reqs)

    # Ssend matched by Mprobe completes only once the Mrecv has started (P-42)
    req = comm.Issend(np.array([rank], "i"), nxt, 9)
    msg = comm.Mprobe(prv, 9)  # matches prv's Issend, which stays pending
    handshake()  # tell prv its message is matched; nxt has matched mine
    t_end = time.monotonic() + 0.1
    while time.monotonic() < t_end:
        assert not req.Test(), "the Ssend completed before its Mrecv started"
    release()  # nxt may receive my message now; prv has checked its own
    one = np.zeros(1, "i")
    msg.Recv(one)
    assert one[0] == prv
    req.Wait()

    # PROC_NULL: MESSAGE_NO_PROC, receiving it completes at once (P-43)
    st = dirty()
    msg = comm.Mprobe(MPI.PROC_NULL, 1, st)
    assert msg == MPI.MESSAGE_NO_PROC and msg and is_proc_null(st)
    buf = np.arange(3, dtype="i")
    r = dirty()
    msg.Recv(buf, r)
    assert (buf == np.arange(3)).all() and is_proc_null(r)
    st = dirty()
    msg = comm.Improbe(MPI.PROC_NULL, MPI.ANY_TAG, st)
    assert msg == MPI.MESSAGE_NO_PROC and is_proc_null(st)
    r = dirty()
    msg.Irecv(buf).Wait(r)
    assert is_proc_null(r)
    msg = comm.mprobe(MPI.PROC_NULL)
    r = dirty()
    assert msg.recv(r) is None and is_proc_null(r)
    msg = comm.improbe(MPI.PROC_NULL)
    assert msg == MPI.MESSAGE_NO_PROC and msg.irecv().wait() is None
    # receiving the predefined constant itself leaves the constant alone
    r = dirty()
    MPI.MESSAGE_NO_PROC.Recv(buf, r)
    assert is_proc_null(r) and MPI.MESSAGE_NO_PROC.recv() is None
    assert MPI.MESSAGE_NO_PROC.Irecv(buf).Wait() and MPI.MESSAGE_NO_PROC.irecv().wait() is None
    assert MPI.MESSAGE_NO_PROC != MPI.MESSAGE_NULL and not MPI.MESSAGE_NULL
    assert MPI.MESSAGE_NO_PROC and comm.Mprobe(MPI.PROC_NULL) == MPI.MESSAGE_NO_PROC
    assert MPI.Message() == MPI.MESSAGE_NULL
    """
    assert_ok(run_mpi(n, program(body), env=env), n)
