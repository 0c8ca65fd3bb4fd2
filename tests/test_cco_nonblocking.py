"""Nonblocking and persistent collectives on real ranks.

Every I-variant gives the blocking result; many are outstanding at once and are
completed in any order through Waitall, Waitany, Testall, Testsome or single Waits
in reverse issue order, mixed with point-to-point requests; a blocking collective
runs while nonblocking ones are outstanding; Ibarrier does not complete before every
rank has called it, and advances while its rank is blocked in a point-to-point Recv
(seed Example 5.31); nonblocking collectives progress while a rank computes without
calling MPI; every ``*_init`` persistent collective is started again and again
(Start/Startall) with changed buffer contents. Rules: INVENTORY §4.3 C-32..C-41.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import assert_ok

NPROCS = [1, 2, 3, 4, 5]

PRELUDE = '''
import time
import numpy as np
from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
Request = MPI.Request


def block(r, k, salt=0, dtype="f8"):
    """Rank r's distinctive block of k elements."""
    return ((np.arange(k) * 7 + r * 31 + salt * 11) % 101 + 1).astype(dtype)


def concat(blocks, dtype="f8"):
    return np.concatenate([np.asarray(b, dtype) for b in blocks] + [np.empty(0, dtype)])


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def deadline_loop(seconds=20):
    end = time.monotonic() + seconds
    while True:
        assert time.monotonic() < end, "timed out"
        yield


class Case:
    """Buffers and expected results of one collective with this salt.

    ``start(kind)`` issues it as ``"I"`` (nonblocking), ``"B"`` (blocking) or
    ``"P"`` (persistent, returns the inactive request); ``refill(salt)`` rewrites the
    send buffers in place and clears the receive buffer; ``check()`` compares.
    """

    def __init__(self, name, fill, call, result):
        self.name, self.fill, self.call, self.result = name, fill, call, result
        self.salt = None

    def refill(self, salt):
        self.salt = salt
        self.fill(salt)

    def check(self):
        got, want = self.result(self.salt)
        assert same(got, want), (self.name, self.salt, got, want)


def cases(root):
    """One Case per collective; the root is fixed (persistent requests keep it)."""
    k = 3
    out = []
    at_root = rank == root
    sbuf, rbuf = np.zeros(k), np.zeros(k)   # Gather's send, Scatter's receive buffer
    gat = np.zeros(size * k)
    sca = np.zeros(size * k)
    counts = [(2 * r + 1) % 4 for r in range(size)]
    displs = [sum(counts[r + 1:]) + size - 1 - r for r in range(size)]  # reversed, gaps
    vtotal = sum(counts) + size
    vbuf = np.zeros(vtotal)
    vsend = np.zeros(counts[rank])
    vrecv = np.zeros(counts[rank])
    a2a_s, a2a_r = np.zeros(size * k), np.zeros(size * k)
    red_s, red_r = np.zeros(k, "i8"), np.zeros(k, "i8")
    rsb_s, rsb_r = np.zeros(size * 2, "i8"), np.zeros(2, "i8")
    rs_s, rs_r = np.zeros(sum(counts), "i8"), np.zeros(counts[rank], "i8")
    bc = np.zeros(k)

    def placed(salt, who):
        out = np.full(vtotal, -1.0)
        for r in range(size):
            out[displs[r]:displs[r] + counts[r]] = block(r, counts[r], salt + who)
        return out

    def ints(r, n, salt):
        return (np.arange(n, dtype="i8") * (r + 2) + salt) % 1000

    def fill_bcast(salt):
        bc[:] = block(root, k, salt) if at_root else 0

    out.append(Case("Bcast", fill_bcast, lambda f: f(bc, root),
                    lambda s: (bc, block(root, k, s))))

    def fill_gather(salt):
        sbuf[:] = block(rank, k, salt)
        gat[:] = -1

    out.append(Case("Gather", fill_gather, lambda f: f(sbuf, gat if at_root else None, root),
                    lambda s: (gat, concat([block(r, k, s) for r in range(size)])
                               if at_root else np.full(size * k, -1.0))))

    def fill_gatherv(salt):
        vsend[:] = block(rank, counts[rank], salt + 1)
        vbuf[:] = -1

    out.append(Case("Gatherv", fill_gatherv,
                    lambda f: f(vsend, [vbuf, counts, displs, MPI.DOUBLE] if at_root else None,
                                root),
                    lambda s: (vbuf, placed(s, 1) if at_root else np.full(vtotal, -1.0))))

    def fill_scatter(salt):
        sca[:] = concat([block(r, k, salt + 2) for r in range(size)]) if at_root else -5
        rbuf[:] = -1

    out.append(Case("Scatter", fill_scatter, lambda f: f(sca if at_root else None, rbuf, root),
                    lambda s: (rbuf, block(rank, k, s + 2))))

    vsrc = np.zeros(vtotal)

    def fill_scatterv(salt):
        vsrc[:] = placed(salt, 3) if at_root else -5
        vrecv[:] = -1

    out.append(Case("Scatterv", fill_scatterv,
                    lambda f: f([vsrc, counts, displs, MPI.DOUBLE] if at_root else None, vrecv,
                                root),
                    lambda s: (vrecv, block(rank, counts[rank], s + 3))))

    agat, asend = np.zeros(size * k), np.zeros(k)

    def fill_allgather(salt):
        asend[:] = block(rank, k, salt)
        agat[:] = -1

    out.append(Case("Allgather", fill_allgather, lambda f: f(asend, agat),
                    lambda s: (agat, concat([block(r, k, s) for r in range(size)]))))
    avbuf = np.zeros(vtotal)
    avsend = np.zeros(counts[rank])

    def fill_allgatherv(salt):
        avsend[:] = block(rank, counts[rank], salt + 4)
        avbuf[:] = -1

    out.append(Case("Allgatherv", fill_allgatherv,
                    lambda f: f(avsend, [avbuf, counts, displs, MPI.DOUBLE]),
                    lambda s: (avbuf, placed(s, 4))))

    def fill_alltoall(salt):
        a2a_s[:] = concat([block(rank, k, salt + 20 * j) for j in range(size)])
        a2a_r[:] = -1

    out.append(Case("Alltoall", fill_alltoall, lambda f: f(a2a_s, a2a_r),
                    lambda s: (a2a_r, concat([block(i, k, s + 20 * rank) for i in range(size)]))))
    cnt = [[(i + 2 * j) % 3 for j in range(size)] for i in range(size)]   # i -> j
    sc = cnt[rank]
    rc = [cnt[i][rank] for i in range(size)]
    sd = [sum(sc[:j]) for j in range(size)]
    rd = [sum(rc[:i]) for i in range(size)]
    v_s, v_r = np.zeros(sum(sc)), np.zeros(sum(rc))

    def fill_alltoallv(salt):
        v_s[:] = concat([block(rank, sc[j], salt + 30 * j) for j in range(size)])
        v_r[:] = -1

    out.append(Case("Alltoallv", fill_alltoallv,
                    lambda f: f([v_s, sc, sd, MPI.DOUBLE], [v_r, rc, rd, MPI.DOUBLE]),
                    lambda s: (v_r, concat([block(i, rc[i], s + 30 * rank)
                                            for i in range(size)]))))
    w_s, w_r = np.zeros(sum(sc), "i4"), np.zeros(sum(rc), "i4")

    def fill_alltoallw(salt):
        w_s[:] = concat([block(rank, sc[j], salt + 40 * j, "i4") for j in range(size)], "i4")
        w_r[:] = -1

    out.append(Case("Alltoallw", fill_alltoallw,
                    lambda f: f([w_s, sc, [4 * d for d in sd], [MPI.INT] * size],
                                [w_r, rc, [4 * d for d in rd], [MPI.INT] * size]),
                    lambda s: (w_r, concat([block(i, rc[i], s + 40 * rank, "i4")
                                            for i in range(size)], "i4"))))

    def fill_red(salt):
        red_s[:] = ints(rank, k, salt)
        red_r[:] = -1

    total = lambda s: sum(ints(r, k, s) for r in range(size))  # noqa: E731
    out.append(Case("Reduce", fill_red, lambda f: f(red_s, red_r, MPI.SUM, root),
                    lambda s: (red_r, total(s) if at_root else np.full(k, -1, "i8"))))
    ar_s, ar_r = np.zeros(k, "i8"), np.zeros(k, "i8")

    def fill_allred(salt):
        ar_s[:] = ints(rank, k, salt)
        ar_r[:] = -1

    out.append(Case("Allreduce", fill_allred, lambda f: f(ar_s, ar_r, MPI.SUM),
                    lambda s: (ar_r, total(s))))

    def fill_rsb(salt):
        rsb_s[:] = ints(rank, size * 2, salt + 5)
        rsb_r[:] = -1

    out.append(Case("Reduce_scatter_block", fill_rsb, lambda f: f(rsb_s, rsb_r, MPI.SUM),
                    lambda s: (rsb_r, sum(ints(r, size * 2, s + 5)
                                          for r in range(size))[2 * rank:2 * rank + 2])))
    offs = [sum(counts[:r]) for r in range(size + 1)]

    def fill_rs(salt):
        rs_s[:] = ints(rank, sum(counts), salt + 6)
        rs_r[:] = -1

    out.append(Case("Reduce_scatter", fill_rs, lambda f: f(rs_s, rs_r, counts, MPI.SUM),
                    lambda s: (rs_r, sum(ints(r, sum(counts), s + 6) for r in range(size))
                               [offs[rank]:offs[rank + 1]])))
    sc_s, sc_r = np.zeros(k, "i8"), np.zeros(k, "i8")
    ex_s, ex_r = np.zeros(k, "i8"), np.zeros(k, "i8")

    def fill_scan(salt):
        sc_s[:] = ints(rank, k, salt)
        sc_r[:] = -1

    def fill_exscan(salt):
        ex_s[:] = ints(rank, k, salt)
        ex_r[:] = -1

    out.append(Case("Scan", fill_scan, lambda f: f(sc_s, sc_r, MPI.SUM),
                    lambda s: (sc_r, sum(ints(r, k, s) for r in range(rank + 1)))))
    out.append(Case("Exscan", fill_exscan, lambda f: f(ex_s, ex_r, MPI.SUM),
                    lambda s: (ex_r, sum(ints(r, k, s) for r in range(rank))
                               if rank else ex_r.copy())))
    out.append(Case("Barrier", lambda salt: None, lambda f: f(),
                    lambda s: (np.zeros(1), np.zeros(1))))
    return out


def method(case, kind):
    prefix = {"I": "I", "B": "", "P": ""}[kind]
    suffix = "_init" if kind == "P" else ""
    name = case.name if kind != "I" else case.name[0].lower() + case.name[1:]
    return getattr(comm, prefix + name + suffix)
'''


def program(body: str) -> str:
    """The prelude, the test body and the final ``OK <rank>`` line."""
    return PRELUDE + textwrap.dedent(body) + '\nprint(f"OK {rank}", flush=True)\n'


NONBLOCKING = program(
    """
    def start_all(salt, root):
        # every I-variant at once, each with its own buffers
        todo = cases(root)
        reqs = []
        for case in todo:
            case.refill(salt)
            req = case.call(method(case, "I"))
            assert isinstance(req, MPI.Request) and req != MPI.REQUEST_NULL, case.name
            reqs.append(req)
        return todo, reqs

    # the blocking forms with the same cases give the same results (C-40)
    for case in cases(size - 1):
        case.refill(1)
        assert case.call(method(case, "B")) is None
        case.check()

    # Waitall (C-33)
    todo, reqs = start_all(2, 0)
    Request.Waitall(reqs)
    assert all(r == MPI.REQUEST_NULL for r in reqs)
    for case in todo:
        case.check()

    # Waitany: in whatever order they complete
    todo, reqs = start_all(3, size // 2)
    seen = set()
    for _ in todo:
        i = Request.Waitany(reqs)
        assert i not in seen and reqs[i] == MPI.REQUEST_NULL
        seen.add(i)
        todo[i].check()
    assert Request.Waitany(reqs) == MPI.UNDEFINED

    # Testall polling, Testsome polling
    todo, reqs = start_all(4, size - 1)
    for _ in deadline_loop():
        if Request.Testall(reqs):
            break
    for case in todo:
        case.check()
    todo, reqs = start_all(5, 1 % size)
    done = set()
    for _ in deadline_loop():
        idx = Request.Testsome(reqs)
        for i in idx or []:
            assert i not in done
            done.add(i)
            todo[i].check()
        if len(done) == len(todo):
            break

    # single Waits in reverse issue order: completing a later one first is fine (C-37)
    todo, reqs = start_all(6, 0)
    for case, req in reversed(list(zip(todo, reqs))):
        req.Wait()
        case.check()

    # lower-level Test on one request until done
    todo, reqs = start_all(7, 0)
    for case, req in zip(todo, reqs):
        for _ in deadline_loop():
            if req.Test():
                break
        case.check()

    # collective and point-to-point requests mixed in one Waitall (C-33, Example 5.33)
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    got = np.zeros(4)
    mine = np.full(4, float(rank))
    total = np.zeros(1)
    reqs = [comm.Irecv(got, prv, 5), comm.Iallreduce(np.array([rank + 1.0]), total),
            comm.Isend(mine, nxt, 5)]
    Request.Waitall(reqs)
    assert same(got, np.full(4, float(prv))) and total[0] == size * (size + 1) / 2

    # a blocking collective while nonblocking ones are outstanding (C-35, Example 5.29)
    buf = np.arange(5.0) if rank == 0 else np.zeros(5)
    req = comm.Ibcast(buf, 0)
    out = np.zeros(1)
    comm.Allreduce(np.array([1.0]), out)
    req.Wait()
    assert out[0] == size and same(buf, np.arange(5.0))

    # several of the same kind outstanding match in issue order (C-35, Example 5.34)
    bufs = [np.full(3, float(i)) if rank == i % size else np.zeros(3) for i in range(4)]
    reqs = [comm.Ibcast(bufs[i], i % size) for i in range(4)]
    for i in (3, 1, 2, 0):
        reqs[i].Wait()
        assert same(bufs[i], np.full(3, float(i))), (i, bufs[i])

    # Ibarrier completes only once every rank has called it (C-38): the last rank
    # calls it only after rank 0 has seen it incomplete, told by a message
    last = size - 1
    if size > 1:
        if rank == 0:
            req = comm.Ibarrier()
            for _ in range(50):
                assert not req.Test(), "Ibarrier completed before the last rank called it"
            comm.send("go", dest=last, tag=9)
            req.Wait()
        elif rank == last:
            assert comm.recv(source=0, tag=9) == "go"
            comm.Ibarrier().Wait()
        else:
            comm.Ibarrier().Wait()
    """
)

PROGRESS = program(
    """
    # Example 5.31: rank 0 is blocked in Recv while its Ibarrier must advance
    if rank == 0:
        req = comm.Ibarrier()
        got = comm.recv(source=1, tag=3)
        assert got == "after the barrier"
        req.Wait()
    elif rank == 1:
        comm.Ibarrier().Wait()
        comm.send("after the barrier", dest=0, tag=3)
    else:
        comm.Ibarrier().Wait()
    # the same with buffers and a larger message
    big = np.zeros(200_000)
    if rank == 0:
        req = comm.Ibarrier()
        comm.Recv(big, source=1, tag=4)
        assert big[-1] == 7
        req.Wait()
    elif rank == 1:
        comm.Ibarrier().Wait()
        comm.Send(np.full(200_000, 7.0), dest=0, tag=4)
    else:
        comm.Ibarrier().Wait()

    # nonblocking collectives progress while rank 0 computes without calling MPI
    comm.Barrier()
    k = 50_000
    data = np.full(k, float(rank + 1))
    total = np.zeros(k)
    bc = np.arange(40_000, dtype="f8") if rank == size - 1 else np.zeros(40_000)
    gat = np.zeros(size)
    reqs = [comm.Ibarrier(), comm.Iallreduce(data, total), comm.Ibcast(bc, size - 1),
            comm.Iallgather(np.array([rank * 1.5]), gat), comm.Ibarrier()]
    if rank == 0:
        end = time.time() + 1.5
        x = 0
        while time.time() < end:     # pure Python work, no MPI call
            x += sum(range(1000))
        finished = time.time()
        Request.Waitall(reqs)
    else:
        Request.Waitall(reqs)
        finished = time.time()
    assert same(total, np.full(k, size * (size + 1) / 2))
    assert same(bc, np.arange(40_000, dtype="f8"))
    assert same(gat, np.arange(size) * 1.5)
    times = comm.allgather(finished)
    assert all(t < times[0] for t in times[1:]), ("others waited for rank 0", times)
    """
)

PERSISTENT = program(
    """
    # every *_init: inactive until Start, reusable after Wait, new contents each time
    for root in sorted({0, size - 1}):
        todo = cases(root)
        reqs = [case.call(method(case, "P")) for case in todo]
        for req in reqs:
            assert isinstance(req, MPI.Prequest) and req != MPI.REQUEST_NULL
            assert req.Test(), "an inactive persistent request tests complete"
        for salt in range(4):
            for case in todo:
                case.refill(10 * salt + root)
            if salt % 2:
                MPI.Prequest.Startall(reqs)
            else:
                for req in reqs:
                    req.Start()
            if salt == 1:
                # a blocking collective between Start and Wait
                out = np.zeros(1)
                comm.Allreduce(np.array([2.0]), out)
                assert out[0] == 2 * size
            if salt == 2:
                for i in reversed(range(len(reqs))):
                    reqs[i].Wait()
            elif salt == 3:
                for _ in deadline_loop():
                    if Request.Testall(reqs):
                        break
            else:
                Request.Waitall(reqs)
            for case in todo:
                case.check()
            assert all(req != MPI.REQUEST_NULL for req in reqs), "still allocated, inactive"
        # Start on an active request is an error; the request still completes
        reqs[0].Start()
        try:
            reqs[0].Start()
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_REQUEST, exc
        else:
            raise AssertionError("Start of an active request must fail")
        reqs[0].Wait()
        for req in reqs:
            req.Free()
            assert req == MPI.REQUEST_NULL

    # persistent and nonblocking calls of one kind interleaved match in start order
    a = np.zeros(2)
    preq = comm.Allreduce_init(np.full(2, 1.0), a)
    for salt in range(3):
        b, c = np.zeros(2), np.zeros(2)
        r1 = comm.Iallreduce(np.full(2, 10.0 + salt), b)
        preq.Start()
        r2 = comm.Iallreduce(np.full(2, 100.0 + salt), c)
        Request.Waitall([r2, preq, r1])
        assert (a == size).all() and (b == (10 + salt) * size).all()
        assert (c == (100 + salt) * size).all()
    preq.Free()
    """
)


@pytest.mark.parametrize("n", NPROCS)
def test_nonblocking(run_mpi, n: int) -> None:
    """Every I-variant, many outstanding, completed in any order; Ibarrier synchronises."""
    assert_ok(run_mpi(n, NONBLOCKING), n)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_progress(run_mpi, n: int) -> None:
    """Ibarrier advances inside a blocked Recv; collectives progress during computation."""
    assert_ok(run_mpi(n, PROGRESS), n)


@pytest.mark.parametrize("n", NPROCS)
def test_persistent(run_mpi, n: int) -> None:
    """Every ``*_init`` collective, started repeatedly with changing buffer contents."""
    assert_ok(run_mpi(n, PERSISTENT), n)
