"""Collective operations of ``MPI.Intracomm`` (the standard's collective chapter).

Every collective exists in up to four forms with mpi4py's names: blocking
(``Bcast``), nonblocking (``Ibcast``, returning a request), persistent
(``Bcast_init``, a request started with ``Start``), and lower case for Python
objects (``bcast``). Each form checks its arguments (root, ``IN_PLACE`` where
the standard allows it, op and datatype), picks an algorithm by message size
and number of ranks (``core.algorithms``; reductions are in ``mpi.coll.reduce``) and
runs it through ``mpi.coll.runner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from ...core import algorithms as algo
from ...core.errors import ERR_BUFFER, ERR_COUNT
from ...core.errors import Exception as MPIException
from ...core.lazynumpy import np
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm, signature
from ..args import root_rank
from ..buffers import ndarray_bytes, recv_buffer, send_buffer, send_memory
from ..commlock import comm_locked
from ..errhandling import mpi_call
from ..handles import CommMixin
from ..pickling import object_items, pickle
from ..rawmem import IN_PLACE
from ..request import Prequest, Request
from . import fast
from .bufforms import blocks, exchange, in_place, unpack_after, vector
from .runner import CollOp, check_reported, run_blocking, run_in_mode

if TYPE_CHECKING:
    from ..commimpl import CommImpl
    from ..info import Info

__all__ = ["Collectives"]

# Above these sizes (bytes) the bandwidth-efficient algorithms take over.
LARGE_BCAST = 256 * 1024
LARGE_ALLGATHER = 64 * 1024

# A plan builds (algorithm, finish) for one run; persistent requests rerun it.
Plan = Callable[[int, int], "tuple[Algorithm, Callable[[Any], Any] | None]"]


class Collectives(CommMixin):
    """Mixin with every collective operation; ``self`` is an ``MPI.Intracomm``."""

    __slots__ = ()

    # -- machinery ----------------------------------------------------------------
    def _check_root(self, impl: CommImpl, root: Any, call: str) -> int:
        """``root`` as a rank of the communicator (see :func:`ipympi.mpi.args.root_rank`)."""
        if type(root) is int and 0 <= root < impl.size:
            return root
        return root_rank(impl, root, call)

    def _collective(self, call: str, kind: str, root: int, plan: Plan, mode: Form) -> Any:
        """Run ``plan`` as a blocking call, or return its (persistent) request."""
        impl = self._live()
        engine = impl.engine
        sig = signature(kind, root, mode)

        def launch() -> CollOp:
            check_reported(engine, impl.context + 1, call)
            gen, finish = plan(impl.rank, impl.size)
            return CollOp(self, call, gen, sig, finish, root)

        if mode is BLOCKING:  # the common case, with as few layers as possible
            engine.enter()
            try:
                return run_blocking(launch())
            finally:
                engine.leave()
        return run_in_mode(engine, launch, mode)

    # -- barrier ------------------------------------------------------------------
    def _barrier(self, call: str, mode: Form) -> Any:
        if mode is BLOCKING:
            impl = self._live()
            if fast.barrier(self, impl, call) is not fast.GENERAL:
                return None
        return self._collective(
            call, "Barrier", 0, lambda r, p: (algo.barrier_dissemination(r, p), None), mode
        )

    @mpi_call
    def Barrier(self) -> None:
        """Block until every rank of the communicator has called it."""
        self._barrier("Barrier", BLOCKING)

    @mpi_call
    def barrier(self) -> None:
        self._barrier("barrier", BLOCKING)

    @mpi_call
    def Ibarrier(self) -> Request:
        return self._barrier("Ibarrier", NONBLOCKING)

    @mpi_call
    def Barrier_init(self, info: Info | None = None) -> Prequest:
        return self._barrier("Barrier_init", PERSISTENT)

    # -- bcast --------------------------------------------------------------------
    def _bcast(self, call: str, buf: Any, root: int, mode: Form) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        if buf is IN_PLACE:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is not allowed in Bcast")
        at_root = impl.rank == root
        # a plain array of a predefined type is its bytes: no spec to build
        mem = ndarray_bytes(buf, not at_root) if type(buf) is np.ndarray else None
        finish = None
        if mem is None:
            spec = send_buffer(buf) if at_root else recv_buffer(buf)
            mem = spec.mem
            finish = None if at_root else unpack_after(spec)
        large = mem.nbytes >= LARGE_BCAST and impl.size > 2
        if (
            mode is BLOCKING
            and fast.bcast(self, impl, call, root, mem, rounds_ok=not large) is not fast.GENERAL
        ):
            if finish is not None:
                finish(None)
            return None

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if large:
                return algo.bcast_scatter_allgather(rank, size, root, mem), finish
            return algo.bcast_binomial(rank, size, root, mem), finish

        return self._collective(call, "Bcast", root, plan, mode)

    @mpi_call
    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast ``buf`` from ``root`` to every rank."""
        impl = self._impl
        if (
            impl is None
            or type(buf) is not np.ndarray
            or fast.bcast_array(self, impl, buf, root) is fast.GENERAL
        ):
            self._bcast("Bcast", buf, root, BLOCKING)

    @mpi_call
    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        return self._bcast("Ibcast", buf, root, NONBLOCKING)

    @mpi_call
    def Bcast_init(self, buf: Any, root: int = 0, info: Info | None = None) -> Prequest:
        return self._bcast("Bcast_init", buf, root, PERSISTENT)

    @mpi_call
    @comm_locked
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Broadcast a Python object from ``root``; every rank returns it."""
        impl = self._live()
        root = self._check_root(impl, root, "bcast")
        data = pickle.dumps(obj) if impl.rank == root else None
        got = fast.bcast_object(self, impl, root, data)
        if got is not fast.GENERAL:
            return obj if impl.rank == root else pickle.loads(got)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.bcast_objects(rank, size, root, data), None

        wire = self._collective("bcast", "bcast", root, plan, BLOCKING)
        return obj if impl.rank == root else pickle.loads(wire)

    # -- gather / scatter ---------------------------------------------------------------
    def _gather(self, call: str, sendbuf: Any, recvbuf: Any, root: int, mode: Form, v: bool) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        rank, size = impl.rank, impl.size
        at_root = rank == root
        if sendbuf is IN_PLACE and not at_root:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is allowed at the root only")
        block = None if at_root and in_place(sendbuf) else send_memory(sendbuf)
        whole, views, finish = None, None, None
        if at_root:
            if v:
                views, finish = vector(recvbuf, size, writable=True)
            else:
                whole, views, finish = blocks(recvbuf, size, writable=True)
            if block is not None and block.nbytes != views[root].nbytes:
                raise MPIException(
                    ERR_COUNT,
                    f"{call}: the root sends {block.nbytes} bytes but expects "
                    f"{views[root].nbytes} from itself",
                )
        if not v:
            own = block if block is not None else views[root]  # type: ignore[index]
            out = whole.mem[: own.nbytes * size] if whole is not None else None
            if (
                mode is BLOCKING
                and fast.gather(self, impl, call, root, own, out) is not fast.GENERAL
            ):
                return None if finish is None else finish(None)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v:
                return algo.gatherv_linear(rank, size, root, block, views), finish
            return algo.gather_binomial(rank, size, root, own, out), finish

        return self._collective(call, "Gatherv" if v else "Gather", root, plan, mode)

    @mpi_call
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather equal blocks from every rank into ``recvbuf`` at ``root``, in rank order."""
        impl = self._impl
        if (
            impl is None
            or type(sendbuf) is not np.ndarray
            or fast.gather_arrays(self, impl, sendbuf, recvbuf, root) is fast.GENERAL
        ):
            self._gather("Gather", sendbuf, recvbuf, root, BLOCKING, v=False)

    @mpi_call
    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igather", sendbuf, recvbuf, root, NONBLOCKING, v=False)

    @mpi_call
    def Gather_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._gather("Gather_init", sendbuf, recvbuf, root, PERSISTENT, v=False)

    @mpi_call
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather blocks of per-rank sizes: ``recvbuf = [buf, counts, displs, datatype]``."""
        self._gather("Gatherv", sendbuf, recvbuf, root, BLOCKING, v=True)

    @mpi_call
    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igatherv", sendbuf, recvbuf, root, NONBLOCKING, v=True)

    @mpi_call
    def Gatherv_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._gather("Gatherv_init", sendbuf, recvbuf, root, PERSISTENT, v=True)

    @mpi_call
    @comm_locked
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Gather one Python object per rank; the root returns the list, others None."""
        impl = self._live()
        root = self._check_root(impl, root, "gather")
        data = pickle.dumps(sendobj)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.gather_objects(rank, size, root, data), None

        wires = self._collective("gather", "gather", root, plan, BLOCKING)
        return None if wires is None else [pickle.loads(w) for w in wires]

    def _scatter(
        self, call: str, sendbuf: Any, recvbuf: Any, root: int, mode: Form, v: bool
    ) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        rank, size = impl.rank, impl.size
        at_root = rank == root
        if recvbuf is IN_PLACE and not at_root:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is allowed at the root only")
        spec = None if at_root and in_place(recvbuf) else recv_buffer(recvbuf)
        block = spec.mem if spec is not None else None
        finish = unpack_after(spec) if spec is not None else None
        src, views = None, None
        if at_root:
            if v:
                views, _ = vector(sendbuf, size, writable=False)
            else:
                whole_src, views, _ = blocks(sendbuf, size, writable=False)
                src = whole_src.mem[: views[0].nbytes * size]
            if block is not None and block.nbytes != views[root].nbytes:
                raise MPIException(
                    ERR_COUNT,
                    f"{call}: the root sends {views[root].nbytes} bytes to itself but "
                    f"expects {block.nbytes}",
                )
        if not v:
            # With IN_PLACE the root's own block stays where it is; the tree
            # still hands it a copy, which goes to scratch space.
            own = block if block is not None else memoryview(bytearray(views[root].nbytes))  # type: ignore[index]
            if (
                mode is BLOCKING
                and fast.scatter(self, impl, call, root, src, own) is not fast.GENERAL
            ):
                return None if finish is None else finish(None)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v:
                return algo.scatterv_linear(rank, size, root, views, block), finish
            return algo.scatter_binomial(rank, size, root, src, own), finish

        return self._collective(call, "Scatterv" if v else "Scatter", root, plan, mode)

    @mpi_call
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Send the i-th block of ``sendbuf`` at ``root`` to rank i."""
        impl = self._impl
        if (
            impl is None
            or type(recvbuf) is not np.ndarray
            or fast.scatter_arrays(self, impl, sendbuf, recvbuf, root) is fast.GENERAL
        ):
            self._scatter("Scatter", sendbuf, recvbuf, root, BLOCKING, v=False)

    @mpi_call
    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatter", sendbuf, recvbuf, root, NONBLOCKING, v=False)

    @mpi_call
    def Scatter_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._scatter("Scatter_init", sendbuf, recvbuf, root, PERSISTENT, v=False)

    @mpi_call
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Scatter blocks of per-rank sizes: ``sendbuf = [buf, counts, displs, datatype]``."""
        self._scatter("Scatterv", sendbuf, recvbuf, root, BLOCKING, v=True)

    @mpi_call
    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatterv", sendbuf, recvbuf, root, NONBLOCKING, v=True)

    @mpi_call
    def Scatterv_init(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._scatter("Scatterv_init", sendbuf, recvbuf, root, PERSISTENT, v=True)

    @mpi_call
    @comm_locked
    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Send the i-th object of ``sendobj`` (a sequence of size items) at root to rank i."""
        impl = self._live()
        root = self._check_root(impl, root, "scatter")
        pickles = None
        if impl.rank == root:
            pickles = [pickle.dumps(item) for item in object_items(sendobj, impl.size)]

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.scatter_objects(rank, size, root, pickles), None

        return pickle.loads(self._collective("scatter", "scatter", root, plan, BLOCKING))

    # -- allgather / alltoall --------------------------------------------------------------
    def _allgather(self, call: str, sendbuf: Any, recvbuf: Any, mode: Form, v: bool) -> Any:
        impl = self._live()
        rank, size = impl.rank, impl.size
        whole = None
        if v:
            views, finish = vector(recvbuf, size, writable=True)
        else:
            whole, views, finish = blocks(recvbuf, size, writable=True)
        block = None if in_place(sendbuf) else send_memory(sendbuf)
        if block is not None and block.nbytes != views[rank].nbytes:
            raise MPIException(
                ERR_COUNT,
                f"{call}: this rank sends {block.nbytes} bytes but its block in the receive "
                f"buffer has {views[rank].nbytes}",
            )
        if (
            mode is BLOCKING
            and whole is not None
            and views[rank].nbytes < LARGE_ALLGATHER
            and fast.allgather(
                self,
                impl,
                call,
                views[rank] if block is None else block,
                whole.mem[: views[rank].nbytes * size],
            )
            is not fast.GENERAL
        ):
            return None if finish is None else finish(None)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v or views[rank].nbytes >= LARGE_ALLGATHER:
                if block is not None:
                    views[rank][:] = block
                whole_out = None if whole is None else whole.mem[: views[rank].nbytes * size]
                return algo.allgatherv_ring(rank, size, views, whole_out), finish
            own = block if block is not None else bytes(views[rank])
            assert whole is not None
            out = whole.mem[: views[rank].nbytes * size]
            return algo.allgather_bruck(rank, size, memoryview(own), out), finish

        return self._collective(call, "Allgatherv" if v else "Allgather", 0, plan, mode)

    @mpi_call
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Every rank receives every rank's block, in rank order."""
        impl = self._impl
        if (
            impl is None
            or type(sendbuf) is not np.ndarray
            or fast.allgather_arrays(self, impl, sendbuf, recvbuf) is fast.GENERAL
        ):
            self._allgather("Allgather", sendbuf, recvbuf, BLOCKING, v=False)

    @mpi_call
    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgather", sendbuf, recvbuf, NONBLOCKING, v=False)

    @mpi_call
    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._allgather("Allgather_init", sendbuf, recvbuf, PERSISTENT, v=False)

    @mpi_call
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._allgather("Allgatherv", sendbuf, recvbuf, BLOCKING, v=True)

    @mpi_call
    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgatherv", sendbuf, recvbuf, NONBLOCKING, v=True)

    @mpi_call
    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._allgather("Allgatherv_init", sendbuf, recvbuf, PERSISTENT, v=True)

    @mpi_call
    @comm_locked
    def allgather(self, sendobj: Any) -> list[Any]:
        """Every rank returns the list of every rank's object."""
        data = pickle.dumps(sendobj)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.allgather_objects(rank, size, data), None

        wires = self._collective("allgather", "allgather", 0, plan, BLOCKING)
        return [pickle.loads(w) for w in wires]

    def _alltoall(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, mode: Form) -> Any:
        impl = self._live()
        size = impl.size
        sends, recvs, finish = exchange(call, kind, sendbuf, recvbuf, size, size, True)
        if (
            mode is BLOCKING
            and fast.alltoall(self, impl, call, kind, sends, recvs) is not fast.GENERAL
        ):
            return None if finish is None else finish(None)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.alltoallw_pairwise(rank, size, sends, recvs), finish

        return self._collective(call, kind, 0, plan, mode)

    @mpi_call
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Rank i sends its j-th block to rank j, which stores it as its i-th block."""
        impl = self._impl
        if (
            impl is None
            or type(sendbuf) is not np.ndarray
            or fast.alltoall_arrays(self, impl, sendbuf, recvbuf) is fast.GENERAL
        ):
            self._alltoall("Alltoall", "Alltoall", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoall", "Alltoall", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoall_init", "Alltoall", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall("Alltoallv", "Alltoallv", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallv", "Alltoallv", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoallv_init", "Alltoallv", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """Alltoall with per-peer counts, byte displacements and datatypes."""
        self._alltoall("Alltoallw", "Alltoallw", sendbuf, recvbuf, BLOCKING)

    @mpi_call
    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallw", "Alltoallw", sendbuf, recvbuf, NONBLOCKING)

    @mpi_call
    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Info | None = None) -> Prequest:
        return self._alltoall("Alltoallw_init", "Alltoallw", sendbuf, recvbuf, PERSISTENT)

    @mpi_call
    @comm_locked
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Rank i sends ``sendobj[j]`` to rank j; returns the objects received, by rank."""
        impl = self._live()
        pickles = [pickle.dumps(item) for item in object_items(sendobj, impl.size)]

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.alltoall_objects(rank, size, pickles), None

        wires = self._collective("alltoall", "alltoall", 0, plan, BLOCKING)
        return [pickle.loads(w) for w in wires]
