"""``Idup``/``Idup_with_info`` on real ranks: truly nonblocking communicator duplication.

Idup starts the context agreement as a nonblocking collective and returns the new
handle with its request: a process may communicate on the parent before the
others have called Idup (the program from the standard's progress rule, which a
blocking Idup would deadlock), several Idups may be outstanding at once, on one
communicator or on overlapping ones in different orders, with blocking
constructors in between, and complete in any order, always with distinct
working communicators. Using the new communicator before its request completes
is an error (``ERR_COMM``). Idup behaves as if Dup ran at the call: the copy
callbacks run then, on the attributes as they are then, and the topology is
kept; a failing copy callback fails that process's Idup while the others get
their communicator. Idup does not match a blocking Dup (``ERR_NOT_SAME``).
INVENTORY §4.3 C-35, C-37, C-39 (progress), §5.2 G-13, G-26; MPI-3 ``MPI_COMM_IDUP``.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

PRELUDE = (
    MPI_PRELUDE
    + '''
from ipympi.core import contexts as _contexts


def check_dup(new, parent):
    """``new`` is a working duplicate of ``parent`` with its own context."""
    assert new != MPI.COMM_NULL and new.Compare(parent) == MPI.CONGRUENT
    assert new._impl.context != parent._impl.context
    n = new.Get_size()
    assert new.allgather(new.Get_rank()) == list(range(n))
    assert new.allreduce(1) == n


def distinct(comms):
    ctxs = [c._impl.context for c in comms]
    assert len(set(ctxs)) == len(ctxs), ctxs
'''
)

NPROCS = [1, 2, 3, 4, 5]


def run(run_mpi, n, body, timeout=60):
    proc = run_mpi(n, mpi_program(PRELUDE, body), timeout=timeout)
    assert_ok(proc, n)
    return proc


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_idup_does_not_block(run_mpi, n):
    """Rank 0 sends after its Idup; rank 1 calls Idup only once it has the message."""
    run(
        run_mpi,
        n,
        """
        if rank == 0:
            new, req = comm.Idup()
            comm.send("x", dest=1)
            req.Wait()
        elif rank == 1:
            y = comm.recv(source=0)
            assert y == "x"
            new, req = comm.Idup()
            req.Wait()
        else:
            new, req = comm.Idup()
            req.Wait()
        assert not req
        check_dup(new, comm)
        # the same with a blocking receive on the other side of the Idup, on a Dup
        d = comm.Dup()
        if rank == 1:
            new2, req = d.Idup()
            d.send("y", dest=0, tag=4)
            assert req.Test() in (True, False)
            req.Wait()
        else:
            if rank == 0:
                assert d.recv(source=1, tag=4) == "y"
            new2, req = d.Idup()
            req.Wait()
        check_dup(new2, d)
        distinct([comm, d, new, new2])
        """,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", NPROCS)
def test_using_the_new_communicator_early_is_an_error(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        kv = MPI.Comm.Create_keyval()
        if rank == 0:
            new, req = comm.Idup()
            if size > 1:  # nobody else has started: the request cannot be complete
                assert not req.Test()
                assert new != MPI.COMM_NULL
                for fn, args in [
                    (new.Get_rank, ()),
                    (new.barrier, ()),
                    (new.send, (1, 0)),
                    (new.Set_attr, (kv, 1)),
                    (new.Free, ()),
                    (new.Dup, ()),
                ]:
                    exc = raises(MPI.ERR_COMM, fn, *args)
                    assert "before its request completes" in str(exc), str(exc)
                repr(new)  # printable meanwhile
                comm.send("go", dest=1)
            req.Wait()
        else:
            if rank == 1:
                assert comm.recv(source=0) == "go"
            new, req = comm.Idup_with_info(MPI.INFO_NULL)
            req.Wait()
        check_dup(new, comm)
        new.Free()
        assert new == MPI.COMM_NULL
        """,
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", NPROCS)
def test_many_outstanding_in_any_order(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        import random

        # three on one communicator, completed in an order that differs by rank
        made = [comm.Idup() for _ in range(3)]
        reqs = [req for _, req in made]
        order = [(i + rank) % 3 for i in range(3)]
        for i in order:
            reqs[i].Wait()
        news = [c for c, _ in made]
        distinct(news + [comm, MPI.COMM_SELF])
        for c in news:
            check_dup(c, comm)

        # two communicators, started in opposite orders on even and odd ranks
        a, b = comm.Dup(), comm.Dup()
        if rank % 2 == 0:
            (na, ra), (nb, rb) = a.Idup(), b.Idup()
        else:
            (nb, rb), (na, ra) = b.Idup(), a.Idup()
        MPI.Request.Waitall([rb, ra] if rank % 3 else [ra, rb])
        check_dup(na, a)
        check_dup(nb, b)

        # rank 0 starts on A then B; the others finish B before they start A
        if rank == 0:
            (na, ra), (nb, rb) = a.Idup(), b.Idup()
            MPI.Request.Waitall([ra, rb])
        else:
            nb, rb = b.Idup()
            rb.Wait()
            na, ra = a.Idup()
            ra.Wait()
        check_dup(na, a)
        check_dup(nb, b)
        distinct(news + [na, nb, a, b, comm])

        # overlapping communicators, random interleavings, blocking constructors between
        subs = [comm.Split(rank % 2), comm.Split(rank // 2), comm.Dup(), comm.Split(0, -rank)]
        rng = random.Random(rank)
        for it in range(6):
            order = list(range(len(subs))) * 2
            rng.shuffle(order)
            pending = []
            for k, i in enumerate(order):
                pending.append((i, *subs[i].Idup()))
                if random.Random(it * 100 + k).random() < 0.3:  # the same on every rank
                    comm.Dup().Free()
            idx = list(range(len(pending)))
            rng.shuffle(idx)
            for j in idx:
                pending[j][2].Wait()
            distinct([c for _, c, _ in pending] + subs + [comm])
            for i, c, _ in sorted(pending, key=lambda p: p[0]):  # per-communicator order
                check_dup(c, subs[i])
            for _, c, _ in pending:
                c.Free()
        """,
        timeout=120,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", NPROCS)
def test_attributes_topology_and_freeing(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        seen = []

        def copy(old, keyval, value):
            seen.append(value)
            return value + 1

        kv = MPI.Comm.Create_keyval(copy_fn=copy)
        skip = MPI.Comm.Create_keyval()  # no copy callback: not copied
        d = comm.Dup()
        d.Set_attr(kv, 10)
        d.Set_attr(skip, "x")
        new, req = d.Idup()
        assert seen == [10], seen  # the callbacks run at the call
        d.Set_attr(kv, 20)  # later changes are not copied
        req.Wait()
        assert new.Get_attr(kv) == 11 and new.Get_attr(skip) is None
        check_dup(new, d)

        # a copy callback that fails on rank 0: its Idup fails, the others still complete
        def fragile(old, keyval, value):
            if rank == 0:
                raise ValueError("no copy here")
            return value

        kv2 = MPI.Comm.Create_keyval(copy_fn=fragile)
        d.Set_attr(kv2, 5)
        if rank == 0:
            try:
                d.Idup()
                raise AssertionError("Idup did not fail")
            except MPI.Exception as exc:
                assert "copy" in str(exc), str(exc)
            comm.Barrier()  # the agreement goes on in the background meanwhile
        else:
            other, req = d.Idup()
            comm.Barrier()
            req.Wait()
            assert other.Get_attr(kv2) == 5
        d.Delete_attr(kv2)

        # a Cartesian communicator keeps its topology
        cart = comm.Create_cart([size], [True])
        cdup, req = cart.Idup()
        req.Wait()
        assert isinstance(cdup, MPI.Cartcomm) and cdup.Get_topo() == cart.Get_topo()

        # the parent freed while its Idup is in progress
        p = comm.Dup()
        new2, req = p.Idup()
        p.Free()
        req.Wait()
        check_dup(new2, comm)

        # COMM_SELF, and no leak over many Idup/Free cycles
        selfdup, req = MPI.COMM_SELF.Idup()
        req.Wait()
        assert selfdup.Get_size() == 1 and selfdup.allreduce(3) == 3
        start = len(_contexts.in_use(comm._engine))
        for i in range(40):
            c, req = comm.Idup()
            req.Wait()
            if i % 10 == 0:
                assert c.allreduce(i) == i * size
            c.Free()
        comm.Barrier()
        assert len(_contexts.in_use(comm._engine)) <= start + 1, _contexts.in_use(comm._engine)
        """,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 1), (4, 2), (5, 3)])
def test_intercommunicator_idup(run_mpi, n, k):
    run(
        run_mpi,
        n,
        f"""
        k = {k}
        low = rank < k
        local = comm.Split(0 if low else 1, rank)
        ic = local.Create_intercomm(0, comm, k if low else 0, 7)
        theirs = list(range(k, size)) if low else list(range(k))
        kv = MPI.Comm.Create_keyval(copy_fn=lambda old, key, value: value * 2)
        ic.Set_attr(kv, rank)
        # the low leader communicates on COMM_WORLD between its Idup and the Wait
        if rank == 0:
            new, req = ic.Idup()
            comm.send("started", dest=k)
            req.Wait()
        else:
            if rank == k:
                assert comm.recv(source=0) == "started"
            new, req = ic.Idup()
            req.Wait()
        assert isinstance(new, MPI.Intercomm) and new.Is_inter()
        assert new.Compare(ic) == MPI.CONGRUENT and new.remote_size == len(theirs)
        assert new._impl.context != ic._impl.context
        assert new.Get_attr(kv) == 2 * rank
        assert new.allgather(rank) == theirs
        # two outstanding at once, waited in opposite orders by the two groups
        (x, rx), (y, ry) = ic.Idup(), ic.Idup()
        MPI.Request.Waitall([rx, ry] if low else [ry, rx])
        assert x.allgather(rank) == theirs and y.allgather(rank) == theirs
        assert len({{c._impl.context for c in (ic, new, x, y)}}) == 4
        """,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [2, 3])
def test_idup_does_not_match_dup(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        error = None
        try:
            if rank == 0:
                new, req = comm.Idup()
                req.Wait()
            else:
                comm.Dup()
        except MPI.Exception as exc:
            error = exc
        if error is None:
            try:
                comm.Barrier()
            except MPI.Exception as exc:
                error = exc
        assert error is not None and error.Get_error_class() == MPI.ERR_NOT_SAME, error
        assert "Idup" in str(error), error  # the mismatch names what rank 0 called
        # point-to-point still works
        comm.send(("after", rank), dest=nxt, tag=5)
        assert comm.recv(source=prv, tag=5) == ("after", prv)
        """,
    )
