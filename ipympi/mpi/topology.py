"""Process topologies: ``Compute_dims``, the topology descriptions, and their constructors.

A topology is a description cached on a communicator (its ``CommImpl.topo``):
:class:`CartTopo` (dimensions and periodicity), :class:`GraphTopo` (the
``index``/``edges`` arrays of ``Create_graph``) or :class:`DistGraphTopo` (the
calling process's in- and out-neighbours, with optional weights). Descriptions
never change, so ``Dup`` shares its parent's.

:class:`TopologyConstructors` adds ``Create_cart``, ``Create_graph``,
``Create_dist_graph_adjacent``, ``Create_dist_graph``, ``Cart_map`` and
``Graph_map`` to ``MPI.Intracomm``. Each constructor agrees on a new context in
one ``allgather`` over the old communicator, as ``Split`` does; processes the
topology leaves out get ``COMM_NULL``. ``reorder`` is accepted and ignored:
every process keeps its rank, which the standard allows (``Cart_map`` and
``Graph_map`` accordingly return the caller's own rank, or ``UNDEFINED``).
The communicator classes and the neighbourhood collectives are in
:mod:`ipympi.mpi.neighbor`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core import contexts as ctx
from ..core.errors import ERR_ARG, ERR_DIMS, ERR_NOT_SAME, ERR_RANK, ERR_TOPOLOGY
from ..core.errors import Exception as MPIException
from . import commbuild as cb
from .args import c_int, c_ints
from .commimpl import TopoImpl, topocomm_class
from .errhandling import Errhandler, mpi_call, world_call
from .handles import CommMixin

if TYPE_CHECKING:
    from .commimpl import CommImpl
    from .info import Info
    from .neighbor import Cartcomm, Distgraphcomm, Graphcomm

__all__ = ["UNWEIGHTED", "WEIGHTS_EMPTY", "Compute_dims"]


class _Weights:
    """The sentinels ``UNWEIGHTED`` and ``WEIGHTS_EMPTY`` of the distributed graph calls."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"MPI.{self._name}"

    def __reduce__(self) -> str:
        return self._name


UNWEIGHTED = _Weights("UNWEIGHTED")
WEIGHTS_EMPTY = _Weights("WEIGHTS_EMPTY")


# -- argument parsing ------------------------------------------------------------------
def _dims(dims: Any, call: str) -> list[int]:
    out = c_ints(dims)
    bad = [d for d in out if d <= 0]
    if bad:
        raise MPIException(ERR_DIMS, f"{call}: dimensions must be positive, got {out}")
    return out


def _periods(periods: Any, ndims: int, call: str) -> list[bool]:
    """Periodicity per dimension: one flag for all (``None``: none), or a sequence of
    ``ndims`` integers (a ``ValueError`` for another length, as in mpi4py)."""
    if periods is None:
        return [False] * ndims
    if isinstance(periods, (bool, int)):
        return [bool(periods)] * ndims
    out = [bool(p) for p in c_ints(periods)]
    if len(out) != ndims:
        raise ValueError(f"{call}: expecting {ndims} periods, got {len(out)}")
    return out


# -- Compute_dims ----------------------------------------------------------------------
def _balanced(n: int, k: int) -> list[int]:
    """``k`` factors of ``n``, as close to each other as possible, non-increasing."""
    if k == 0:
        return []
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = sorted(set(divisors + [n // d for d in divisors]))
    best: tuple[tuple[int, int], list[int]] | None = None

    def search(rest: int, slots: int, ceiling: int, chosen: list[int]) -> None:
        nonlocal best
        if slots == 1:
            if rest <= ceiling:
                pick = [*chosen, rest]
                score = (pick[0] - rest, sum(x * x for x in pick))
                if best is None or score < best[0]:
                    best = (score, pick)
            return
        for d in divisors:
            if d > ceiling or d > rest:
                break
            # the largest factor is at least the slots-th root of what remains
            if rest % d == 0 and d**slots >= rest:
                search(rest // d, slots - 1, d, [*chosen, d])

    search(n, k, n, [])
    assert best is not None
    return best[1]


@world_call
def Compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Balanced Cartesian dimensions with product ``nnodes`` (``MPI_Dims_create``).

    ``dims`` is the number of dimensions, or a sequence where positive entries
    are kept and zeros are filled in, in non-increasing order.
    """
    nnodes = c_int(nnodes)
    if isinstance(dims, int) or hasattr(dims, "__index__"):
        ndims = c_int(dims)
        if ndims < 0:
            raise MPIException(ERR_DIMS, f"Compute_dims: negative number of dimensions {ndims}")
        given = [0] * ndims
    else:
        given = c_ints(dims)
    if nnodes < 0:
        raise MPIException(ERR_ARG, f"Compute_dims: negative number of nodes {nnodes}")
    if any(d < 0 for d in given):
        raise MPIException(ERR_DIMS, f"Compute_dims: negative dimension in {given}")
    fixed = math.prod(d for d in given if d > 0)
    free = given.count(0)
    if nnodes == 0 and free == 0 and given:
        raise MPIException(ERR_DIMS, f"Compute_dims: {given} cannot hold 0 nodes")
    if nnodes % fixed or (free == 0 and fixed != nnodes):
        raise MPIException(
            ERR_DIMS,
            f"Compute_dims: {nnodes} nodes cannot fill dimensions {given} "
            f"(not a multiple of {fixed})",
        )
    fill = iter(_balanced(nnodes // fixed, free) if nnodes else [0] * free)
    return [d if d > 0 else next(fill) for d in given]


# -- descriptions ------------------------------------------------------------------------
class CartTopo:
    """A Cartesian grid: row-major ranks, the last coordinate varying fastest."""

    kind = K.CART
    __slots__ = ("dims", "periods")

    def __init__(self, dims: list[int], periods: list[bool]) -> None:
        self.dims = tuple(dims)
        self.periods = tuple(periods)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def rank_of(self, coords: Sequence[int], call: str) -> int:
        if len(coords) != len(self.dims):
            raise MPIException(
                ERR_ARG, f"{call}: {len(coords)} coordinates for {len(self.dims)} dimensions"
            )
        rank = 0
        for c, n, periodic in zip(coords, self.dims, self.periods):
            if periodic:
                c %= n
            elif not 0 <= c < n:
                raise MPIException(
                    ERR_RANK,
                    f"{call}: coordinate {c} is outside the non-periodic dimension "
                    f"of size {n} (coordinates {list(coords)})",
                )
            rank = rank * n + c
        return rank

    def coords_of(self, rank: int, call: str) -> list[int]:
        if not 0 <= rank < self.size:
            raise MPIException(
                ERR_RANK, f"{call}: rank {rank} is not in the grid of {self.size} processes"
            )
        coords = []
        for n in reversed(self.dims):
            coords.append(rank % n)
            rank //= n
        return coords[::-1]

    def shift(self, rank: int, direction: int, disp: int, call: str) -> tuple[int, int]:
        if not 0 <= direction < len(self.dims):
            raise MPIException(
                ERR_DIMS,
                f"{call}: direction {direction} is not a dimension (0..{len(self.dims) - 1})",
            )
        coords = self.coords_of(rank, call)

        def moved(by: int) -> int:
            c = coords[direction] + by
            n = self.dims[direction]
            if not self.periods[direction] and not 0 <= c < n:
                return K.PROC_NULL
            return self.rank_of([*coords[:direction], c % n, *coords[direction + 1 :]], call)

        return moved(-disp), moved(disp)

    def neighbors(self, rank: int) -> tuple[list[int], list[int], list[int]]:
        """In-neighbours, out-neighbours (both: per dimension, negative then positive
        direction), and the order in which to receive: what the positive neighbour
        sent to its negative one first, so that messages between the same pair of
        processes (a periodic dimension of size 1 or 2) land in the right blocks."""
        out: list[int] = []
        order: list[int] = []
        for d in range(len(self.dims)):
            out.extend(self.shift(rank, d, 1, "neighbors"))
            order.extend((2 * d + 1, 2 * d))
        return out, list(out), order


class GraphTopo:
    """The graph of ``Create_graph``: ``index`` holds cumulative degrees."""

    kind = K.GRAPH
    __slots__ = ("edges", "index")

    def __init__(self, index: list[int], edges: list[int]) -> None:
        self.index = tuple(index)
        self.edges = tuple(edges)

    def adjacent(self, rank: int, call: str) -> list[int]:
        if not 0 <= rank < len(self.index):
            raise MPIException(
                ERR_RANK,
                f"{call}: rank {rank} is not a node of the graph (0..{len(self.index) - 1})",
            )
        start = self.index[rank - 1] if rank else 0
        return list(self.edges[start : self.index[rank]])

    def neighbors(self, rank: int) -> tuple[list[int], list[int], list[int]]:
        adj = self.adjacent(rank, "neighbors")
        return adj, list(adj), list(range(len(adj)))


class DistGraphTopo:
    """One process's part of a distributed graph: its in- and out-neighbours."""

    kind = K.DIST_GRAPH
    __slots__ = ("destinations", "destweights", "sources", "sourceweights")

    def __init__(
        self,
        sources: list[int],
        destinations: list[int],
        sourceweights: list[int] | None,
        destweights: list[int] | None,
    ) -> None:
        self.sources = tuple(sources)
        self.destinations = tuple(destinations)
        self.sourceweights = None if sourceweights is None else tuple(sourceweights)
        self.destweights = None if destweights is None else tuple(destweights)

    @property
    def weighted(self) -> bool:
        return self.sourceweights is not None

    def neighbors(self, rank: int) -> tuple[list[int], list[int], list[int]]:
        return list(self.sources), list(self.destinations), list(range(len(self.sources)))


def _weights(weights: Any, count: int, call: str, what: str) -> list[int] | None:
    """Edge weights: ``None`` when unweighted; a list of ``count`` otherwise.

    A list of the wrong length, or ``WEIGHTS_EMPTY`` for edges, is a ``ValueError``,
    as in mpi4py.
    """
    if weights is None or weights is UNWEIGHTED:
        return None
    if weights is WEIGHTS_EMPTY:
        if count:
            raise ValueError(f"{call}: {what} WEIGHTS_EMPTY, but there are {count} edges")
        return []
    out = c_ints(weights)
    if len(out) != count:
        raise ValueError(f"{call}: expecting {count} {what}, got {len(out)}")
    if any(w < 0 for w in out):
        raise MPIException(ERR_ARG, f"{call}: negative weight in {what} {out}")
    return out


def _check_ranks(ranks: list[int], size: int, call: str, what: str) -> None:
    bad = [r for r in ranks if not 0 <= r < size]
    if bad:
        raise MPIException(
            ERR_RANK, f"{call}: {what} {bad} are not ranks of the communicator (size {size})"
        )


# -- constructors ------------------------------------------------------------------------
class TopologyConstructors(CommMixin):
    """The topology constructors and mapping functions of ``MPI.Intracomm``."""

    __slots__ = ()

    def _build(self, call: str, nodes: int, mine: Any, describe: Any, same: bool) -> Any:
        """Agree on a context and build the new communicator of ranks ``0..nodes-1``.

        ``mine`` is this rank's part of the call, which all ranks must pass the same
        if ``same`` (``ERR_NOT_SAME`` otherwise); ``describe(parts)`` gives this
        rank's topology from every rank's part.
        """

        impl = self._live()
        if nodes > impl.size:
            raise MPIException(
                ERR_ARG,
                f"{call}: the topology has {nodes} processes but the communicator only {impl.size}",
            )
        parts = cb.allgather(self, call, (mine, ctx.contribution(impl.engine)))
        shared = [p[0] for p in parts]
        if same and any(s != shared[0] for s in shared):
            raise MPIException(
                ERR_NOT_SAME,
                f"{call}: the processes passed different arguments: "
                + ", ".join(f"rank {r}: {s}" for r, s in enumerate(shared)),
            )
        if impl.rank >= nodes:
            return topocomm_class(mine[0])._from_impl(None, "COMM_NULL")
        topo = describe(shared)
        context, base = cb.agree([p[1] for p in parts], call)
        ctx.install(impl.engine, context, base)
        members = list(impl.world_ranks[:nodes])
        new = TopoImpl(
            impl.engine,
            context,
            members,
            impl.rank,
            "",
            _errhandler(impl),
            topo=topo,
        )
        return topocomm_class(topo.kind)._from_impl(new)

    @mpi_call
    def Create_cart(
        self, dims: Sequence[int], periods: Sequence[bool] | None = None, reorder: bool = False
    ) -> Cartcomm:
        """A new communicator with a Cartesian topology (``MPI_Cart_create``).

        Ranks are kept; processes beyond ``prod(dims)`` get ``COMM_NULL``.
        """
        shape = _dims(dims, "Create_cart")
        cyclic = _periods(periods, len(shape), "Create_cart")
        topo = CartTopo(shape, cyclic)
        mine = (K.CART, topo.dims, topo.periods)
        return self._build_fixed("Create_cart", topo, mine)

    def _build_fixed(self, call: str, topo: Any, mine: Any) -> Any:
        nodes = topo.size if topo.kind == K.CART else len(topo.index)
        return self._build(call, nodes, mine, lambda parts: topo, same=True)

    @mpi_call
    def Create_graph(
        self, index: Sequence[int], edges: Sequence[int], reorder: bool = False
    ) -> Graphcomm:
        """A new communicator with a graph topology (``MPI_Graph_create``).

        ``index[i]`` is the total degree of nodes ``0..i``; processes beyond
        ``len(index)`` get ``COMM_NULL``.
        """
        topo = _graph(index, edges, "Create_graph")
        mine = (K.GRAPH, topo.index, topo.edges)
        return self._build_fixed("Create_graph", topo, mine)

    @mpi_call
    def Create_dist_graph_adjacent(
        self,
        sources: Sequence[int],
        destinations: Sequence[int],
        sourceweights: Any = None,
        destweights: Any = None,
        info: Info | None = None,
        reorder: bool = False,
    ) -> Distgraphcomm:
        """A distributed graph given by each process's own in- and out-neighbours."""
        call = "Create_dist_graph_adjacent"
        size = self._live().size
        src = [] if sources is None else c_ints(sources)
        dst = [] if destinations is None else c_ints(destinations)
        _check_ranks(src, size, call, "sources")
        _check_ranks(dst, size, call, "destinations")
        sw = _weights(sourceweights, len(src), call, "sourceweights")
        dw = _weights(destweights, len(dst), call, "destweights")
        if (sw is None) != (dw is None):
            raise MPIException(
                ERR_TOPOLOGY, f"{call}: give both sourceweights and destweights, or neither"
            )
        topo = DistGraphTopo(src, dst, sw, dw)
        return self._build(call, size, (K.DIST_GRAPH,), lambda parts: topo, same=False)

    @mpi_call
    def Create_dist_graph(
        self,
        sources: Sequence[int],
        degrees: Sequence[int],
        destinations: Sequence[int],
        weights: Any = None,
        info: Info | None = None,
        reorder: bool = False,
    ) -> Distgraphcomm:
        """A distributed graph from edges any process may specify.

        ``sources[i]`` has ``degrees[i]`` out-edges, listed in turn in
        ``destinations``. A process's neighbours come in the order of the
        processes that specified the edges, then of the edges in their lists.
        """
        call = "Create_dist_graph"
        impl = self._live()
        src = c_ints(sources)
        deg = c_ints(degrees)
        dst = c_ints(destinations)
        if len(deg) != len(src):
            raise ValueError(f"{call}: expecting {len(src)} degrees, got {len(deg)}")
        if any(d < 0 for d in deg):
            raise MPIException(ERR_ARG, f"{call}: negative degree in {deg}")
        if sum(deg) != len(dst):
            raise ValueError(
                f"{call}: expecting {sum(deg)} destinations (the sum of the degrees), "
                f"got {len(dst)}"
            )
        _check_ranks(src, impl.size, call, "sources")
        _check_ranks(dst, impl.size, call, "destinations")
        w = _weights(weights, len(dst), call, "weights")
        edges = []
        pos = 0
        for s, d in zip(src, deg):
            for j in range(pos, pos + d):
                edges.append((s, dst[j], None if w is None else w[j]))
            pos += d
        me = impl.rank

        def describe(parts: list[Any]) -> DistGraphTopo:
            weighted = any(p[2] for p in parts)
            ins: list[tuple[int, int | None]] = []
            outs: list[tuple[int, int | None]] = []
            for _, part, _ in parts:
                for s, d, wt in part:
                    if d == me:
                        ins.append((s, wt))
                    if s == me:
                        outs.append((d, wt))
            return DistGraphTopo(
                [s for s, _ in ins],
                [d for d, _ in outs],
                [wt or 0 for _, wt in ins] if weighted else None,
                [wt or 0 for _, wt in outs] if weighted else None,
            )

        mine = (K.DIST_GRAPH, edges, w is not None)
        return self._build(call, impl.size, mine, describe, same=False)

    @mpi_call
    def Cart_map(self, dims: Sequence[int], periods: Sequence[bool] | None = None) -> int:
        """The rank this process would have in the grid, or ``UNDEFINED``."""
        impl = self._live()
        shape = _dims(dims, "Cart_map")
        _periods(periods, len(shape), "Cart_map")
        nodes = math.prod(shape)
        if nodes > impl.size:
            raise MPIException(
                ERR_ARG,
                f"Cart_map: the grid has {nodes} processes but the communicator only {impl.size}",
            )
        return impl.rank if impl.rank < nodes else K.UNDEFINED

    @mpi_call
    def Graph_map(self, index: Sequence[int], edges: Sequence[int]) -> int:
        """The rank this process would have in the graph, or ``UNDEFINED``."""
        impl = self._live()
        topo = _graph(index, edges, "Graph_map")
        nodes = len(topo.index)
        if nodes > impl.size:
            raise MPIException(
                ERR_ARG,
                f"Graph_map: the graph has {nodes} nodes but the communicator only {impl.size}",
            )
        return impl.rank if impl.rank < nodes else K.UNDEFINED


def _graph(index: Any, edges: Any, call: str) -> GraphTopo:
    """The graph of ``index`` and ``edges``.

    As mpi4py does, ``index`` may also be given in the usual adjacency-array form,
    with a leading 0 (``index[i]:index[i + 1]`` are node i's edges): an index that
    starts at 0 and ends at ``len(edges)`` is read that way.
    """
    idx = c_ints(index)
    adj = c_ints(edges)
    if idx and idx[0] == 0 and idx[-1] == len(adj):
        idx = idx[1:]
    if any(i < 0 for i in idx) or any(b < a for a, b in zip(idx, idx[1:])):
        raise MPIException(
            ERR_ARG, f"{call}: index must be non-decreasing and non-negative, got {idx}"
        )
    total = idx[-1] if idx else 0
    if len(adj) != total:
        raise MPIException(ERR_ARG, f"{call}: index ends at {total} but {len(adj)} edges are given")
    bad = [e for e in adj if not 0 <= e < len(idx)]
    if bad:
        raise MPIException(
            ERR_RANK, f"{call}: edges {bad} are not nodes of the graph (0..{len(idx) - 1})"
        )
    return GraphTopo(idx, adj)


def _errhandler(impl: CommImpl) -> Any:

    return Errhandler(impl.errhandler)
