"""Intercommunicator collectives on real ranks: Alltoallw, Reduce_scatter(_block), the
persistent forms, and the routing of rooted calls through the other group's leader.

COMM_WORLD is split into a low group (world ranks below ``k``) and a high group
(see ``tests/test_intercomm.py``). Results are checked against the standard's
definitions, computed here from the world ranks of the other group: a process
receives the reduction of the *other* group's contributions (in rank order for
a non-commutative operation), scattered in its own group's blocks; Alltoallw
moves block j of process i of one group to block i of process j of the other,
with per-peer counts, byte displacements and datatypes. Every persistent
collective is started several times with new data (each ``Start`` reads the
buffers again), alone and with ``Startall``. Rules: ``IN_PLACE`` gives
``ERR_BUFFER``, a bad root ``ERR_ROOT`` (also for ``*_init``), Scan/Exscan in any
form ``ERR_COMM``, inconsistent counts ``ERR_COUNT``/``ERR_NOT_SAME``; persistent
and nonblocking calls never match. INVENTORY §4.3 C-7, C-16..C-18, C-20,
C-25, C-26, C-29..C-31, C-36, C-41.
"""

from __future__ import annotations

import pytest
from conftest import assert_ok, mpi_program
from test_intercomm import PRELUDE as INTER_PRELUDE

PRELUDE = (
    INTER_PRELUDE
    + '''

def matrices(values):
    """2x2 integer matrices [[v + 1, 1], [0, 1]] (which do not commute), flattened."""
    return np.array([[v + 1, 1, 0, 1] for v in values], dtype="i8").reshape(-1)


def matmul_fn(invec, inoutvec, datatype):
    a = np.asarray(invec).reshape(-1, 2, 2)
    b = np.asarray(inoutvec).reshape(-1, 2, 2)
    b[...] = a @ b


MATMUL = MPI.Op.Create(matmul_fn, commute=False)


def product(mats):
    """The product of the flattened 2x2 matrices, left to right."""
    out = np.eye(2, dtype="i8")
    for m in mats:
        out = out @ m.reshape(2, 2)
    return out.reshape(-1)
'''
)

CASES = [(2, 1), (3, 1), (3, 2), (4, 2), (5, 2), (5, 4)]


def run(run_mpi, n, body, timeout=60):
    proc = run_mpi(n, mpi_program(PRELUDE, body), timeout=timeout)
    assert_ok(proc, n)
    return proc


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_alltoallw(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, m = ic.rank, ic.remote_size

        def kind(w):  # the type a process sends in: its world rank's parity decides
            return (MPI.DOUBLE, "d") if w % 2 else (MPI.INT, "i")

        def count(sender, receiver):  # per pair: depends on both world ranks
            return (sender + 2 * receiver) % 3 + 1

        # sendbuf: block for remote j at a byte displacement, in this process's type
        dt, code = kind(rank)
        item = np.dtype(code).itemsize
        scounts = [count(rank, t) for t in theirs]
        sdispls, pos = [], 8  # leave a gap: displacements are bytes, not blocks
        for c in scounts:
            sdispls.append(pos)
            pos += c * item + 4
        sendbuf = np.zeros(pos, dtype="u1")
        for j, (c, d) in enumerate(zip(scounts, sdispls)):
            sendbuf[d : d + c * item] = np.frombuffer(
                np.array([1000 * rank + 10 * j + x for x in range(c)], dtype=code).tobytes(), "u1"
            )
        rcounts = [count(t, rank) for t in theirs]
        rtypes = [kind(t)[0] for t in theirs]
        rdispls, pos = [], 0
        for t, c in zip(theirs, rcounts):
            rdispls.append(pos)
            pos += c * np.dtype(kind(t)[1]).itemsize
        stypes = [dt] * m

        def expect():
            for i, t in enumerate(theirs):
                code_t = kind(t)[1]
                nbytes = rcounts[i] * np.dtype(code_t).itemsize
                got = np.frombuffer(recvbuf[rdispls[i] : rdispls[i] + nbytes].tobytes(), code_t)
                want = [1000 * t + 10 * r + x for x in range(rcounts[i])]
                assert got.tolist() == want, (i, got, want)

        for form in ("blocking", "nonblocking", "persistent"):
            recvbuf = np.full(pos, 255, dtype="u1")
            s = [sendbuf, scounts, sdispls, stypes]
            rv = [recvbuf, rcounts, rdispls, rtypes]
            if form == "blocking":
                ic.Alltoallw(s, rv)
            elif form == "nonblocking":
                ic.Ialltoallw(s, rv).Wait()
            else:
                req = ic.Alltoallw_init(s, rv)
                for again in range(2):
                    recvbuf[:] = 255
                    req.Start()
                    req.Wait()
                    expect()
                req.Free()
            expect()
        ic.Set_errhandler(MPI.ERRORS_RETURN)
        raises(MPI.ERR_BUFFER, ic.Alltoallw, MPI.IN_PLACE, [recvbuf, rcounts, rdispls, rtypes])
        raises(MPI.ERR_BUFFER, ic.Ialltoallw, MPI.IN_PLACE, [recvbuf, rcounts, rdispls, rtypes])
        try:  # counts of the wrong length: ValueError, as mpi4py raises it
            ic.Alltoallw([sendbuf, scounts[:-1] or [1, 1], sdispls, stypes],
                         [recvbuf, rcounts, rdispls, rtypes])
            raise AssertionError("Alltoallw took counts of the wrong length")
        except ValueError:
            pass
        assert ic.allgather(rank) == theirs
        """,
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_reduce_scatter(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, nl, m = ic.rank, ic.size, ic.remote_size
        # count: the same in both groups; a multiple of both sizes for the block form
        count = nl * m * 2

        def contribution(w):
            return np.arange(count, dtype="i8") * (w + 1) + w

        total = sum(contribution(t) for t in theirs)  # the other group's reduction

        # Reduce_scatter_block: recvcount = count / (own group's size)
        rc = count // nl
        want = total[r * rc : (r + 1) * rc]
        out = np.full(rc, -1, dtype="i8")
        ic.Reduce_scatter_block(contribution(rank), out, op=MPI.SUM)
        assert out.tolist() == want.tolist(), (out, want)
        out[:] = -1
        ic.Ireduce_scatter_block(contribution(rank), out, op=MPI.SUM).Wait()
        assert out.tolist() == want.tolist(), (out, want)

        # Reduce_scatter: per-process counts of the own group (the same on all of them)
        counts = [(i % 3) + 1 for i in range(nl)]
        counts[-1] += count - sum(counts)  # they cover the whole vector
        start = sum(counts[:r])
        want = total[start : start + counts[r]]
        out = np.full(counts[r], -1, dtype="i8")
        ic.Reduce_scatter(contribution(rank), out, counts, op=MPI.SUM)
        assert out.tolist() == want.tolist(), (out, want)
        out[:] = -1
        ic.Ireduce_scatter(contribution(rank), out, counts, op=MPI.SUM).Wait()
        assert out.tolist() == want.tolist(), (out, want)
        # recvcounts=None: equal blocks, as the block form
        out = np.full(count // nl, -1, dtype="i8")
        ic.Reduce_scatter(contribution(rank), out, None, op=MPI.MAX)
        mx = np.max([contribution(t) for t in theirs], axis=0)
        assert out.tolist() == mx[r * (count // nl) : (r + 1) * (count // nl)].tolist()
        # a larger receive buffer keeps its tail
        out = np.full(counts[r] + 2, -7, dtype="i8")
        ic.Reduce_scatter(contribution(rank), out, counts, op=MPI.SUM)
        assert out.tolist() == want.tolist() + [-7, -7], out

        # a non-commutative operation combines the other group in its rank order
        mats = lambda w: matrices([w * 7 + e for e in range(nl * m)])
        prod = [product([mats(t)[4 * e : 4 * e + 4] for t in theirs]) for e in range(nl * m)]
        prod = np.concatenate(prod)
        out = np.zeros(4 * m, dtype="i8")
        ic.Reduce_scatter_block(mats(rank), out, op=MATMUL)
        assert out.tolist() == prod[r * 4 * m : (r + 1) * 4 * m].tolist(), (out, prod)
        out[:] = 0
        ic.Ireduce_scatter(mats(rank), out, [4 * m] * nl, op=MATMUL).Wait()
        assert out.tolist() == prod[r * 4 * m : (r + 1) * 4 * m].tolist(), (out, prod)

        # rules
        ic.Set_errhandler(MPI.ERRORS_RETURN)
        buf = np.zeros(count, dtype="i8")
        raises(MPI.ERR_BUFFER, ic.Reduce_scatter_block, MPI.IN_PLACE, buf)
        raises(MPI.ERR_BUFFER, ic.Reduce_scatter, MPI.IN_PLACE, buf, [rc] * nl)
        raises(MPI.ERR_BUFFER, ic.Ireduce_scatter_block, MPI.IN_PLACE, buf)
        raises(MPI.ERR_BUFFER, ic.Reduce_scatter_block_init, MPI.IN_PLACE, buf)
        raises(MPI.ERR_COUNT, ic.Reduce_scatter, buf, buf, [1] * (nl + 1))
        raises(MPI.ERR_COUNT, ic.Reduce_scatter, buf, buf, [count + 1] + [0] * (nl - 1))
        raises(MPI.ERR_COUNT, ic.Reduce_scatter, buf, np.zeros(0, "i8"), [rc] * nl)
        if nl > 1:
            raises(MPI.ERR_COUNT, ic.Reduce_scatter_block, np.zeros(nl + 1, "i8"), buf)
        assert ic.allgather(rank) == theirs  # errors are local: the intercomm still works
        """,
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 1), (4, 3), (5, 2)])
def test_reduce_scatter_counts_differ_between_groups(run_mpi, n, k):
    """Both groups must reduce vectors of the same length: otherwise ERR_NOT_SAME."""
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        nl = ic.size
        send = np.ones(nl * (2 if low else 3), dtype="i8")
        try:
            ic.Reduce_scatter_block(send, np.zeros(3, dtype="i8"))
            error = None
        except MPI.Exception as exc:
            error = exc
        if error is None:
            try:
                ic.Barrier()
            except MPI.Exception as exc:
                error = exc
        assert error is not None and error.Get_error_class() == MPI.ERR_NOT_SAME, error
        comm.Barrier()
        """,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_persistent_collectives(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, nl, m = ic.rank, ic.size, ic.remote_size
        T = np.array(theirs)
        state = {{"round": 0}}  # the data change between Starts

        def val(w):
            return 100 * state["round"] + w

        made = []  # (name, request, refill before Start, check after completion)

        def add(name, req, refill, check):
            made.append((name, req, refill, check))

        add("Barrier", ic.Barrier_init(), lambda: None, lambda: None)
        for root_low in (True, False):
            root = 0 if root_low else (size - k) - 1
            in_root = low == root_low
            ra = root_arg(ic, in_root, root)
            is_root = ra == MPI.ROOT
            rw = (list(range(k)) if root_low else list(range(k, size)))[root]  # world rank

            b = np.zeros(3)
            def refill_b(b=b, is_root=is_root):
                b[:] = [val(rank) + x for x in range(3)] if is_root else -1
            def check_b(b=b, in_root=in_root, is_root=is_root, rw=rw):
                if not in_root:
                    assert b.tolist() == [val(rw) + x for x in range(3)], ("Bcast", b)
                elif not is_root:
                    assert b.tolist() == [-1] * 3, b
            add("Bcast", ic.Bcast_init(b, root=ra), refill_b, check_b)

            gs = np.zeros(2, dtype="i")
            gr = np.zeros((m, 2), dtype="i") if is_root else None
            def refill_g(gs=gs, gr=gr):
                gs[:] = [val(rank), -val(rank)]
                if gr is not None:
                    gr[:] = -9
            def check_g(gr=gr):
                if gr is not None:
                    assert gr.tolist() == [[val(t), -val(t)] for t in theirs], ("Gather", gr)
            add("Gather", ic.Gather_init(gs, gr, root=ra), refill_g, check_g)

            counts = [j + 1 for j in range(m)]
            gvs = np.zeros(r + 1, dtype="i")
            gvr = np.zeros(sum(counts), dtype="i") if is_root else None
            def refill_gv(gvs=gvs, gvr=gvr):
                gvs[:] = val(rank)
                if gvr is not None:
                    gvr[:] = -9
            def check_gv(gvr=gvr):
                if gvr is not None:
                    want = [val(t) for j, t in enumerate(theirs) for _ in range(j + 1)]
                    assert gvr.tolist() == want, ("Gatherv", gvr)
            add("Gatherv", ic.Gatherv_init(gvs, [gvr, counts] if is_root else None, root=ra),
                refill_gv, check_gv)

            ss = np.zeros(2 * m) if is_root else None
            sr = np.zeros(2)
            def refill_s(ss=ss, sr=sr):
                if ss is not None:
                    ss[:] = np.arange(2 * m) + val(rank)
                sr[:] = -1
            def check_s(sr=sr, in_root=in_root, rw=rw):
                want = [-1, -1] if in_root else [2 * r + val(rw), 2 * r + 1 + val(rw)]
                assert sr.tolist() == want, ("Scatter", sr)
            add("Scatter", ic.Scatter_init(ss, sr, root=ra), refill_s, check_s)

            svs = np.zeros(sum(counts), dtype="i") if is_root else None
            svr = np.zeros(r + 1, dtype="i")
            def refill_sv(svs=svs, svr=svr):
                if svs is not None:
                    svs[:] = np.arange(sum(counts)) + val(rank)
                svr[:] = -1
            def check_sv(svr=svr, in_root=in_root, rw=rw):
                s0 = r * (r + 1) // 2
                want = [-1] * (r + 1) if in_root else [s0 + x + val(rw) for x in range(r + 1)]
                assert svr.tolist() == want, ("Scatterv", svr)
            add("Scatterv", ic.Scatterv_init([svs, counts] if is_root else None, svr, root=ra),
                refill_sv, check_sv)

            rs = np.zeros(3, dtype="i8")
            rr = np.zeros(3, dtype="i8")
            def refill_r(rs=rs, rr=rr):
                rs[:] = val(rank)
                rr[:] = -1
            def check_r(rr=rr, is_root=is_root):
                want = [sum(val(t) for t in theirs)] * 3 if is_root else [-1] * 3
                assert rr.tolist() == want, ("Reduce", rr)
            add("Reduce", ic.Reduce_init(rs, rr, MPI.SUM, root=ra), refill_r, check_r)

        ags, agr = np.zeros(1, dtype="i"), np.zeros(m, dtype="i")
        def refill_ag():
            ags[:] = val(rank)
            agr[:] = -1
        def check_ag():
            assert agr.tolist() == [val(t) for t in theirs], ("Allgather", agr)
        add("Allgather", ic.Allgather_init(ags, agr), refill_ag, check_ag)

        c2 = [(t % 2) + 1 for t in theirs]
        agvs, agvr = np.zeros(rank % 2 + 1, dtype="i"), np.zeros(sum(c2), dtype="i")
        def refill_agv():
            agvs[:] = val(rank)
            agvr[:] = -1
        def check_agv():
            want = [val(t) for t in theirs for _ in range(t % 2 + 1)]
            assert agvr.tolist() == want, ("Allgatherv", agvr)
        add("Allgatherv", ic.Allgatherv_init(agvs, [agvr, c2]), refill_agv, check_agv)

        a2s, a2r = np.zeros(m, dtype="i"), np.zeros(m, dtype="i")
        def refill_a2():
            a2s[:] = [val(rank) * 10 + j for j in range(m)]
            a2r[:] = -1
        def check_a2():
            assert a2r.tolist() == [val(t) * 10 + r for t in theirs], ("Alltoall", a2r)
        add("Alltoall", ic.Alltoall_init(a2s, a2r), refill_a2, check_a2)
        a2vr = np.zeros(m, dtype="i")
        def refill_a2v():
            refill_a2()
            a2vr[:] = -1
        def check_a2v():
            assert a2vr.tolist() == [val(t) * 10 + r for t in theirs], ("Alltoallv", a2vr)
        add("Alltoallv", ic.Alltoallv_init([a2s, [1] * m], [a2vr, [1] * m]), refill_a2v,
            check_a2v)
        a2wr = np.zeros(m, dtype="i")
        def refill_a2w():
            refill_a2()
            a2wr[:] = -1
        def check_a2w():
            assert a2wr.tolist() == [val(t) * 10 + r for t in theirs], ("Alltoallw", a2wr)
        w4 = [4 * j for j in range(m)]
        ints = [MPI.INT] * m
        add("Alltoallw", ic.Alltoallw_init([a2s, [1] * m, w4, ints], [a2wr, [1] * m, w4, ints]),
            refill_a2w, check_a2w)

        ars, arr = np.zeros(2), np.zeros(2)
        def refill_ar():
            ars[:] = [val(rank), -val(rank)]
            arr[:] = 0
        def check_ar():
            s = float(sum(val(t) for t in theirs))
            assert arr.tolist() == [s, -s], ("Allreduce", arr)
        add("Allreduce", ic.Allreduce_init(ars, arr, MPI.SUM), refill_ar, check_ar)

        count = nl * m
        rsbs, rsbr = np.zeros(count, dtype="i8"), np.zeros(m, dtype="i8")
        def refill_rsb():
            rsbs[:] = np.arange(count) + val(rank)
            rsbr[:] = -1
        def check_rsb():
            tot = sum(np.arange(count) + val(t) for t in theirs)
            assert rsbr.tolist() == tot[r * m : (r + 1) * m].tolist(), ("Rsb", rsbr)
        add("Reduce_scatter_block", ic.Reduce_scatter_block_init(rsbs, rsbr, MPI.SUM),
            refill_rsb, check_rsb)
        rcounts = [m] * nl
        rsr = np.zeros(m, dtype="i8")
        def refill_rs():
            refill_rsb()
            rsr[:] = -1
        def check_rs():
            tot = sum(np.arange(count) + val(t) for t in theirs)
            assert rsr.tolist() == tot[r * m : (r + 1) * m].tolist(), ("Rs", rsr)
        add("Reduce_scatter", ic.Reduce_scatter_init(rsbs, rsr, rcounts, MPI.SUM),
            refill_rs, check_rs)

        names = [name for name, _, _, _ in made]
        assert len(names) == 1 + 2 * 6 + 8, names
        for req in [req for _, req, _, _ in made]:
            assert isinstance(req, MPI.Prequest) and req  # inactive, not null
        # each one alone, started twice with new data
        for name, req, refill, check in made:
            for _ in range(2):
                state["round"] += 1
                refill()
                req.Start()
                req.Wait()
                check()
        # all at once with Startall, completed in reverse order, twice
        reqs = [req for _, req, _, _ in made]
        for _ in range(2):
            state["round"] += 1
            for _, _, refill, _ in made:
                refill()
            MPI.Prequest.Startall(reqs)
            MPI.Request.Waitall(reqs[::-1])
            for _, _, _, check in made:
                check()
        for req in reqs:
            req.Free()
        assert ic.allgather(rank) == theirs
        """,
        timeout=150,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2), (4, 1)])
def test_persistent_rules(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, nl, m = ic.rank, ic.size, ic.remote_size
        ic.Set_errhandler(MPI.ERRORS_RETURN)
        a, b = np.zeros(2 * m), np.zeros(2 * m)
        # a bad root: neither ROOT, PROC_NULL nor a rank of the remote group
        for fn, args in [
            (ic.Bcast_init, (a,)),
            (ic.Gather_init, (a, b)),
            (ic.Gatherv_init, (a, [b, [1] * m])),
            (ic.Scatter_init, (a, b)),
            (ic.Scatterv_init, ([a, [1] * m], b)),
        ]:
            raises(MPI.ERR_ROOT, fn, *args, root=m)
            raises(MPI.ERR_ROOT, fn, *args, root=-5)
        raises(MPI.ERR_ROOT, ic.Reduce_init, a, b, MPI.SUM, m)
        # IN_PLACE is not allowed on an intercommunicator
        for fn, args in [
            (ic.Bcast_init, (MPI.IN_PLACE, MPI.ROOT)),
            (ic.Gather_init, (MPI.IN_PLACE, b, MPI.ROOT)),
            (ic.Scatter_init, (a, MPI.IN_PLACE, 0)),
            (ic.Allgather_init, (MPI.IN_PLACE, b)),
            (ic.Allgatherv_init, (MPI.IN_PLACE, [b, [1] * m])),
            (ic.Alltoall_init, (MPI.IN_PLACE, b)),
            (ic.Alltoallv_init, (MPI.IN_PLACE, [b, [1] * m])),
            (ic.Alltoallw_init, (MPI.IN_PLACE, [b, [1] * m, [0] * m, [MPI.DOUBLE] * m])),
            (ic.Reduce_init, (MPI.IN_PLACE, b, MPI.SUM, MPI.ROOT)),
            (ic.Allreduce_init, (MPI.IN_PLACE, b)),
            (ic.Reduce_scatter_init, (MPI.IN_PLACE, b, [1] * nl)),
            (ic.Reduce_scatter_block_init, (MPI.IN_PLACE, b)),
        ]:
            raises(MPI.ERR_BUFFER, fn, *args)
        # no scans on an intercommunicator, in any form
        for fn, args in [
            (ic.Scan, (a, b)), (ic.Iscan, (a, b)), (ic.Scan_init, (a, b)),
            (ic.Exscan, (a, b)), (ic.Iexscan, (a, b)), (ic.Exscan_init, (a, b)),
        ]:
            raises(MPI.ERR_COMM, fn, *args)
        # ROOT, PROC_NULL and the remote rank, started again and again
        ra = root_arg(ic, low, 0)
        buf = np.zeros(3)
        req = ic.Bcast_init(buf, root=ra)
        for i in range(3):
            buf[:] = [i, rank, 7] if ra == MPI.ROOT else -1
            req.Start()
            req.Wait()
            if low:
                assert buf.tolist() == ([i, rank, 7] if ra == MPI.ROOT else [-1] * 3), buf
            else:
                assert buf.tolist() == [i, 0, 7], buf
        # a persistent call does not match a nonblocking one
        error = None
        try:
            if low:
                req = ic.Barrier_init()
                req.Start()
                req.Wait()
            else:
                ic.Ibarrier().Wait()
        except MPI.Exception as exc:
            error = exc
        if error is None:
            try:
                ic.Barrier()
            except MPI.Exception as exc:
                error = exc
        assert error is not None and error.Get_error_class() == MPI.ERR_NOT_SAME, error
        assert "Barrier_init" in str(error) or "Ibarrier" in str(error), str(error)
        """,
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("n", "k"), [(3, 1), (4, 1), (5, 2), (5, 3)])
def test_rooted_calls_go_through_the_leader(run_mpi, n, k):
    """The root exchanges one message with the other group (its leader), whatever its size;
    the v-variants exchange one message with each process of the other group."""
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, m = ic.rank, ic.remote_size
        # count the messages of each round this process runs
        import ipympi.mpi.coll.inter_core as core
        counted = {{"send": 0, "recv": 0}}
        plain_init = core.InterCollOp.__init__

        def counting(gen):
            try:
                rnd = next(gen)
                while True:
                    counted["send"] += len(rnd.sends)
                    counted["recv"] += len(rnd.recvs)
                    rnd = gen.send((yield rnd))
            except StopIteration as stop:
                return stop.value

        def init(self, comm, call, algorithm, *args):
            plain_init(self, comm, call, counting(algorithm), *args)

        def messages(fn):
            counted.update(send=0, recv=0)
            core.InterCollOp.__init__ = init
            try:
                fn()
            finally:
                core.InterCollOp.__init__ = plain_init
            return counted["send"], counted["recv"]

        ra = root_arg(ic, low, 0)  # the root: world rank 0 (low group)
        is_root = ra == MPI.ROOT
        got = messages(lambda: ic.Gather(np.full(2, rank, "i"),
                                         np.zeros((m, 2), "i") if is_root else None, root=ra))
        if is_root:
            assert got == (0, 1), ("Gather at the root", got)
        got = messages(lambda: ic.gather(rank, root=ra))
        if is_root:
            assert got == (0, 1), ("gather at the root", got)
        out = ic.gather(rank, root=ra)
        assert out == (theirs if is_root else None), out
        got = messages(lambda: ic.Scatter(np.arange(2 * m, dtype="d") if is_root else None,
                                          np.zeros(2), root=ra))
        if is_root:
            assert got == (1, 0), ("Scatter at the root", got)
        got = messages(lambda: ic.scatter(list(range(m)) if is_root else None, root=ra))
        if is_root:
            assert got == (1, 0), ("scatter at the root", got)
        got = messages(lambda: ic.Gatherv(np.full(1, rank, "i"),
                                          [np.zeros(m, "i"), [1] * m] if is_root else None,
                                          root=ra))
        if is_root:
            assert got == (0, m), ("Gatherv at the root", got)
        # Allgather: a process sends O(log n) messages, not one to each remote process
        got = messages(lambda: ic.Allgather(np.full(1, rank, "i"), np.zeros(m, "i")))
        assert got[0] <= 1 + ic.size.bit_length(), ("Allgather", got)
        assert ic.allgather(rank) == theirs
        """,
    )
