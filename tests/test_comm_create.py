"""Communicator constructors on real ranks: Dup, Idup, Create, Create_group, Split, Split_type.

Split orders by key, then by old rank, and ``UNDEFINED`` gives ``COMM_NULL``;
Compare tells IDENT, CONGRUENT (a Dup), SIMILAR and UNEQUAL apart; traffic on a
new communicator never matches the parent's (not even ``ANY_SOURCE``/``ANY_TAG``
receives), for point-to-point, blocking, nonblocking and persistent collectives;
Create accepts disjoint groups; Create_group is called by the group's members
only, and disjoint groups building communicators at the same time, in different
orders, get distinct working communicators; many Dup/Free cycles neither leak nor
reuse a live context, and a context reused by a different set of ranks starts its
collectives in step. Rules: INVENTORY §5.2 G-11..G-17, G-19, G-20.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

PRELUDE = (
    MPI_PRELUDE
    + '''
from ipympi.core import contexts as _contexts


def check_comm(c, members):
    """``c`` has the world ranks ``members`` in that order and works."""
    assert c != MPI.COMM_NULL
    assert c.Get_size() == len(members), (c.Get_size(), members)
    assert c.Get_rank() == members.index(rank), (c.Get_rank(), members)
    assert c.allgather(rank) == list(members), (c.allgather(rank), members)
    n, r = c.Get_size(), c.Get_rank()
    got = c.sendrecv(("p2p", rank), (r + 1) % n, 5, None, (r - 1) % n, 5)
    assert got == ("p2p", members[(r - 1) % n]), got
    assert c.Get_group().Translate_ranks(list(range(n)), MPI.COMM_WORLD.Get_group()) == list(
        members
    )


def live_contexts(comms):
    ctxs = [c._impl.context for c in comms if c]
    assert len(set(ctxs)) == len(ctxs), ctxs
    return ctxs
'''
)

NPROCS = [1, 2, 3, 4]


def run(run_mpi, n, body, timeout=60):
    proc = run_mpi(n, mpi_program(PRELUDE, body), timeout=timeout)
    assert_ok(proc, n)
    return proc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_split_ordering_and_undefined(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        # ranks of one color ordered by key, ties broken by old rank
        for color_of, key_of in [
            (lambda r: r % 2, lambda r: -r),
            (lambda r: 0, lambda r: r // 2),
            (lambda r: r // 2, lambda r: 7),
            (lambda r: 3 * (r % 2), lambda r: (r * 5) % 3),
        ]:
            new = comm.Split(color_of(rank), key_of(rank))
            mine = [r for r in range(size) if color_of(r) == color_of(rank)]
            mine.sort(key=lambda r: (key_of(r), r))
            check_comm(new, mine)
            assert new.Get_name() == ""
            new.Free()
            assert new == MPI.COMM_NULL

        # UNDEFINED gives COMM_NULL; the others still get theirs
        new = comm.Split(MPI.UNDEFINED if rank % 2 else 1, 0)
        if rank % 2:
            assert new == MPI.COMM_NULL and not new
        else:
            check_comm(new, list(range(0, size, 2)))
        raises(MPI.ERR_ARG, comm.Split, -5)
        raises(MPI.ERR_COMM, MPI.COMM_NULL.Split, 0)

        # Split_type: every rank here is on one host
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=-rank)
        check_comm(shared, list(range(size))[::-1])
        assert MPI.COMM_SELF.Split_type(MPI.COMM_TYPE_SHARED).Get_size() == 1
        none = comm.Split_type(MPI.UNDEFINED if rank == 0 else MPI.COMM_TYPE_SHARED)
        if rank == 0:
            assert none == MPI.COMM_NULL
        else:
            check_comm(none, list(range(1, size)))
        raises(MPI.ERR_ARG, comm.Split_type, 12345)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_dup_compare_group(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        dup = comm.Dup()
        check_comm(dup, list(range(size)))
        assert comm.Compare(comm) == MPI.IDENT
        assert MPI.Comm.Compare(comm, MPI.Comm(comm)) == MPI.IDENT
        assert comm.Compare(dup) == MPI.CONGRUENT == dup.Compare(comm)
        assert MPI.Comm.Compare(comm, dup) == MPI.CONGRUENT
        rev = comm.Split(0, -rank)
        assert comm.Compare(rev) == (MPI.SIMILAR if size > 1 else MPI.CONGRUENT)
        half = comm.Split(rank % 2, 0)
        assert comm.Compare(half) == (MPI.UNEQUAL if size > 1 else MPI.CONGRUENT)
        assert comm.Compare(MPI.COMM_SELF) == (MPI.UNEQUAL if size > 1 else MPI.CONGRUENT)
        raises(MPI.ERR_COMM, comm.Compare, MPI.COMM_NULL)
        raises(MPI.ERR_COMM, MPI.COMM_NULL.Dup)

        # Dup of a Dup, Dup_with_info, Idup
        dd = dup.Dup()
        assert dd.Compare(comm) == MPI.CONGRUENT and dd.Compare(dup) == MPI.CONGRUENT
        assert type(dd) is MPI.Intracomm and dd.Is_intra() and not dd.Is_inter()
        wi = comm.Dup_with_info(MPI.INFO_NULL)
        check_comm(wi, list(range(size)))
        new, req = comm.Idup()
        assert isinstance(req, MPI.Request)
        req.Wait()
        assert not req
        check_comm(new, list(range(size)))

        # the group of a communicator
        g = rev.Get_group()
        assert g.Get_size() == size and g.Get_rank() == size - 1 - rank
        assert rev.group.Compare(comm.group) == (MPI.SIMILAR if size > 1 else MPI.IDENT)

        # new communicators have no name and inherit the error handler
        assert dup.Get_name() == "" and comm.Get_name() == "MPI_COMM_WORLD"
        dup.Set_name("mine")
        assert dup.Dup().Get_name() == ""
        seen = []
        handler = MPI.Comm.Create_errhandler(lambda c, code: seen.append(code))
        dup.Set_errhandler(handler)
        child = dup.Split(0, 0)
        assert child.Get_errhandler() == dup.Get_errhandler()
        try:
            child.Send(b"x", size + 3)
        except MPI.Exception:
            pass
        assert seen == [MPI.ERR_RANK], seen
        for c in (dup, rev, half, dd, wi, new, child):
            c.Free()
        raises(MPI.ERR_COMM, MPI.COMM_WORLD.Free)
        raises(MPI.ERR_COMM, MPI.COMM_SELF.Free)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_traffic_isolated_from_parent(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        dup = comm.Dup()
        buf = bytearray(64)
        wild = comm.Irecv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
        # point-to-point and collectives on the Dup, and a new communicator built
        dup.send(("dup", rank), nxt, 0)
        assert dup.recv(None, prv, 0) == ("dup", prv)
        assert dup.allreduce(rank) == size * (size - 1) // 2
        assert dup.bcast("b" if rank == 0 else None) == "b"
        sub = dup.Split(rank % 2, rank)
        sub.barrier()
        grp = comm.Create_group(comm.Get_group(), tag=0)
        grp.barrier()
        time.sleep(0.2)
        assert not wild.Test(), "traffic of another communicator matched a parent receive"
        comm.Barrier()  # nobody sends on the parent before everyone has looked
        comm.Send(b"parent", nxt, 77)
        st = MPI.Status()
        wild.Wait(st)
        assert bytes(buf[:6]) == b"parent" and st.Get_source() == prv and st.Get_tag() == 77

        # collectives: a pending nonblocking collective on the parent and blocking,
        # nonblocking and persistent collectives on the Dup do not meet
        parent_req = comm.Ibarrier()
        arr = np.full(4, rank, "i8")
        out = np.empty(4, "i8")
        dup.Allreduce(arr, out)
        assert (out == size * (size - 1) // 2).all()
        val = np.array([rank * 10 if rank == size - 1 else -1], "i8")
        dup.Ibcast(val, root=size - 1).Wait()
        assert val[0] == (size - 1) * 10
        pers = dup.Allreduce_init(arr, out, MPI.MAX)
        for i in range(3):
            arr[:] = rank + i
            pers.Start()
            pers.Wait()
            assert (out == size - 1 + i).all()
        pers.Free()
        parent_req.Wait()
        # collectives interleaved on parent and Dup, in opposite order of starting
        r1 = comm.Iallreduce(np.array([1], "i8"), a := np.empty(1, "i8"))
        r2 = dup.Iallreduce(np.array([2], "i8"), b := np.empty(1, "i8"))
        MPI.Request.Waitall([r2, r1])
        assert a[0] == size and b[0] == 2 * size
        for c in (dup, sub, grp):
            c.Free()
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_create(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        world_group = comm.Get_group()
        evens = world_group.Incl(list(range(0, size, 2)))
        new = comm.Create(evens)
        if rank % 2 == 0:
            check_comm(new, list(range(0, size, 2)))
            assert comm.Compare(new) == (MPI.CONGRUENT if size == 1 else MPI.UNEQUAL)
        else:
            assert new == MPI.COMM_NULL
        # disjoint groups: each rank passes its own parity's group, reversed
        mine = [r for r in range(size) if r % 2 == rank % 2][::-1]
        new2 = comm.Create(world_group.Incl(mine))
        check_comm(new2, mine)
        # GROUP_EMPTY everywhere: COMM_NULL everywhere
        assert comm.Create(MPI.GROUP_EMPTY) == MPI.COMM_NULL
        # a Create on a Create'd communicator
        new3 = new2.Create(new2.Get_group().Incl([0]))
        if new2.Get_rank() == 0:
            check_comm(new3, [rank])
        else:
            assert new3 == MPI.COMM_NULL
        raises(MPI.ERR_GROUP, comm.Create, MPI.GROUP_NULL)
        if size > 1:
            # world rank 0 is not in the second half's communicator
            other = comm.Split(int(rank >= size // 2), 0)
            if rank >= size // 2:
                raises(MPI.ERR_GROUP, other.Create, world_group.Incl([0]))
        live_contexts([new, new2, new3])
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_create_group(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        wg = comm.Get_group()
        # only the members call; the order of the group is the order of the new ranks
        members = list(range(size))[::-1][: max(1, size - 1)]
        if rank in members:
            new = comm.Create_group(wg.Incl(members), tag=3)
            check_comm(new, members)
            new.Free()
        # non-members get COMM_NULL locally; GROUP_NULL, foreign ranks and bad tags fail
        assert comm.Create_group(MPI.GROUP_EMPTY) == MPI.COMM_NULL
        raises(MPI.ERR_GROUP, comm.Create_group, MPI.GROUP_NULL)
        raises(MPI.ERR_TAG, comm.Create_group, wg, -1)
        raises(MPI.ERR_TAG, comm.Create_group, wg, MPI.ANY_TAG)
        if size > 1:
            sub = comm.Split(int(rank == 0), 0)
            if rank != 0:
                raises(MPI.ERR_GROUP, sub.Create_group, wg)

        # disjoint groups create communicators at the same time, in different orders
        evens = [r for r in range(size) if r % 2 == 0]
        odds = [r for r in range(size) if r % 2 == 1]
        mine = evens if rank % 2 == 0 else odds
        made = []
        if rank % 2 == 0:
            made.append(comm.Create_group(wg.Incl(mine), tag=1))
            made.append(comm.Create_group(wg.Incl(mine[::-1]), tag=2))
            made.append(made[0].Dup())
        else:
            time.sleep(0.1)
            made.append(comm.Create_group(wg.Incl(mine[::-1]), tag=2))
            made.append(comm.Create_group(wg.Incl(mine), tag=1))
            made.append(made[1].Create_group(made[1].Get_group(), tag=9))
        live_contexts(made + [comm, MPI.COMM_SELF])
        if rank % 2 == 0:
            check_comm(made[0], mine)
            check_comm(made[1], mine[::-1])
            check_comm(made[2], mine)
        else:
            check_comm(made[0], mine[::-1])
            check_comm(made[1], mine)
            check_comm(made[2], mine)
        # all the new communicators are usable at once, in any order
        for c in made[::-1]:
            assert c.allreduce(1) == len(mine)

        # overlapping groups one after the other (same order on common members)
        if size >= 3:
            g1, g2 = [0, 1, 2], [2, 0]
            got = []
            for g in (g1, g2):
                if rank in g:
                    got.append(comm.Create_group(wg.Incl(g), tag=4))
            for c, g in zip(got, [g for g in (g1, g2) if rank in g]):
                check_comm(c, g)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_dup_free_cycles_do_not_leak_or_reuse(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        engine = comm._engine
        start = len(_contexts.in_use(engine))
        for i in range(200):
            d = comm.Dup()
            if i % 20 == 0:
                assert d.allreduce(i) == i * size
            d.Free()
        assert len(_contexts.in_use(engine)) <= start + 1, _contexts.in_use(engine)

        # a stack of live communicators: contexts stay distinct while some are freed
        live = []
        for i in range(60):
            parent = live[i % len(live)] if live and i % 3 else comm
            live.append(parent.Dup() if i % 2 else parent.Split(0, -rank))
            if i % 5 == 4:
                live.pop(i % len(live)).Free()
            live_contexts(live + [comm, MPI.COMM_SELF])
        for c in live:
            assert c.allreduce(1) == size
            c.Free()

        # a context freed by one set of ranks and reused by another starts in step:
        # the halves run different numbers of collectives on the same context id
        half = comm.Split(rank % 2, 0)
        for _ in range(3 + 4 * (rank % 2)):
            half.barrier()
        ctx_half = half._impl.context
        half.Free()
        comm.Barrier()  # every half's collectives are over: the context is free everywhere
        again = comm.Dup()
        assert again._impl.context == ctx_half, (again._impl.context, ctx_half)
        for i in range(3):
            assert again.allreduce(rank) == size * (size - 1) // 2
            again.Ibarrier().Wait()
        again.Free()

        # operations pending at Free complete normally
        d = comm.Dup()
        rreq = d.irecv(source=prv, tag=3)
        breq = d.Ibarrier()
        d.Free()
        assert d == MPI.COMM_NULL
        time.sleep(0.05 * rank)
        comm.Barrier()
        other = comm.Dup()
        assert other.allreduce(1) == size
        breq.Wait()
        if size > 1:
            comm.send("for the freed Dup", nxt, 3)  # on the parent: must not match
        assert not rreq.Get_status()
        if size > 1:
            assert comm.recv(None, prv, 3) == "for the freed Dup"
        rreq.Cancel()
        rreq.Wait()
        other.Free()

        # a receive still pending on a freed communicator keeps its context busy
        if size > 1:
            d = comm.Dup()
            ctx_d = d._impl.context
            req = d.irecv(source=prv, tag=8)
            d.Free()
            other = comm.Dup()
            assert other._impl.context != ctx_d
            other.send("on other", nxt, 8)
            comm.Barrier()
            d2 = comm.Dup()  # the context is still busy: not reused either
            assert d2._impl.context != ctx_d
            assert other.recv(None, prv, 8) == "on other"
            assert not req.Get_status()
            req.Cancel()
            req.Wait()
            comm.Barrier()
            d3 = comm.Dup()  # now it is free again
            assert d3._impl.context == ctx_d, (d3._impl.context, ctx_d)
            for c in (other, d2, d3):
                c.Free()
        """,
    )


def test_a_new_context_keeps_early_mismatch_news_and_drops_stale_news() -> None:
    # A rank may hear of a mismatch on a new communicator before it has finished
    # creating it (its other members ran and failed a collective already); that news
    # must survive the context's installation, while news about the context's former
    # communicator (sequence numbers before the new base) must not.
    from ipympi.core import contexts as _contexts
    from ipympi.progress.engine import Engine

    engine = Engine(0, 1, None)
    context = 40
    coll = context + 1
    engine.ledger.errors[coll] = (8, "collective mismatch (collective #8 ...)")
    _contexts.install(engine, context, 8)
    assert engine.ledger.errors[coll][0] == 8
    assert engine.ledger.next[coll] == 8

    engine.ledger.errors[coll] = (3, "about the former communicator")
    _contexts.install(engine, context, 8)
    assert coll not in engine.ledger.errors
