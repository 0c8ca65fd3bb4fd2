"""Ranks, tags and roots of every kind, on real ranks: taken as mpi4py takes them.

mpi4py converts these arguments to C ``int`` through ``__int__``: numpy integers and
integral floats (``size / 2``) work, other floats are truncated, and ``'1'``,
``None`` or an object without ``__int__`` is a ``TypeError``; a value beyond the C
``int`` range is an ``OverflowError``; an int out of range for its kind gets its
error class (``ERR_RANK``, ``ERR_TAG``, ``ERR_ROOT``). Every bad one is refused at
the call, in the calling thread, and the rank stays usable; a bad argument nobody
catches ends the job with that exception instead of hanging it.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]

PRELUDE = (
    MPI_PRELUDE
    + '''
import threading


def refused(cls, fn, *args, **kwargs):
    """``fn`` raises ``cls`` (an exception type, or an MPI error class) right away."""
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        assert isinstance(cls, int) and exc.Get_error_class() == cls, (fn, args, kwargs, exc)
        return
    except (TypeError, OverflowError) as exc:
        assert isinstance(cls, type) and isinstance(exc, cls), (fn, args, kwargs, exc)
        return
    raise AssertionError(f"{fn} {args} {kwargs} did not raise {cls}")
'''
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("n", NPROCS)
def test_odd_but_valid_ranks_and_tags_work(run_mpi, n: int) -> None:
    body = """
    # numpy integers, integral floats, bools and truncated floats, as in mpi4py
    for d, t in ((np.int32(nxt), np.int64(3)), (float(nxt), 3.0), (nxt + 0.75, 3.5)):
        req = comm.isend(("obj", rank), d, t)
        assert comm.recv(None, float(prv), np.int16(3)) == ("obj", prv)
        req.wait()
        req = comm.Isend(np.array([rank], "i"), d, t)
        got = np.zeros(1, "i")
        comm.Recv(got, np.int64(prv), 3.0)
        assert got[0] == prv
        req.Wait()
        assert comm.sendrecv(rank, d, t, None, float(prv), np.int8(3)) == prv
    st = MPI.Status()
    req = comm.Isend(np.array([7], "i"), nxt, 5)
    assert comm.Probe(float(prv), np.int64(5), st) and st.tag == 5
    assert comm.Iprobe(np.int32(prv), 5.0)
    m = comm.Mprobe(prv, 5.0)
    m.Recv(np.zeros(1, "i"))
    req.Wait()
    assert comm.iprobe(source=MPI.PROC_NULL * 1.0)  # PROC_NULL as a float is still PROC_NULL
    # roots of the collectives: size / 2 is a float
    root = size // 2
    assert comm.bcast(rank, root=size / 2 if size % 2 == 0 else float(root)) == root
    assert comm.reduce(1, root=np.int64(0)) == (size if rank == 0 else None)
    gathered = comm.gather(rank, root=np.float64(size - 1))
    assert gathered == (list(range(size)) if rank == size - 1 else None)
    buf = np.array([rank], "i")
    comm.Bcast(buf, root=float(root))
    assert buf[0] == root
    # colors and keys
    sub = comm.Split(np.int64(rank % 2), float(-rank))
    assert sub.size == len(range(rank % 2, size, 2)) and sub.rank == sub.size - 1 - rank // 2
    sub.Free()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize("n", NPROCS)
def test_bad_ranks_tags_and_roots_are_refused_at_the_call(run_mpi, n: int) -> None:
    body = """
    a = np.zeros(2, "i")
    before = comm.Isend(np.array([rank, 1], "i"), nxt, 1)
    for bad in ("1", None, object(), 1j, [1]):
        for send in (comm.Send, comm.Isend, comm.Ssend, comm.Send_init, comm.Bsend_init):
            refused(TypeError, send, a, bad, 0)
            refused(TypeError, send, a, nxt, bad)
        for send in (comm.send, comm.isend, comm.issend):
            refused(TypeError, send, "x", bad, 0)
            refused(TypeError, send, "x", nxt, bad)
        for recv in (comm.Recv, comm.Irecv, comm.Recv_init):
            refused(TypeError, recv, a, bad, 0)
            refused(TypeError, recv, a, prv, bad)
        for recv in (comm.recv, comm.irecv):
            refused(TypeError, recv, None, bad)
            refused(TypeError, recv, None, prv, bad)
        for probe in (comm.Probe, comm.Iprobe, comm.Mprobe, comm.Improbe,
                      comm.probe, comm.iprobe, comm.mprobe, comm.improbe):
            refused(TypeError, probe, bad)
            refused(TypeError, probe, prv, bad)
        refused(TypeError, comm.sendrecv, "x", bad, 0, None, prv, 0)
        refused(TypeError, comm.sendrecv, "x", nxt, 0, None, bad, 0)
        refused(TypeError, comm.Sendrecv, a, nxt, bad, a, prv, 0)
        refused(TypeError, comm.Sendrecv_replace, a, nxt, 0, prv, bad)
        for coll in (comm.bcast, comm.reduce, comm.gather, comm.scatter):
            refused(TypeError, coll, None, root=bad)
        refused(TypeError, comm.Bcast, a, root=bad)
        refused(TypeError, comm.Split, bad, 0)
    for big in (2**31, -(2**31) - 1, 10**20):
        refused(OverflowError, comm.send, "x", big)
        refused(OverflowError, comm.recv, None, prv, big)
        refused(OverflowError, comm.Iprobe, big)
        refused(OverflowError, comm.bcast, None, big)
    for bad in (size + 0.5, -3.0, np.int64(size), np.float32(-7)):
        refused(MPI.ERR_RANK, comm.send, "x", bad)
        refused(MPI.ERR_RANK, comm.Irecv, a, bad)
        refused(MPI.ERR_RANK, comm.iprobe, bad)
        refused(MPI.ERR_RANK, comm.Sendrecv, a, nxt, 0, a, bad)
        refused(MPI.ERR_ROOT, comm.bcast, None, bad)
        refused(MPI.ERR_ROOT, comm.reduce, None, root=bad)
        refused(MPI.ERR_ROOT, comm.Gather, a, a, bad)
    for bad in (-2.0, np.int32(-5)):
        refused(MPI.ERR_TAG, comm.isend, "x", nxt, bad)
        refused(MPI.ERR_TAG, comm.recv, None, prv, bad)
        refused(MPI.ERR_TAG, comm.Improbe, prv, bad)
    # refused in a thread too, where the error is raised
    errors = []

    def worker():
        try:
            comm.recv(None, "0")
        except TypeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(errors) == 1
    # nothing was sent or posted by the failed calls
    got = np.zeros(2, "i")
    comm.Recv(got, prv, 1)
    assert list(got) == [prv, 1]
    before.Wait()
    comm.Barrier()
    """
    assert_ok(run_mpi(n, program(body)), n)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("comm.recv(source='0')", "TypeError: an integer is required"),
        ("comm.send(1, dest=None)", "TypeError: an integer is required"),
        ("comm.iprobe(tag=2**40)", "OverflowError"),
        ("comm.bcast(1, root='0')", "TypeError: an integer is required"),
        ("comm.Recv(np.zeros(1), source=size + 0.0)", "Invalid rank"),
    ],
)
def test_an_uncaught_bad_argument_ends_the_job(run_mpi, call: str, error: str) -> None:
    body = f"""
    comm.Barrier()
    {call}
    """
    proc = run_mpi(2, mpi_program(MPI_PRELUDE, body, ok=False), timeout=20)
    assert proc.returncode != 0, proc
    assert error in proc.stderr, proc.stderr
    assert "deadlock" not in proc.stderr and "timed out" not in proc.stderr.lower(), proc.stderr
