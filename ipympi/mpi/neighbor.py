"""Communicators with a topology, and the neighbourhood collectives.

``Topocomm`` (the base of ``Cartcomm``, ``Graphcomm`` and ``Distgraphcomm``)
carries the neighbourhood collectives: each process sends to its out-neighbours
and receives from its in-neighbours, in one round on the communicator's
collective context. A Cartesian process's neighbours are, for each dimension,
the negative then the positive direction (``Shift(d, 1)``); a ``PROC_NULL``
neighbour (the edge of a non-periodic dimension) is skipped, leaving its block
of the receive buffer untouched (``None`` in the lists of the lower-case forms).
Messages between the same two processes match in order, as point-to-point
messages do; on a periodic dimension of size 1 or 2, where a process is both
neighbours of another, the receives are ordered so that what a process sends
in the negative direction arrives in the block of its positive neighbour.

The neighbourhood collectives report a mismatch with another collective under
the name of the corresponding global one (``Allgather`` for
``Neighbor_allgather``, and so on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core import contexts as ctx
from ..core.errors import ERR_ARG, ERR_COUNT, ERR_TOPOLOGY
from ..core.errors import Exception as MPIException
from ..core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ..core.schedule import NEIGHBORHOOD, Algorithm, Round
from . import commbuild as cb
from .args import c_int, c_ints
from .buffers import send_memory
from .coll.bufforms import blocks, exchange, vector
from .comm import Intracomm
from .commimpl import TopoImpl, handle_class
from .errhandling import mpi_call
from .pickling import object_items, pickle
from .request import Prequest, Request
from .topology import CartTopo, DistGraphTopo, GraphTopo, _errhandler

if TYPE_CHECKING:
    from .info import Info

__all__ = ["Cartcomm", "Distgraphcomm", "Graphcomm", "Topocomm"]


_KIND_NAMES = {K.CART: "Cartesian", K.GRAPH: "graph", K.DIST_GRAPH: "distributed graph"}


def _exchange(
    sends: list[tuple[int, Any]], recvs: list[tuple[int, Any]], slots: list[int]
) -> Algorithm:
    targets = [target for _, target in recvs]
    state = targets if all(t is not None for t in targets) else None
    ops = yield Round("neighbors", sends=sends, recvs=recvs, state=state)
    return slots, ops


@handle_class
class Topocomm(Intracomm):
    """An intracommunicator with a process topology: neighbourhood collectives."""

    __slots__ = ()

    _kinds: tuple[int, ...] = (K.CART, K.GRAPH, K.DIST_GRAPH)

    def _topo(self, call: str) -> Any:
        topo = getattr(self._live(), "topo", None)
        if topo is None or topo.kind not in self._kinds:
            want = " or ".join(_KIND_NAMES[k] for k in self._kinds)
            raise MPIException(ERR_TOPOLOGY, f"{call}: the communicator has no {want} topology")
        return topo

    def _edges(self, call: str) -> tuple[list[int], list[int], list[int]]:
        return self._topo(call).neighbors(self._live().rank)

    # -- neighbours ------------------------------------------------------------------
    @property
    def degrees(self) -> tuple[int, int]:
        """``(indegree, outdegree)``."""
        ins, outs, _ = self._edges("degrees")
        return len(ins), len(outs)

    @property
    def indegree(self) -> int:
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        return self.degrees[1]

    @property
    def inoutedges(self) -> tuple[list[int], list[int]]:
        ins, outs, _ = self._edges("inoutedges")
        return ins, outs

    @property
    def inedges(self) -> list[int]:
        return self.inoutedges[0]

    @property
    def outedges(self) -> list[int]:
        return self.inoutedges[1]

    # -- machinery --------------------------------------------------------------------
    def _neighbor(
        self, call: str, kind: str, mode: Form, sends: list[Any], recvs: list[Any], finish: Any
    ) -> Any:
        """Send ``sends[j]`` to out-neighbour j and receive in-neighbour i's into ``recvs[i]``."""
        ins, outs, order = self._edges(call)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            out = [(p, data) for p, data in zip(outs, sends) if p != K.PROC_NULL]
            slots = [i for i in order if ins[i] != K.PROC_NULL]
            inc = [(ins[i], recvs[i]) for i in slots]
            return _exchange(out, inc, slots), finish

        return self._collective(call, kind, NEIGHBORHOOD, plan, mode)

    def _allgather_n(self, call: str, sendbuf: Any, recvbuf: Any, mode: Form, v: bool) -> Any:
        ins, outs, _ = self._edges(call)
        if v:
            views, finish = vector(recvbuf, len(ins), writable=True)
        else:
            _, views, finish = blocks(recvbuf, len(ins), writable=True)
        block = send_memory(sendbuf)
        if not v and views and block.nbytes != views[0].nbytes:
            raise MPIException(
                ERR_COUNT,
                f"{call}: this rank sends {block.nbytes} bytes but the blocks of the "
                f"receive buffer have {views[0].nbytes}",
            )
        kind = "Allgatherv" if v else "Allgather"
        return self._neighbor(call, kind, mode, [block] * len(outs), views, _done(finish))

    def _alltoall_n(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, mode: Form) -> Any:
        ins, outs, _ = self._edges(call)
        sends, recvs, finish = exchange(call, kind, sendbuf, recvbuf, len(outs), len(ins), False)
        return self._neighbor(call, kind, mode, sends, recvs, _done(finish))

    # -- buffer forms ------------------------------------------------------------------
    @mpi_call
    def Neighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send the same block to every out-neighbour; block i comes from in-neighbour i."""
        self._allgather_n("Neighbor_allgather", sendbuf, recvbuf, BLOCKING, v=False)

    @mpi_call
    def Ineighbor_allgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather_n("Ineighbor_allgather", sendbuf, recvbuf, NONBLOCKING, False)

    @mpi_call
    def Neighbor_allgather_init(
        self, sendbuf: Any, recvbuf: Any, info: Info | None = None
    ) -> Prequest:
        return self._allgather_n("Neighbor_allgather_init", sendbuf, recvbuf, PERSISTENT, v=False)

    @mpi_call
    def Neighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._allgather_n("Neighbor_allgatherv", sendbuf, recvbuf, BLOCKING, v=True)

    @mpi_call
    def Ineighbor_allgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather_n("Ineighbor_allgatherv", sendbuf, recvbuf, NONBLOCKING, True)

    @mpi_call
    def Neighbor_allgatherv_init(
        self, sendbuf: Any, recvbuf: Any, info: Info | None = None
    ) -> Prequest:
        return self._allgather_n("Neighbor_allgatherv_init", sendbuf, recvbuf, PERSISTENT, v=True)

    @mpi_call
    def Neighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Send block j to out-neighbour j; block i comes from in-neighbour i."""
        self._alltoall_n("Neighbor_alltoall", "Alltoall", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ineighbor_alltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall_n("Ineighbor_alltoall", "Alltoall", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Neighbor_alltoall_init(
        self, sendbuf: Any, recvbuf: Any, info: Info | None = None
    ) -> Prequest:
        return self._alltoall_n("Neighbor_alltoall_init", "Alltoall", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    def Neighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall_n("Neighbor_alltoallv", "Alltoallv", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ineighbor_alltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall_n("Ineighbor_alltoallv", "Alltoallv", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Neighbor_alltoallv_init(
        self, sendbuf: Any, recvbuf: Any, info: Info | None = None
    ) -> Prequest:
        return self._alltoall_n(
            "Neighbor_alltoallv_init", "Alltoallv", sendbuf, recvbuf, PERSISTENT
        )

    @mpi_call
    def Neighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall_n("Neighbor_alltoallw", "Alltoallw", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ineighbor_alltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall_n("Ineighbor_alltoallw", "Alltoallw", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Neighbor_alltoallw_init(
        self, sendbuf: Any, recvbuf: Any, info: Info | None = None
    ) -> Prequest:
        return self._alltoall_n(
            "Neighbor_alltoallw_init", "Alltoallw", sendbuf, recvbuf, PERSISTENT
        )

    # -- Python objects ----------------------------------------------------------------
    def _objects(self, call: str, kind: str, pickles: list[bytes]) -> list[Any]:
        ins, _, _ = self._edges(call)
        result: list[Any] = [None] * len(ins)

        def finish(value: Any) -> Any:
            slots, ops = value
            for i, op in zip(slots, ops):
                result[i] = pickle.loads(op.data)
            return result

        return self._neighbor(call, kind, BLOCKING, pickles, [None] * len(ins), finish)

    @mpi_call
    def neighbor_allgather(self, sendobj: Any) -> list[Any]:
        """The objects of the in-neighbours (``None`` for ``PROC_NULL``)."""
        _, outs, _ = self._edges("neighbor_allgather")
        data = pickle.dumps(sendobj)
        return self._objects("neighbor_allgather", "allgather", [data] * len(outs))

    @mpi_call
    def neighbor_alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Send ``sendobj[j]`` to out-neighbour j; the objects of the in-neighbours."""
        _, outs, _ = self._edges("neighbor_alltoall")
        items = object_items(sendobj, len(outs))
        return self._objects("neighbor_alltoall", "alltoall", [pickle.dumps(x) for x in items])


def _done(finish: Any) -> Any:
    """The finishing step of a buffer form: drop the algorithm's value."""

    def step(value: Any) -> None:
        if finish is not None:
            finish(value)

    return step


@handle_class
class Cartcomm(Topocomm):
    """A communicator with a Cartesian topology."""

    __slots__ = ()
    _kinds = (K.CART,)

    def _cart(self, call: str) -> CartTopo:
        return self._topo(call)

    @mpi_call
    def Get_dim(self) -> int:
        """The number of dimensions."""
        return len(self._cart("Get_dim").dims)

    @property
    def dim(self) -> int:
        return self.Get_dim()

    @property
    def ndim(self) -> int:
        return self.Get_dim()

    @mpi_call
    def Get_topo(self) -> tuple[list[int], list[int], list[int]]:
        """``(dims, periods, coords)``: the grid and this process's coordinates."""
        topo = self._cart("Get_topo")
        coords = topo.coords_of(self._live().rank, "Get_topo")
        return list(topo.dims), [int(p) for p in topo.periods], coords

    @property
    def topo(self) -> tuple[list[int], list[int], list[int]]:
        return self.Get_topo()

    @property
    def dims(self) -> list[int]:
        return self.Get_topo()[0]

    @property
    def periods(self) -> list[int]:
        return self.Get_topo()[1]

    @property
    def coords(self) -> list[int]:
        return self.Get_topo()[2]

    @mpi_call
    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        """The rank at ``coords``; periodic dimensions wrap."""
        return self._cart("Get_cart_rank").rank_of(c_ints(coords), "Get_cart_rank")

    @mpi_call
    def Get_coords(self, rank: int) -> list[int]:
        """The coordinates of ``rank``."""
        return self._cart("Get_coords").coords_of(c_int(rank), "Get_coords")

    @mpi_call
    def Shift(self, direction: int, disp: int) -> tuple[int, int]:
        """``(source, dest)`` of a shift by ``disp`` along ``direction``.

        Off the grid of a non-periodic dimension gives ``PROC_NULL``.
        """
        topo = self._cart("Shift")
        direction = c_int(direction)
        disp = c_int(disp)
        return topo.shift(self._live().rank, direction, disp, "Shift")

    @mpi_call
    def Sub(self, remain_dims: Sequence[bool]) -> Cartcomm:
        """The communicator of this process's sub-grid over the kept dimensions."""

        topo = self._cart("Sub")
        keep = [bool(k) for k in c_ints(remain_dims)]
        if len(keep) != len(topo.dims):
            raise MPIException(
                ERR_ARG, f"Sub: {len(keep)} entries in remain_dims for {len(topo.dims)} dimensions"
            )
        impl = self._live()
        coords = topo.coords_of(impl.rank, "Sub")
        color = tuple(c for c, k in zip(coords, keep) if not k)
        key = tuple(c for c, k in zip(coords, keep) if k)
        parts = cb.allgather(self, "Sub", (color, key, ctx.contribution(impl.engine)))
        context, base = cb.agree([p[2] for p in parts], "Sub")
        order = sorted((k, r) for r, (c, k, _) in enumerate(parts) if c == color)
        members = [impl.world_ranks[r] for _, r in order]
        ctx.install(impl.engine, context, base)
        sub = CartTopo(
            [n for n, k in zip(topo.dims, keep) if k],
            [p for p, k in zip(topo.periods, keep) if k],
        )
        new = TopoImpl(
            impl.engine,
            context,
            members,
            members.index(impl.world_ranks[impl.rank]),
            "",
            _errhandler(impl),
            topo=sub,
        )
        return Cartcomm._from_impl(new)  # type: ignore[return-value]


@handle_class
class Graphcomm(Topocomm):
    """A communicator with a graph topology."""

    __slots__ = ()
    _kinds = (K.GRAPH,)

    def _graph(self, call: str) -> GraphTopo:
        return self._topo(call)

    @mpi_call
    def Get_dims(self) -> tuple[int, int]:
        """``(nnodes, nedges)``."""
        topo = self._graph("Get_dims")
        return len(topo.index), len(topo.edges)

    @property
    def dims(self) -> tuple[int, int]:
        return self.Get_dims()

    @property
    def nnodes(self) -> int:
        return self.Get_dims()[0]

    @property
    def nedges(self) -> int:
        return self.Get_dims()[1]

    @mpi_call
    def Get_topo(self) -> tuple[list[int], list[int]]:
        """``(index, edges)`` as given to ``Create_graph``."""
        topo = self._graph("Get_topo")
        return list(topo.index), list(topo.edges)

    @property
    def topo(self) -> tuple[list[int], list[int]]:
        return self.Get_topo()

    @property
    def index(self) -> list[int]:
        return self.Get_topo()[0]

    @property
    def edges(self) -> list[int]:
        return self.Get_topo()[1]

    @mpi_call
    def Get_neighbors_count(self, rank: int) -> int:
        """The number of neighbours of node ``rank``."""
        rank = c_int(rank)
        return len(self._graph("Get_neighbors_count").adjacent(rank, "Get_neighbors_count"))

    @mpi_call
    def Get_neighbors(self, rank: int) -> list[int]:
        """The neighbours of node ``rank``."""
        rank = c_int(rank)
        return self._graph("Get_neighbors").adjacent(rank, "Get_neighbors")

    @property
    def nneighbors(self) -> int:
        return self.Get_neighbors_count(self.Get_rank())

    @property
    def neighbors(self) -> list[int]:
        return self.Get_neighbors(self.Get_rank())


@handle_class
class Distgraphcomm(Topocomm):
    """A communicator with a distributed graph topology."""

    __slots__ = ()
    _kinds = (K.DIST_GRAPH,)

    def _dist(self, call: str) -> DistGraphTopo:
        return self._topo(call)

    @mpi_call
    def Get_dist_neighbors_count(self) -> tuple[int, int, bool]:
        """``(indegree, outdegree, weighted)``."""
        topo = self._dist("Get_dist_neighbors_count")
        return len(topo.sources), len(topo.destinations), topo.weighted

    @mpi_call
    def Get_dist_neighbors(
        self,
    ) -> tuple[list[int], list[int], tuple[list[int], list[int]] | None]:
        """``(sources, destinations, weights)``; weights is ``(sourceweights,
        destweights)``, or ``None`` for an unweighted graph."""
        topo = self._dist("Get_dist_neighbors")
        weights = None
        if topo.sourceweights is not None and topo.destweights is not None:
            weights = (list(topo.sourceweights), list(topo.destweights))
        return list(topo.sources), list(topo.destinations), weights
