"""Intercommunicators on real ranks: Create_intercomm, accessors, Merge, Dup/Split/Create,
point-to-point across the groups and the intercommunicator collectives.

COMM_WORLD is split into a low group (world ranks below ``k``) and a high group;
the leaders are their first ranks and talk over COMM_WORLD. Rooted collectives
follow the standard's rules (``ROOT`` at the root, ``PROC_NULL`` in the rest of
its group, the root's remote rank in the other group); ``IN_PLACE`` is refused
and ``Scan``/``Exscan`` are not defined. Rules: INVENTORY §5.2 G-11..G-13,
G-15, G-18, G-21..G-23.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

PRELUDE = (
    MPI_PRELUDE
    + '''

def make(k, tag=7):
    """(intercomm, low?, local comm) of the split at world rank ``k``."""
    low = rank < k
    local = comm.Split(0 if low else 1, rank)
    ic = local.Create_intercomm(0, comm, k if low else 0, tag)
    return ic, low, local


def members(k, low):
    lo, hi = list(range(k)), list(range(k, size))
    return (lo, hi) if low else (hi, lo)


def root_arg(ic, in_root_group, root):
    """The root argument of a rooted call whose root is ``root`` of the root group."""
    if in_root_group:
        return MPI.ROOT if ic.Get_rank() == root else MPI.PROC_NULL
    return root
'''
)

CASES = [(2, 1), (3, 1), (3, 2), (4, 2), (5, 2), (5, 4)]


def run(run_mpi, n, body, timeout=60):
    proc = run_mpi(n, mpi_program(PRELUDE, body), timeout=timeout)
    assert_ok(proc, n)
    return proc


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_create_accessors_and_p2p(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        assert isinstance(ic, MPI.Intercomm) and ic.Is_inter() and not ic.Is_intra()
        assert ic.is_inter
        assert ic.Get_size() == ic.size == len(mine)
        assert ic.Get_rank() == ic.rank == mine.index(rank)
        assert ic.Get_remote_size() == ic.remote_size == len(theirs)
        world = comm.Get_group()
        rg = ic.Get_remote_group()
        assert rg.Translate_ranks(list(range(rg.size)), world) == theirs
        assert ic.remote_group.size == len(theirs)
        g = ic.Get_group()
        assert g.Translate_ranks(list(range(g.size)), world) == mine
        assert ic.Compare(ic) == MPI.IDENT
        assert ic.Compare(local) == MPI.UNEQUAL

        # point-to-point: dest and source are ranks of the remote group
        r, m = ic.rank, ic.remote_size
        reqs = [ic.isend(("hello", rank, j), j, 11) for j in range(m)]
        got = [ic.recv(None, j, 11) for j in range(m)]
        MPI.Request.Waitall(reqs)
        assert got == [("hello", theirs[j], r) for j in range(m)], got
        st = MPI.Status()
        buf = np.zeros(3, dtype="i")
        if low and r == 0:
            ic.Send(np.arange(3, dtype="i") + rank, 0, 13)
        if not low and r == 0:
            ic.Recv(buf, MPI.ANY_SOURCE, 13, st)
            assert list(buf) == [0, 1, 2] and st.Get_source() == 0, (buf, st.Get_source())
        # traffic on the intercomm never meets COMM_WORLD's
        assert not comm.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        ic.Free()
        assert ic == MPI.COMM_NULL
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 1), (4, 1), (5, 3)])
def test_peer_traffic_with_the_same_tag_is_untouched(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        # the leaders have user messages with the intercomm's tag pending on the peer comm
        if rank == 0:
            comm.send("user to k", k, 7)
        if rank == k:
            comm.send("user to 0", 0, 7)
        ic, low, local = make(k, tag=7)
        if rank == 0:
            assert comm.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG) == "user to 0"
        if rank == k:
            assert comm.recv(None, 0, 7) == "user to k"
        assert not comm.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        assert ic.allgather(rank) == members(k, low)[1]
        # a second intercomm with the same tag, from the other side's point of view
        ic2, _, _ = make(k, tag=7)
        assert ic2.Compare(ic) == MPI.CONGRUENT
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_merge_order(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        lo, hi = list(range(k)), list(range(k, size))
        for low_high, high_high, order in [
            (False, True, lo + hi),
            (True, False, hi + lo),
        ]:
            m = ic.Merge(high=low_high if low else high_high)
            assert isinstance(m, MPI.Intracomm) and not m.Is_inter()
            assert m.Get_size() == size
            assert m.allgather(rank) == order, (m.allgather(rank), order)
            assert m.Get_rank() == order.index(rank)
            m.Free()
        # both the same: some order, the same everywhere, each group contiguous
        m = ic.Merge(high=True)
        got = m.allgather(rank)
        assert got in (lo + hi, hi + lo), got
        assert comm.allgather(got) == [got] * size
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (4, 2), (5, 2)])
def test_dup_split_create(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        d = ic.Dup()
        assert isinstance(d, MPI.Intercomm) and d.Is_inter()
        assert d.Compare(ic) == MPI.CONGRUENT
        assert d.remote_size == ic.remote_size
        # traffic on the duplicate never matches the original
        if ic.rank == 0:
            ic.send("orig", 0, 1)
            d.send("dup", 0, 1)
            assert d.recv(None, 0, 1) == "dup"
            assert ic.recv(None, 0, 1) == "orig"
        assert d.allgather(rank) == theirs

        # Split: same color on both sides; key reverses the order
        s = ic.Split(rank % 2, -rank)
        mine2 = sorted([r for r in mine if r % 2 == rank % 2], reverse=True)
        theirs2 = sorted([r for r in theirs if r % 2 == rank % 2], reverse=True)
        if theirs2:
            assert isinstance(s, MPI.Intercomm) and s.Is_inter()
            assert s.rank == mine2.index(rank) and s.remote_size == len(theirs2)
            assert s.allgather(rank) == theirs2
            s.Free()
        else:
            assert s == MPI.COMM_NULL
        u = ic.Split(MPI.UNDEFINED if rank == 0 else 0, 0)
        if rank == 0 or not [t for t in theirs if t != 0]:
            assert u == MPI.COMM_NULL  # undefined, or no process of the color on the other side
        else:
            assert u.Is_inter() and u.remote_size == len([t for t in theirs if t != 0])

        # Create: the first member of each group only
        grp = ic.Get_group().Incl([0])
        c = ic.Create(grp)
        if ic.rank == 0:
            assert c.Is_inter() and c.size == 1 and c.remote_size == 1
            assert c.allgather(rank) == [theirs[0]]
        else:
            assert c == MPI.COMM_NULL
        # Create with every member keeps the groups
        full = ic.Create(ic.Get_group())
        assert full.Compare(ic) == MPI.CONGRUENT
        d.Free()
        """,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_object_collectives(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, m = ic.rank, ic.remote_size
        ic.Barrier()
        ic.barrier()
        for root_low in (True, False):
            for root in {{0, (k - 1) if root_low else (size - k - 1)}}:
                in_root = low == root_low
                ra = root_arg(ic, in_root, root)
                # bcast
                got = ic.bcast(("b", rank) if ra == MPI.ROOT else None, root=ra)
                if in_root:
                    assert got is None
                else:
                    assert got == ("b", theirs[root]), got
                # gather
                got = ic.gather(rank * 10, root=ra)
                assert got == ([t * 10 for t in theirs] if ra == MPI.ROOT else None), got
                # scatter
                objs = [("s", j) for j in range(m)] if ra == MPI.ROOT else None
                got = ic.scatter(objs, root=ra)
                assert got == (None if in_root else ("s", r)), got
                # reduce
                got = ic.reduce(rank, op=MPI.SUM, root=ra)
                assert got == (sum(theirs) if ra == MPI.ROOT else None), got
                got = ic.reduce([rank], op=lambda a, b: a + b, root=ra)
                assert got == (theirs if ra == MPI.ROOT else None), got
        assert ic.allgather(rank) == theirs
        assert ic.allreduce(rank) == sum(theirs)
        assert ic.allreduce([rank], op=lambda a, b: a + b) == theirs
        assert ic.alltoall([(rank, j) for j in range(m)]) == [(t, r) for t in theirs]
        """,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("n", "k"), CASES)
def test_buffer_collectives(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, m = ic.rank, ic.remote_size
        T = np.array(theirs)
        for root_low in (True, False):
            root = 0 if root_low else size - k - 1
            in_root = low == root_low
            ra = root_arg(ic, in_root, root)
            # Bcast
            buf = np.arange(5.0) + rank if ra == MPI.ROOT else np.full(5, -1.0)
            ic.Bcast(buf, root=ra)
            if in_root:
                assert list(buf) == (list(np.arange(5.0) + rank) if ra == MPI.ROOT else [-1.0] * 5)
            else:
                assert list(buf) == list(np.arange(5.0) + theirs[root]), buf
            # Gather / Gatherv
            out = np.full((m, 2), -1, dtype="i") if ra == MPI.ROOT else None
            ic.Gather(np.array([rank, 2 * rank], dtype="i"), out, root=ra)
            if ra == MPI.ROOT:
                assert out.tolist() == [[t, 2 * t] for t in theirs], out
            counts = [j + 1 for j in range(m)]
            out = np.full(sum(counts), -1, dtype="i") if ra == MPI.ROOT else None
            send = np.full(r + 1, rank, dtype="i")
            ic.Gatherv(send, [out, counts] if ra == MPI.ROOT else None, root=ra)
            if ra == MPI.ROOT:
                assert out.tolist() == [t for j, t in enumerate(theirs) for _ in range(j + 1)]
            # Scatter / Scatterv
            src = np.arange(2 * m, dtype="d") * 10 + rank if ra == MPI.ROOT else None
            got = np.full(2, -1.0)
            ic.Scatter(src, got, root=ra)
            if not in_root:
                assert got.tolist() == [20.0 * r + theirs[root], 20.0 * r + 10 + theirs[root]]
            else:
                assert got.tolist() == [-1.0, -1.0]
            src = np.arange(sum(counts), dtype="i") if ra == MPI.ROOT else None
            got = np.full(r + 1, -1, dtype="i")
            ic.Scatterv([src, counts] if ra == MPI.ROOT else None, got, root=ra)
            if not in_root:
                start = r * (r + 1) // 2
                assert got.tolist() == list(range(start, start + r + 1)), got
            # Reduce
            out = np.full(3, -1, dtype="i")
            ic.Reduce(np.full(3, rank + 1, dtype="i"), out, op=MPI.MAX, root=ra)
            assert out.tolist() == ([max(theirs) + 1] * 3 if ra == MPI.ROOT else [-1] * 3)
        # Allgather / Allgatherv
        out = np.full(m, -1, dtype="i")
        ic.Allgather(np.array([rank], dtype="i"), out)
        assert out.tolist() == theirs
        counts = [(t % 2) + 1 for t in theirs]
        out = np.full(sum(counts), -1, dtype="i")
        ic.Allgatherv(np.full(rank % 2 + 1, rank, dtype="i"), [out, counts])
        assert out.tolist() == [t for t in theirs for _ in range(t % 2 + 1)], out
        # Allreduce: each group gets the other's reduction
        out = np.zeros(4)
        ic.Allreduce(np.full(4, float(rank)), out, op=MPI.SUM)
        assert out.tolist() == [float(T.sum())] * 4, out
        out = np.zeros(2, dtype="i")
        ic.Allreduce(np.array([rank, -rank], dtype="i"), out, op=MPI.MIN)
        assert out.tolist() == [min(theirs), -max(theirs)]
        # Alltoall / Alltoallv
        send = np.array([100 * rank + j for j in range(m)], dtype="i")
        out = np.full(m, -1, dtype="i")
        ic.Alltoall(send, out)
        assert out.tolist() == [100 * t + r for t in theirs], out
        scounts = [1] * m
        out = np.full(m, -1, dtype="i")
        ic.Alltoallv([send, scounts], [out, [1] * m])
        assert out.tolist() == [100 * t + r for t in theirs], out
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2)])
def test_rules_in_place_scan_root(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        ic.Set_errhandler(MPI.ERRORS_RETURN)
        a, b = np.zeros(2), np.zeros(2)
        for fn, args in [
            (ic.Allreduce, (MPI.IN_PLACE, b)),
            (ic.Allgather, (MPI.IN_PLACE, b)),
            (ic.Alltoall, (MPI.IN_PLACE, b)),
        ]:
            raises(MPI.ERR_BUFFER, fn, *args)
        for fn, args in [
            (ic.Scan, (a, b)),
            (ic.Exscan, (a, b)),
            (ic.scan, (1,)),
            (ic.exscan, (1,)),
        ]:
            raises(MPI.ERR_COMM, fn, *args)
        raises(MPI.ERR_ROOT, ic.bcast, 1, ic.remote_size)
        raises(MPI.ERR_ROOT, ic.Bcast, a, -7)
        # errors are local: the intercomm still works
        assert ic.allgather(rank) == members(k, low)[1]
        # constructors reject bad leaders and tags
        raises(MPI.ERR_RANK, local.Create_intercomm, local.size, comm, 0)
        raises(MPI.ERR_TAG, local.Create_intercomm, 0, comm, 0, -1)
        """,
    )


NB_CASES = [(3, 1), (3, 2), (4, 1), (4, 3)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("n", "k"), NB_CASES)
def test_nonblocking_collectives(run_mpi, n, k):
    """Each I-collective alone (Wait / Test), then all outstanding at once, Waitall reversed."""
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        ic, low, local = make(k)
        mine, theirs = members(k, low)
        r, m = ic.rank, ic.remote_size
        T = np.array(theirs)
        Request = MPI.Request
        # same argument rules as the blocking forms: no IN_PLACE, ROOT/PROC_NULL/remote rank
        ic.Set_errhandler(MPI.ERRORS_RETURN)
        raises(MPI.ERR_BUFFER, ic.Iallreduce, MPI.IN_PLACE, np.zeros(2))
        raises(MPI.ERR_BUFFER, ic.Ialltoall, MPI.IN_PLACE, np.zeros(m))
        raises(MPI.ERR_ROOT, ic.Ibcast, np.zeros(2), -7)
        raises(MPI.ERR_ROOT, ic.Ireduce, np.zeros(2), np.zeros(2), MPI.SUM, m)

        def start_all(root_low):
            # every nonblocking collective, started; (request, check) pairs
            root = 0 if root_low else size - k - 1
            in_root = low == root_low
            ra = root_arg(ic, in_root, root)
            is_root = ra == MPI.ROOT
            out = []
            buf = np.arange(5.0) + rank if is_root else np.full(5, -1.0)
            def chk_bcast(buf=buf):
                want = list(np.arange(5.0) + (rank if in_root else theirs[root]))
                want = [-1.0] * 5 if in_root and not is_root else want
                assert list(buf) == want, ("Ibcast", buf)
            out.append((ic.Ibcast(buf, root=ra), chk_bcast))
            g = np.full((m, 2), -1, dtype="i") if is_root else None
            def chk_gather(g=g):
                if is_root:
                    assert g.tolist() == [[t, 2 * t] for t in theirs], ("Igather", g)
            out.append((ic.Igather(np.array([rank, 2 * rank], dtype="i"), g, root=ra), chk_gather))
            counts = [j + 1 for j in range(m)]
            gv = np.full(sum(counts), -1, dtype="i") if is_root else None
            def chk_gatherv(gv=gv):
                if is_root:
                    assert gv.tolist() == [t for j, t in enumerate(theirs) for _ in range(j + 1)]
            out.append((ic.Igatherv(np.full(r + 1, rank, dtype="i"),
                                    [gv, counts] if is_root else None, root=ra), chk_gatherv))
            src = np.arange(2 * m, dtype="d") * 10 + rank if is_root else None
            got = np.full(2, -1.0)
            def chk_scatter(got=got):
                base = 0 if in_root else theirs[root]
                want = [-1.0, -1.0] if in_root else [20.0 * r + base, 20.0 * r + 10 + base]
                assert got.tolist() == want, ("Iscatter", got)
            out.append((ic.Iscatter(src, got, root=ra), chk_scatter))
            srcv = np.arange(sum(counts), dtype="i") if is_root else None
            gotv = np.full(r + 1, -1, dtype="i")
            def chk_scatterv(gotv=gotv):
                s = r * (r + 1) // 2
                want = [-1] * (r + 1) if in_root else list(range(s, s + r + 1))
                assert gotv.tolist() == want, ("Iscatterv", gotv)
            sv = [srcv, counts] if is_root else None
            out.append((ic.Iscatterv(sv, gotv, root=ra), chk_scatterv))
            red = np.full(3, -1, dtype="i")
            def chk_reduce(red=red):
                assert red.tolist() == ([max(theirs) + 1] * 3 if is_root else [-1] * 3), red
            out.append((ic.Ireduce(np.full(3, rank + 1, dtype="i"), red, op=MPI.MAX, root=ra),
                        chk_reduce))
            # the unrooted ones
            out.append((ic.Ibarrier(), lambda: None))
            ag = np.full(m, -1, dtype="i")
            def chk_ag(ag=ag):
                assert ag.tolist() == theirs, ("Iallgather", ag)
            out.append((ic.Iallgather(np.array([rank], dtype="i"), ag), chk_ag))
            c2 = [(t % 2) + 1 for t in theirs]
            agv = np.full(sum(c2), -1, dtype="i")
            def chk_agv(agv=agv):
                assert agv.tolist() == [t for t in theirs for _ in range(t % 2 + 1)], agv
            out.append((ic.Iallgatherv(np.full(rank % 2 + 1, rank, dtype="i"), [agv, c2]), chk_agv))
            send = np.array([100 * rank + j for j in range(m)], dtype="i")
            a2a = np.full(m, -1, dtype="i")
            def chk_a2a(a2a=a2a):
                assert a2a.tolist() == [100 * t + r for t in theirs], ("Ialltoall", a2a)
            out.append((ic.Ialltoall(send, a2a), chk_a2a))
            a2av = np.full(m, -1, dtype="i")
            def chk_a2av(a2av=a2av):
                assert a2av.tolist() == [100 * t + r for t in theirs], ("Ialltoallv", a2av)
            out.append((ic.Ialltoallv([send, [1] * m], [a2av, [1] * m]), chk_a2av))
            ar = np.zeros(4)
            def chk_ar(ar=ar):
                assert ar.tolist() == [float(T.sum())] * 4, ("Iallreduce", ar)
            out.append((ic.Iallreduce(np.full(4, float(rank)), ar, op=MPI.SUM), chk_ar))
            return out

        for root_low in (True, False):
            # one at a time: poll the i-th with Test (and other MPI calls), then the rest
            for i in range(12):
                pairs = start_all(root_low)
                # (complete them all, but the i-th one first, by polling)
                req, chk = pairs[i]
                assert isinstance(req, MPI.Request)
                t0 = time.time()
                while not req.Test():
                    comm.Iprobe(MPI.ANY_SOURCE, 3)
                    assert time.time() - t0 < 30, i
                chk()
                Request.Waitall([p for j, (p, _) in enumerate(pairs) if j != i])
                for _, c in pairs:
                    c()
            # all outstanding, in both root placements, completed in reverse order
            pairs = start_all(root_low) + start_all(not root_low)
            reqs = [p for p, _ in pairs]
            Request.Waitall(reqs[::-1])
            for _, c in pairs:
                c()
            # blocking calls still work after
            assert ic.allgather(rank) == theirs
        # progress while blocked elsewhere: world rank 0 (the low leader) sits in a
        # blocking recv that world rank k sends only once its Iallreduce is done
        ar = np.zeros(2)
        req = ic.Iallreduce(np.full(2, float(rank)), ar)
        if rank == 0:
            assert comm.recv(source=k, tag=9) == "done"
        req.Wait()
        if rank == k:
            comm.send("done", dest=0, tag=9)
        assert ar.tolist() == [float(T.sum())] * 2, ar
        print("NB-OK", rank, flush=True)
        """,
        timeout=150,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("n", "k", "scenario"),
    [
        (3, 1, "bcast"),
        (4, 3, "bcast"),
        (3, 2, "barrier"),
        (4, 1, "allreduce"),
    ],
)
def test_blocking_and_nonblocking_do_not_match(run_mpi, n, k, scenario):
    run(
        run_mpi,
        n,
        f"""
        k, scenario = {k}, {scenario!r}
        ic, low, local = make(k)
        mine, theirs = members(k, low)

        def mismatched():
            if scenario == "bcast":
                ra = root_arg(ic, low, 0)
                buf = np.zeros(4)
                if low:
                    ic.Bcast(buf, root=ra)
                else:
                    ic.Ibcast(buf, root=ra).Wait()
            elif scenario == "barrier":
                ic.Barrier() if low else ic.Ibarrier().Wait()
            else:
                out = np.zeros(2)
                if low:
                    ic.Iallreduce(np.ones(2), out).Wait()
                else:
                    ic.Allreduce(np.ones(2), out)

        where = None
        try:
            mismatched()
        except MPI.Exception as exc:
            where = ("call", exc)
        if where is None:
            try:
                ic.Barrier()
            except MPI.Exception as exc:
                where = ("next", exc)
        assert where is not None, f"rank {{rank}}: no error from the mismatch"
        kind, exc = where
        assert exc.Get_error_class() == MPI.ERR_NOT_SAME, (exc.Get_error_class(), str(exc))
        assert "mismatch" in str(exc), str(exc)
        print(f"MISMATCH {{rank}} {{kind}}: {{exc}}", flush=True)
        comm.send(("after", rank), dest=nxt, tag=5)
        assert comm.recv(source=prv, tag=5) == ("after", prv)
        """,
    )
