"""Process topologies: Compute_dims, Cartesian, graph and distributed graph communicators.

Compute_dims gives balanced, non-increasing dimensions and keeps the given ones;
Create_cart keeps ranks, numbers the grid row-major and gives COMM_NULL to the
processes it leaves out; Get_cart_rank wraps periodic coordinates; Shift gives
PROC_NULL off a non-periodic edge and wraps a periodic one; Sub splits the grid
into sub-grids; Dup keeps the topology, Split does not; graphs answer with the
arrays they were built from; the neighbourhood collectives follow the standard's
neighbour order; errors have the standard's classes. Rules: INVENTORY §6.2
TP-1..TP-13. The heat equation example matches its serial solution.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import MPI_PRELUDE, ROOT, _env, assert_ok, mpi_program

from ipympi import MPI

NPROCS = [1, 2, 3, 4, 5]


def run(run_mpi, n, body, timeout=60):
    proc = run_mpi(n, mpi_program(MPI_PRELUDE, body), timeout=timeout)
    assert_ok(proc, n)
    return proc


# -- Compute_dims (local) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nnodes", "dims", "expected"),
    [
        (6, [0, 0], [3, 2]),
        (7, [0, 0, 0], [7, 1, 1]),
        (6, [0, 3, 0], [2, 3, 1]),
        (12, 2, [4, 3]),
        (16, 3, [4, 2, 2]),
        (24, 3, [4, 3, 2]),
        (64, 3, [4, 4, 4]),
        (1, 2, [1, 1]),
        (5, 1, [5]),
        (30, [0, 2, 0], [5, 2, 3]),
        (8, [2, 0, 2], [2, 2, 2]),
        (6, [2, 3], [2, 3]),
        (1, [], []),
        (0, [0, 0], [0, 0]),
        (1000000, 3, [100, 100, 100]),
    ],
)
def test_compute_dims(nnodes, dims, expected) -> None:
    got = MPI.Compute_dims(nnodes, dims)
    assert got == expected
    free = [i for i, d in enumerate([0] * dims if isinstance(dims, int) else dims) if d == 0]
    assert [got[i] for i in free] == sorted((got[i] for i in free), reverse=True)


@pytest.mark.parametrize(
    ("nnodes", "dims", "error"),
    [
        (7, [0, 3, 0], MPI.ERR_DIMS),
        (6, [2, 2], MPI.ERR_DIMS),
        (6, [-1, 0], MPI.ERR_DIMS),
        (6, -1, MPI.ERR_DIMS),
        (-6, 2, MPI.ERR_ARG),
        (4, 0, MPI.ERR_DIMS),
        (4, [], MPI.ERR_DIMS),
        (0, [2], MPI.ERR_DIMS),
    ],
)
def test_compute_dims_errors(nnodes, dims, error) -> None:
    with pytest.raises(MPI.Exception) as info:
        MPI.Compute_dims(nnodes, dims)
    assert info.value.Get_error_class() == error


# -- Cartesian ---------------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_cart_create_coords_rank(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        dims = MPI.Compute_dims(size, 2)
        cart = comm.Create_cart(dims, periods=[True, False])
        assert isinstance(cart, MPI.Cartcomm) and isinstance(cart, MPI.Intracomm)
        assert cart.Get_topology() == cart.topology == MPI.CART
        assert comm.Get_topology() == MPI.UNDEFINED
        assert cart.Get_size() == size and cart.Get_rank() == rank  # reorder: ranks kept
        assert cart.Get_dim() == cart.ndim == cart.dim == 2
        coords = [rank // dims[1], rank % dims[1]]  # row-major
        assert cart.Get_topo() == (dims, [1, 0], coords) == cart.topo
        assert (cart.dims, cart.periods, cart.coords) == (dims, [1, 0], coords)
        for r in range(size):
            c = cart.Get_coords(r)
            assert c == [r // dims[1], r % dims[1]]
            assert cart.Get_cart_rank(c) == r
            # the periodic first dimension wraps, either way
            assert cart.Get_cart_rank([c[0] + dims[0], c[1]]) == r
            assert cart.Get_cart_rank([c[0] - 3 * dims[0], c[1]]) == r
        raises(MPI.ERR_RANK, cart.Get_cart_rank, [0, dims[1]])
        raises(MPI.ERR_RANK, cart.Get_cart_rank, [0, -1])
        raises(MPI.ERR_RANK, cart.Get_coords, size)
        raises(MPI.ERR_RANK, cart.Get_coords, -1)
        raises(MPI.ERR_ARG, cart.Get_cart_rank, [0])
        # the new communicator works and has its own context
        assert cart.allgather(rank) == list(range(size))
        assert cart._impl.context != comm._impl.context
        assert cart.Get_name() == ""

        # the 2x2 example of the standard
        if size >= 4:
            sq = comm.Create_cart([2, 2])
            if rank < 4:
                assert [sq.Get_cart_rank(c) for c in ([0, 0], [0, 1], [1, 0], [1, 1])] == [
                    0, 1, 2, 3]
                assert sq.periods == [0, 0]
                sq.Free()
            else:
                assert sq == MPI.COMM_NULL

        # a 3-D grid and a 1-D grid
        d3 = MPI.Compute_dims(size, 3)
        cube = comm.Create_cart(d3, [False, True, False])
        assert cube.Get_coords(rank) == [
            rank // (d3[1] * d3[2]), (rank // d3[2]) % d3[1], rank % d3[2]]
        ring = comm.Create_cart([size], [True])
        assert ring.Get_topo() == ([size], [1], [rank])
        cube.Free(); ring.Free(); cart.Free()
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_cart_extra_ranks_get_comm_null(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        for nodes in range(1, size + 1):
            cart = comm.Create_cart([nodes])
            if rank < nodes:
                assert cart != MPI.COMM_NULL and cart.Get_size() == nodes
                assert cart.Get_rank() == rank
                assert cart.allgather(rank) == list(range(nodes))
                cart.Free()
            else:
                assert cart == MPI.COMM_NULL and not cart
                assert isinstance(cart, MPI.Cartcomm)
            assert comm.Cart_map([nodes]) == (rank if rank < nodes else MPI.UNDEFINED)
        # an empty grid has one process
        zero = comm.Create_cart([])
        if rank == 0:
            assert zero.Get_size() == 1 and zero.Get_topo() == ([], [], [])
        else:
            assert zero == MPI.COMM_NULL
        # the group is unchanged after all this
        assert comm.allgather(rank) == list(range(size))
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_cart_shift(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        # non-periodic line: PROC_NULL beyond the ends
        line = comm.Create_cart([size], [False])
        src, dst = line.Shift(0, 1)
        assert src == (rank - 1 if rank > 0 else MPI.PROC_NULL)
        assert dst == (rank + 1 if rank < size - 1 else MPI.PROC_NULL)
        assert line.Shift(0, -1) == (dst, src)
        assert line.Shift(0, 0) == (rank, rank)
        far = line.Shift(0, size)
        assert far == (MPI.PROC_NULL, MPI.PROC_NULL)
        # Sendrecv along a shift is deadlock-free, PROC_NULL ends included
        got = line.sendrecv(rank, dst, 3, None, src, 3)
        assert got == (rank - 1 if rank > 0 else None), got

        # periodic ring: wraps, any displacement
        ring = comm.Create_cart([size], [True])
        for disp in (1, 2, -1, size + 1, -3 * size):
            assert ring.Shift(0, disp) == ((rank - disp) % size, (rank + disp) % size)
        src, dst = ring.Shift(0, 1)
        assert ring.sendrecv(rank, dst, 4, None, src, 4) == (rank - 1) % size

        # 2-D: the shift moves one coordinate only
        dims = MPI.Compute_dims(size, 2)
        grid = comm.Create_cart(dims, [False, True])
        i, j = grid.coords
        for d in (0, 1):
            for disp in (1, -1, 2):
                src, dst = grid.Shift(d, disp)
                for got, k in ((src, -disp), (dst, disp)):
                    c = [i, j]
                    c[d] += k
                    if d == 0 and not 0 <= c[0] < dims[0]:
                        assert got == MPI.PROC_NULL
                    else:
                        assert got == grid.Get_cart_rank(c)
        raises(MPI.ERR_DIMS, grid.Shift, 2, 1)
        raises(MPI.ERR_DIMS, grid.Shift, -1, 1)
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_cart_sub(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        dims = MPI.Compute_dims(size, 3)
        cart = comm.Create_cart(dims, [True, False, True])
        c = cart.coords
        # keep dims 0 and 2: one sub-grid per value of coordinate 1
        sub = cart.Sub([True, False, True])
        assert isinstance(sub, MPI.Cartcomm) and sub.topology == MPI.CART
        assert sub.Get_topo() == ([dims[0], dims[2]], [1, 1], [c[0], c[2]])
        assert sub.Get_size() == dims[0] * dims[2]
        mine = [r for r in range(size) if cart.Get_coords(r)[1] == c[1]]
        assert sub.allgather(rank) == mine  # ordered by the kept coordinates
        assert sub.Get_rank() == c[0] * dims[2] + c[2]
        # keep only the last dimension: lines of size dims[2]
        line = cart.Sub([False, False, True])
        assert line.Get_topo() == ([dims[2]], [1], [c[2]])
        assert line.allgather(rank) == [
            r for r in range(size) if cart.Get_coords(r)[:2] == c[:2]]
        # keep everything: the same grid; keep nothing: a single process
        whole = cart.Sub([True, True, True])
        assert whole.Get_topo() == cart.Get_topo() and whole.allgather(rank) == list(range(size))
        alone = cart.Sub([False, False, False])
        assert alone.Get_size() == 1 and alone.Get_topo() == ([], [], [])
        # sub-grids are independent communicators
        assert len({cart._impl.context, sub._impl.context, line._impl.context}) == 3
        raises(MPI.ERR_ARG, cart.Sub, [True])
        for x in (sub, line, whole, alone, cart):
            x.Free()
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_cart_dup_split_and_errors(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        cart = comm.Create_cart([size, 1], [False, True])
        dup = cart.Dup()
        assert isinstance(dup, MPI.Cartcomm) and dup.topology == MPI.CART
        assert dup.Get_topo() == cart.Get_topo() and dup.Shift(0, 1) == cart.Shift(0, 1)
        assert dup._impl.context != cart._impl.context
        assert dup.allgather(rank) == list(range(size))
        idup, req = cart.Idup()
        req.Wait()
        assert idup.topology == MPI.CART and idup.Get_topo() == cart.Get_topo()
        # a generic handle reports the topology too
        assert MPI.Comm(cart).Get_topology() == MPI.CART
        # Split and Create_cart's parent have no topology
        plain = cart.Split(0, rank)
        assert plain.topology == MPI.UNDEFINED and not isinstance(plain, MPI.Cartcomm)
        assert MPI.COMM_SELF.topology == MPI.UNDEFINED

        # errors, through the communicator's error handler
        raises(MPI.ERR_ARG, comm.Create_cart, [size + 1])
        raises(MPI.ERR_ARG, comm.Cart_map, [size + 1])
        raises(MPI.ERR_DIMS, comm.Create_cart, [0])
        raises(MPI.ERR_DIMS, comm.Create_cart, [-1, 2])
        try:  # periods of the wrong length: a ValueError, as in mpi4py
            comm.Create_cart([size], [True, False])
            raise AssertionError("Create_cart took 2 periods for 1 dimension")
        except ValueError:
            pass
        # a handle class must suit the communicator (as mpi4py); the methods still
        # check the topology of handles built without that check
        for cls, other in ((MPI.Cartcomm, comm), (MPI.Graphcomm, cart), (MPI.Topocomm, comm)):
            try:
                cls(other)
            except TypeError:
                pass
            else:
                raise AssertionError(f"{cls.__name__}({other!r}) did not raise TypeError")
        def view(cls, other):
            return cls._from_impl(other._impl)
        raises(MPI.ERR_TOPOLOGY, view(MPI.Cartcomm, comm).Shift, 0, 1)
        raises(MPI.ERR_TOPOLOGY, view(MPI.Cartcomm, comm).Get_topo)
        raises(MPI.ERR_TOPOLOGY, view(MPI.Graphcomm, cart).Get_dims)
        raises(MPI.ERR_TOPOLOGY, view(MPI.Distgraphcomm, cart).Get_dist_neighbors)
        raises(MPI.ERR_TOPOLOGY, view(MPI.Topocomm, comm).neighbor_allgather, 1)
        raises(MPI.ERR_COMM, MPI.Cartcomm().Get_topo)
        seen = []
        eh = MPI.Comm.Create_errhandler(lambda c, code: seen.append(code))
        cart.Set_errhandler(eh)
        raises(MPI.ERR_RANK, cart.Get_coords, size)
        assert [MPI.Get_error_class(c) for c in seen] == [MPI.ERR_RANK]
        # differing arguments are detected on every rank
        if size > 1:
            raises(MPI.ERR_NOT_SAME, comm.Create_cart, [1 + rank % 2])
        assert comm.allgather(rank) == list(range(size))
        for x in (dup, idup, plain, cart):
            x.Free()
        """,
    )


# -- graphs -------------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_graph(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        # a ring with a chord from every node to node 0 (standard: cumulative index)
        nbrs = [sorted({(r - 1) % size, (r + 1) % size, 0} - ({r} if size > 1 else set()))
                for r in range(size)]
        index = list(np.cumsum([len(x) for x in nbrs]))
        edges = [e for x in nbrs for e in x]
        g = comm.Create_graph(index, edges)
        assert isinstance(g, MPI.Graphcomm) and g.topology == MPI.GRAPH
        assert g.Get_dims() == (size, len(edges)) == g.dims
        assert (g.nnodes, g.nedges) == (size, len(edges))
        assert g.Get_topo() == (index, edges) == (g.index, g.edges)
        for r in range(size):
            assert g.Get_neighbors(r) == nbrs[r]
            assert g.Get_neighbors_count(r) == len(nbrs[r])
        assert g.neighbors == nbrs[rank] and g.nneighbors == len(nbrs[rank])
        assert g.inedges == g.outedges == nbrs[rank]
        raises(MPI.ERR_RANK, g.Get_neighbors, size)
        assert g.Dup().Get_topo() == (index, edges)
        # fewer nodes than processes: COMM_NULL for the others
        # (each node has one edge, to node 0: index 1, 2, ...)
        h = comm.Create_graph(list(range(1, size)), [0] * (size - 1))
        assert (h == MPI.COMM_NULL) == (rank == size - 1)
        assert comm.Graph_map(list(range(1, size)), [0] * (size - 1)) == (
            rank if rank < size - 1 else MPI.UNDEFINED)
        # the usual adjacency-array form, with a leading 0, as mpi4py reads it
        s = comm.Create_graph([0] * (size + 1), [])
        assert s.Get_dims() == (size, 0) and s.Get_neighbors(rank) == []
        assert comm.Create_graph([0], []) == MPI.COMM_NULL  # no node at all
        raises(MPI.ERR_ARG, comm.Create_graph, list(range(1, size + 2)), [0] * (size + 1))
        raises(MPI.ERR_ARG, comm.Create_graph, [2, 1], [0, 0])
        raises(MPI.ERR_ARG, comm.Create_graph, [1], [])
        raises(MPI.ERR_RANK, comm.Create_graph, [1], [5])
        g.Free()
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_dist_graph(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        # adjacent: each rank lists its own neighbours (a directed ring plus rank 0)
        srcs = [(rank - 1) % size]
        dsts = [(rank + 1) % size]
        d = comm.Create_dist_graph_adjacent(srcs, dsts)
        assert isinstance(d, MPI.Distgraphcomm) and d.topology == MPI.DIST_GRAPH
        assert d.Get_dist_neighbors_count() == (1, 1, False)
        assert d.Get_dist_neighbors() == (srcs, dsts, None)
        assert d.inoutedges == (srcs, dsts) and d.degrees == (1, 1)
        assert d.neighbor_allgather(rank) == [(rank - 1) % size]
        w = comm.Create_dist_graph_adjacent(srcs, dsts, [rank], [rank + 1])
        assert w.Get_dist_neighbors() == (srcs, dsts, ([rank], [rank + 1]))
        assert w.Get_dist_neighbors_count() == (1, 1, True)
        e = comm.Create_dist_graph_adjacent([], [], MPI.WEIGHTS_EMPTY, MPI.WEIGHTS_EMPTY)
        assert e.Get_dist_neighbors() == ([], [], ([], []))
        assert e.neighbor_allgather(rank) == []

        # general: rank 0 specifies every edge r -> r+1, weighted by r
        if rank == 0:
            d2 = comm.Create_dist_graph(
                list(range(size)), [1] * size, [(r + 1) % size for r in range(size)],
                list(range(size)))
        else:
            d2 = comm.Create_dist_graph([], [], [], MPI.WEIGHTS_EMPTY)
        assert d2.Get_dist_neighbors() == (
            [(rank - 1) % size], [(rank + 1) % size], ([(rank - 1) % size], [rank]))
        assert d2.neighbor_alltoall([rank * 10]) == [((rank - 1) % size) * 10]
        # each rank specifies its own out-edges, to everyone
        d3 = comm.Create_dist_graph([rank], [size], list(range(size)))
        assert d3.Get_dist_neighbors() == (list(range(size)), list(range(size)), None)
        assert d3.neighbor_alltoall([(rank, r) for r in range(size)]) == [
            (r, rank) for r in range(size)]
        assert d3.Dup().topology == MPI.DIST_GRAPH
        raises(MPI.ERR_RANK, comm.Create_dist_graph_adjacent, [size], [])
        raises(MPI.ERR_TOPOLOGY, comm.Create_dist_graph_adjacent, [0], [0], [1], None)
        for args in (([0], [2], [0]), ([0], [1, 1], [0, 0]), ([0], [1], [0], [1, 2])):
            try:  # lists of the wrong length: a ValueError, as in mpi4py
                comm.Create_dist_graph(*args)
                raise AssertionError(f"Create_dist_graph{args} was taken")
            except ValueError:
                pass
        e = comm.Create_dist_graph_adjacent(None, None)
        assert e.Get_dist_neighbors() == ([], [], None)
        """,
    )


# -- neighbourhood collectives ----------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_neighbor_collectives_cart(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        def expected_in(cart):
            out = []
            for d in range(cart.ndim):
                out.extend(cart.Shift(d, 1))
            return out

        for dims, periods in [
            (MPI.Compute_dims(size, 2), [False, False]),
            (MPI.Compute_dims(size, 2), [True, True]),
            ([size], [True]),
            ([1, size, 1], [True, False, True]),
        ]:
            cart = comm.Create_cart(dims, periods)
            ins = expected_in(cart)
            k = len(ins)
            assert cart.inedges == cart.outedges == ins and cart.degrees == (k, k)
            # allgather: block i from in-neighbour i, PROC_NULL blocks untouched
            got = np.full(k, -7, dtype="i")
            cart.Neighbor_allgather(np.array([rank], dtype="i"), got)
            assert list(got) == [-7 if p == MPI.PROC_NULL else p for p in ins], (got, ins)
            assert cart.neighbor_allgather(rank) == [
                None if p == MPI.PROC_NULL else p for p in ins]
            # alltoall: block 2d goes in the negative direction, 2d+1 in the positive one;
            # what arrives from the negative neighbour is what it sent in the positive one
            send = np.array([100 * rank + j for j in range(k)], dtype="i")
            got = np.full(k, -7, dtype="i")
            cart.Neighbor_alltoall(send, got)
            want = [-7 if p == MPI.PROC_NULL else 100 * p + (j ^ 1) for j, p in enumerate(ins)]
            assert list(got) == want, (dims, periods, list(got), want)
            objs = cart.neighbor_alltoall([(rank, j) for j in range(k)])
            assert objs == [None if p == MPI.PROC_NULL else (p, j ^ 1)
                            for j, p in enumerate(ins)], objs
            # nonblocking and persistent forms
            got = np.full(k, -7, dtype="i")
            cart.Ineighbor_alltoall(send, got).Wait()
            assert list(got) == want
            got = np.full(2 * k, -7, dtype="i")
            req = cart.Ineighbor_allgather(np.array([rank, -rank], dtype="i"), got)
            req.Wait()
            assert list(got) == [x for p in ins for x in (
                (-7, -7) if p == MPI.PROC_NULL else (p, -p))]
            got = np.full(k, -7, dtype="i")
            req = cart.Neighbor_alltoall_init(send, got)
            for _ in range(2):
                req.Start(); req.Wait()
                assert list(got) == want
            req.Free()
            # v forms: in-neighbour i sends i+1 values
            counts = [j + 1 for j in range(k)]
            got = np.full(sum(counts), -7, dtype="i")
            sendv = np.concatenate([np.full((j ^ 1) + 1, rank, dtype="i") for j in range(k)]
                                   ) if k else np.zeros(0, dtype="i")
            cart.Neighbor_alltoallv([sendv, [(j ^ 1) + 1 for j in range(k)]], [got, counts])
            pos = 0
            for j, p in enumerate(ins):
                assert list(got[pos:pos + j + 1]) == [-7 if p == MPI.PROC_NULL else p] * (j + 1)
                pos += j + 1
            cart.Free()
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_neighbor_alltoallw_ring_at_absolute_addresses(run_mpi, n):
    # The ring of the HLRS course done with Neighbor_alltoallw: each rank sends its value
    # right and receives from the left, at addresses from Get_address relative to
    # MPI.BOTTOM; the unused directions have count 0 and displacement 0.
    run(
        run_mpi,
        n,
        """
        ring = comm.Create_cart([size], [True], reorder=True)
        me = ring.Get_rank()
        snd, rcv = np.array(me, dtype="i"), np.array(-1000, dtype="i")
        counts_s, displs_s = [0, 1], [0, MPI.Get_address(snd)]
        counts_r, displs_r = [1, 0], [MPI.Get_address(rcv), 0]
        total = 0
        for _ in range(size):
            ring.Neighbor_alltoallw((MPI.BOTTOM, counts_s, displs_s, [MPI.INT] * 2),
                                    (MPI.BOTTOM, counts_r, displs_r, [MPI.INT] * 2))
            np.copyto(snd, rcv)
            total += int(rcv)
        assert total == size * (size - 1) // 2, total
        # the same with buffers and byte displacements, the unused ones out of range
        got = np.full(2, -7, dtype="i")
        ring.Neighbor_alltoallw([np.array([me, me], dtype="i"), [0, 1], [999, 4], [MPI.INT] * 2],
                                [got, [1, 0], [0, -8], [MPI.INT] * 2])
        assert list(got) == [(me - 1) % size, -7], got
        """,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 3, 4])
def test_neighbor_collectives_graph(run_mpi, n):
    run(
        run_mpi,
        n,
        """
        nbrs = [sorted({(r - 1) % size, (r + 1) % size}) for r in range(size)]
        index = list(np.cumsum([len(x) for x in nbrs]))
        g = comm.Create_graph(index, [e for x in nbrs for e in x])
        mine = nbrs[rank]
        got = np.zeros(len(mine))
        g.Neighbor_allgather(np.array([float(rank)]), got)
        assert list(got) == [float(p) for p in mine]
        assert g.neighbor_alltoall([(rank, p) for p in mine]) == [(p, rank) for p in mine]
        # a distributed graph where rank r sends r+1 values to each out-neighbour
        d = comm.Create_dist_graph_adjacent(mine, mine)
        counts = [p + 1 for p in mine]
        got = np.zeros(sum(counts), dtype="i")
        g.Neighbor_allgatherv(np.full(rank + 1, rank, dtype="i"), [got, counts])
        assert list(got) == [p for p in mine for _ in range(p + 1)]
        got = np.zeros(sum(counts), dtype="i")
        d.Ineighbor_allgatherv(np.full(rank + 1, rank, dtype="i"), [got, counts]).Wait()
        assert list(got) == [p for p in mine for _ in range(p + 1)]
        """,
    )


# -- the example --------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_heat2d_example(n: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "60",
         "examples/heat2d.py"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(ROOT),
        env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "max |parallel - serial|" in line]
    assert len(lines) == 1, proc.stdout
    assert float(lines[0].rsplit("=", 1)[1]) < 1e-12, lines[0]
