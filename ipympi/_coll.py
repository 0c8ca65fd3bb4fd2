"""Collective operations of ``MPI.Intracomm`` (the standard's collective chapter).

Every collective exists in up to four forms with mpi4py's names: blocking
(``Bcast``), nonblocking (``Ibcast``, returning a request), persistent
(``Bcast_init``, a request started with ``Start``), and lower case for Python
objects (``bcast``). Each form checks its arguments (root, ``IN_PLACE`` where
the standard allows it, op and datatype), picks an algorithm by message size
and number of ranks (``_algorithms``; reductions are in ``_coll_reduce``) and
runs it through ``_collsched``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import _algorithms as algo
from . import _collfast as fast
from ._args import root_rank
from ._buffers import IN_PLACE, BufferSpec, recv_buffer, send_buffer
from ._collsched import Algorithm, CollOp, check_reported, run_blocking, run_in_mode, signature
from ._errhandling import mpi_call
from ._errors import ERR_ARG, ERR_BUFFER, ERR_COUNT
from ._errors import Exception as MPIException
from ._request import Prequest, Request

if TYPE_CHECKING:
    from ._comm import CommImpl

__all__ = ["Collectives"]

# Above these sizes (bytes) the bandwidth-efficient algorithms take over.
LARGE_BCAST = 256 * 1024
LARGE_ALLGATHER = 64 * 1024

# A plan builds (algorithm, finish) for one run; persistent requests rerun it.
Plan = Callable[[int, int], "tuple[Algorithm, Callable[[Any], Any] | None]"]


def _in_place(buf: Any) -> bool:
    return buf is IN_PLACE


def _unpack_after(spec: BufferSpec, nbytes: int | None = None) -> Callable[[Any], Any] | None:
    """The finishing step for receive buffers of non-contiguous datatypes:
    scatter the first ``nbytes`` (default: all) received bytes into place."""
    unpack = spec.unpack
    if unpack is None:
        return None
    if nbytes is None:
        nbytes = spec.mem.nbytes

    def finish(value: Any) -> Any:
        unpack(nbytes)
        return value

    return finish


def _chain(*steps: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    live = [s for s in steps if s is not None]
    if not live:
        return None

    def finish(value: Any) -> Any:
        for step in live:
            value = step(value)
        return value

    return finish


def _per_rank(
    spec: Any, size: int, call: str, writable: bool
) -> tuple[BufferSpec, list[memoryview], Callable[[Any], Any] | None]:
    """Parse the buffer of Gather/Scatter/Allgather/Alltoall into one block per rank.

    As in mpi4py, an explicit count (``[buf, count, datatype]``) is the count
    per rank; without one the buffer is split into ``size`` equal blocks.
    Returns the whole spec, the blocks, and the unpacking step for receives.
    """
    parse = recv_buffer if writable else send_buffer
    count = None
    if isinstance(spec, (list, tuple)) and len(spec) in (2, 3) and type(spec[1]) is int:
        count = spec[1]
        if count < 0:
            raise MPIException(ERR_COUNT, f"{call}: negative count {count}")
        whole = parse([spec[0], count * size, *spec[2:]])
    else:
        whole = parse(spec)
    n = whole.mem.nbytes // max(size, 1) if count is None else count * whole.datatype._packed_size
    views = [whole.mem[r * n : (r + 1) * n] for r in range(size)]
    return whole, views, _unpack_after(whole, n * size) if writable else None


def _vspec(spec: Any, size: int, call: str, writable: bool) -> tuple[BufferSpec, list[memoryview]]:
    """Parse a v-variant buffer: ``[buf, counts, displs, datatype]`` and its shorter forms.

    Returns the whole-buffer spec and one byte view per rank.
    """
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3, 4):
        raise MPIException(
            ERR_BUFFER, f"{call}: expected [buf, counts, displs, datatype] or [buf, counts]"
        )
    buf, counts, displs, datatype = spec[0], spec[1], None, None
    if len(spec) == 3:
        if isinstance(spec[2], (list, tuple)) or spec[2] is None:
            displs = spec[2]
        else:
            datatype = spec[2]
    elif len(spec) == 4:
        displs, datatype = spec[2], spec[3]
    if isinstance(counts, tuple) and len(counts) == 2 and isinstance(counts[0], (list, tuple)):
        counts, displs = counts
    if isinstance(counts, int):
        counts = [counts] * size
    counts = list(counts)
    if len(counts) != size or any(c < 0 for c in counts):
        raise MPIException(ERR_COUNT, f"{call}: need {size} non-negative counts, got {counts}")
    if displs is None:
        displs = list(np.concatenate(([0], np.cumsum(counts)[:-1])).astype(int))
    displs = list(displs)
    whole = (recv_buffer if writable else send_buffer)(
        [buf, datatype] if datatype is not None else buf
    )
    # Blocks are measured in the message's packed form (the memory itself for
    # contiguous datatypes); a receive buffer of a derived datatype is unpacked
    # block by block at the end, so only received blocks change.
    packed = whole.datatype._packed_size
    if whole.unpack is not None:
        unpack = whole.unpack
        blocks = [(displ * packed, count * packed) for count, displ in zip(counts, displs)]

        def unpack_blocks(_: int) -> None:
            for offset, nbytes in blocks:
                if nbytes:
                    unpack(nbytes, offset)

        whole = BufferSpec(whole.mem, whole.count, whole.datatype, unpack=unpack_blocks)
    views = []
    for count, displ in zip(counts, displs):
        start, stop = displ * packed, (displ + count) * packed
        if start < 0 or stop > whole.mem.nbytes:
            raise MPIException(
                ERR_BUFFER,
                f"{call}: block of {count} at displacement {displ} lies outside the "
                f"buffer of {whole.mem.nbytes} bytes",
            )
        views.append(whole.mem[start:stop])
    return whole, views


class Collectives:
    """Mixin with every collective operation; ``self`` is an ``MPI.Intracomm``."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _live(self) -> CommImpl: ...

    # -- machinery ----------------------------------------------------------------
    def _check_root(self, impl: CommImpl, root: Any, call: str) -> int:
        """``root`` as a rank of the communicator (see :func:`ipympi._args.root_rank`)."""
        if type(root) is int and 0 <= root < impl.size:
            return root
        return root_rank(impl, root, call)

    def _collective(self, call: str, kind: str, root: int, plan: Plan, mode: str) -> Any:
        """Run ``plan`` as a blocking call, or return its (persistent) request."""
        impl = self._live()
        engine = impl.engine
        sig = signature(kind, root, mode)

        def launch() -> CollOp:
            check_reported(engine, impl.context + 1, call)
            gen, finish = plan(impl.rank, impl.size)
            return CollOp(self, call, gen, sig, finish, root)

        if mode == "blocking":  # the common case, with as few layers as possible
            engine.enter()
            try:
                return run_blocking(launch())
            finally:
                engine.leave()
        return run_in_mode(engine, launch, mode)

    # -- barrier ------------------------------------------------------------------
    def _barrier(self, call: str, mode: str) -> Any:
        if mode == "blocking":
            impl = self._live()
            if fast.barrier(self, impl, call) is not fast.GENERAL:
                return None
        return self._collective(
            call, "Barrier", 0, lambda r, p: (algo.barrier_dissemination(r, p), None), mode
        )

    @mpi_call
    def Barrier(self) -> None:
        """Block until every rank of the communicator has called it."""
        self._barrier("Barrier", "blocking")

    @mpi_call
    def barrier(self) -> None:
        self._barrier("barrier", "blocking")

    @mpi_call
    def Ibarrier(self) -> Request:
        return self._barrier("Ibarrier", "nonblocking")

    @mpi_call
    def Barrier_init(self, info: Any = None) -> Prequest:
        return self._barrier("Barrier_init", "persistent")

    # -- bcast --------------------------------------------------------------------
    def _bcast(self, call: str, buf: Any, root: int, mode: str) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        if _in_place(buf):
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is not allowed in Bcast")
        spec = send_buffer(buf) if impl.rank == root else recv_buffer(buf)
        mem = spec.mem
        finish = None if impl.rank == root else _unpack_after(spec)
        large = mem.nbytes >= LARGE_BCAST and impl.size > 2
        if (
            mode == "blocking"
            and not large
            and fast.bcast(self, impl, call, root, mem) is not fast.GENERAL
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
        self._bcast("Bcast", buf, root, "blocking")

    @mpi_call
    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        return self._bcast("Ibcast", buf, root, "nonblocking")

    @mpi_call
    def Bcast_init(self, buf: Any, root: int = 0, info: Any = None) -> Prequest:
        return self._bcast("Bcast_init", buf, root, "persistent")

    @mpi_call
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Broadcast a Python object from ``root``; every rank returns it."""
        from ._pickle import pickle

        impl = self._live()
        root = self._check_root(impl, root, "bcast")
        data = pickle.dumps(obj) if impl.rank == root else None

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.bcast_objects(rank, size, root, data), None

        wire = self._collective("bcast", "bcast", root, plan, "blocking")
        return obj if impl.rank == root else pickle.loads(wire)

    # -- gather / scatter ---------------------------------------------------------------
    def _gather(self, call: str, sendbuf: Any, recvbuf: Any, root: int, mode: str, v: bool) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        rank, size = impl.rank, impl.size
        at_root = rank == root
        if _in_place(sendbuf) and not at_root:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is allowed at the root only")
        block = None if _in_place(sendbuf) else send_buffer(sendbuf).mem
        if at_root:
            if v:
                whole, views = _vspec(recvbuf, size, call, writable=True)
                finish = _unpack_after(whole)
            else:
                whole, views, finish = _per_rank(recvbuf, size, call, writable=True)
            if block is not None and block.nbytes != views[root].nbytes:
                raise MPIException(
                    ERR_COUNT,
                    f"{call}: the root sends {block.nbytes} bytes but expects "
                    f"{views[root].nbytes} from itself",
                )
        else:
            whole, views, finish = None, None, None

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v:
                return algo.gatherv_linear(rank, size, root, block, views), finish
            own = block if block is not None else views[root]  # type: ignore[index]
            out = whole.mem[: own.nbytes * size] if whole is not None else None
            return algo.gather_binomial(rank, size, root, own, out), finish

        return self._collective(call, "Gatherv" if v else "Gather", root, plan, mode)

    @mpi_call
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather equal blocks from every rank into ``recvbuf`` at ``root``, in rank order."""
        self._gather("Gather", sendbuf, recvbuf, root, "blocking", v=False)

    @mpi_call
    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igather", sendbuf, recvbuf, root, "nonblocking", v=False)

    @mpi_call
    def Gather_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Any:
        return self._gather("Gather_init", sendbuf, recvbuf, root, "persistent", v=False)

    @mpi_call
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Gather blocks of per-rank sizes: ``recvbuf = [buf, counts, displs, datatype]``."""
        self._gather("Gatherv", sendbuf, recvbuf, root, "blocking", v=True)

    @mpi_call
    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igatherv", sendbuf, recvbuf, root, "nonblocking", v=True)

    @mpi_call
    def Gatherv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Any:
        return self._gather("Gatherv_init", sendbuf, recvbuf, root, "persistent", v=True)

    @mpi_call
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Gather one Python object per rank; the root returns the list, others None."""
        from ._pickle import pickle

        impl = self._live()
        root = self._check_root(impl, root, "gather")
        data = pickle.dumps(sendobj)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.gather_objects(rank, size, root, data), None

        wires = self._collective("gather", "gather", root, plan, "blocking")
        return None if wires is None else [pickle.loads(w) for w in wires]

    def _scatter(self, call: str, sendbuf: Any, recvbuf: Any, root: int, mode: str, v: bool) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        rank, size = impl.rank, impl.size
        at_root = rank == root
        if _in_place(recvbuf) and not at_root:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is allowed at the root only")
        spec = None if _in_place(recvbuf) else recv_buffer(recvbuf)
        block = spec.mem if spec is not None else None
        finish = _unpack_after(spec) if spec is not None else None
        src, views = None, None
        if at_root:
            if v:
                _, views = _vspec(sendbuf, size, call, writable=False)
            else:
                whole_src, views, _ = _per_rank(sendbuf, size, call, writable=False)
                src = whole_src.mem[: views[0].nbytes * size]
            if block is not None and block.nbytes != views[root].nbytes:
                raise MPIException(
                    ERR_COUNT,
                    f"{call}: the root sends {views[root].nbytes} bytes to itself but "
                    f"expects {block.nbytes}",
                )

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v:
                return algo.scatterv_linear(rank, size, root, views, block), finish
            # With IN_PLACE the root's own block stays where it is; the tree
            # still hands it a copy, which goes to scratch space.
            own = block if block is not None else memoryview(bytearray(views[root].nbytes))
            return algo.scatter_binomial(rank, size, root, src, own), finish

        return self._collective(call, "Scatterv" if v else "Scatter", root, plan, mode)

    @mpi_call
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Send the i-th block of ``sendbuf`` at ``root`` to rank i."""
        self._scatter("Scatter", sendbuf, recvbuf, root, "blocking", v=False)

    @mpi_call
    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatter", sendbuf, recvbuf, root, "nonblocking", v=False)

    @mpi_call
    def Scatter_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Any:
        return self._scatter("Scatter_init", sendbuf, recvbuf, root, "persistent", v=False)

    @mpi_call
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Scatter blocks of per-rank sizes: ``sendbuf = [buf, counts, displs, datatype]``."""
        self._scatter("Scatterv", sendbuf, recvbuf, root, "blocking", v=True)

    @mpi_call
    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatterv", sendbuf, recvbuf, root, "nonblocking", v=True)

    @mpi_call
    def Scatterv_init(self, sendbuf: Any, recvbuf: Any, root: int = 0, info: Any = None) -> Any:
        return self._scatter("Scatterv_init", sendbuf, recvbuf, root, "persistent", v=True)

    @mpi_call
    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Send the i-th object of ``sendobj`` (a sequence of size items) at root to rank i."""
        from ._pickle import pickle

        impl = self._live()
        root = self._check_root(impl, root, "scatter")
        pickles = None
        if impl.rank == root:
            items = list(sendobj) if sendobj is not None else None
            if items is None or len(items) != impl.size:
                got = "None" if items is None else f"{len(items)} items"
                raise MPIException(
                    ERR_ARG, f"scatter: the root needs a sequence of {impl.size} objects, got {got}"
                )
            pickles = [pickle.dumps(item) for item in items]

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.scatter_objects(rank, size, root, pickles), None

        return pickle.loads(self._collective("scatter", "scatter", root, plan, "blocking"))

    # -- allgather / alltoall --------------------------------------------------------------
    def _allgather(self, call: str, sendbuf: Any, recvbuf: Any, mode: str, v: bool) -> Any:
        impl = self._live()
        rank, size = impl.rank, impl.size
        if v:
            whole, views = _vspec(recvbuf, size, call, writable=True)
            finish = _unpack_after(whole)
        else:
            whole, views, finish = _per_rank(recvbuf, size, call, writable=True)
        block = None if _in_place(sendbuf) else send_buffer(sendbuf).mem
        if block is not None and block.nbytes != views[rank].nbytes:
            raise MPIException(
                ERR_COUNT,
                f"{call}: this rank sends {block.nbytes} bytes but its block in the receive "
                f"buffer has {views[rank].nbytes}",
            )

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if v or views[rank].nbytes >= LARGE_ALLGATHER:
                if block is not None:
                    views[rank][:] = block
                whole_out = None if v else whole.mem[: views[rank].nbytes * size]
                return algo.allgatherv_ring(rank, size, views, whole_out), finish
            own = block if block is not None else bytes(views[rank])
            out = whole.mem[: views[rank].nbytes * size]
            return algo.allgather_bruck(rank, size, memoryview(own), out), finish

        return self._collective(call, "Allgatherv" if v else "Allgather", 0, plan, mode)

    @mpi_call
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Every rank receives every rank's block, in rank order."""
        self._allgather("Allgather", sendbuf, recvbuf, "blocking", v=False)

    @mpi_call
    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgather", sendbuf, recvbuf, "nonblocking", v=False)

    @mpi_call
    def Allgather_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        return self._allgather("Allgather_init", sendbuf, recvbuf, "persistent", v=False)

    @mpi_call
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._allgather("Allgatherv", sendbuf, recvbuf, "blocking", v=True)

    @mpi_call
    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgatherv", sendbuf, recvbuf, "nonblocking", v=True)

    @mpi_call
    def Allgatherv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        return self._allgather("Allgatherv_init", sendbuf, recvbuf, "persistent", v=True)

    @mpi_call
    def allgather(self, sendobj: Any) -> list[Any]:
        """Every rank returns the list of every rank's object."""
        from ._pickle import pickle

        data = pickle.dumps(sendobj)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.allgather_objects(rank, size, data), None

        wires = self._collective("allgather", "allgather", 0, plan, "blocking")
        return [pickle.loads(w) for w in wires]

    def _alltoall(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, mode: str) -> Any:
        impl = self._live()
        size = impl.size
        if kind == "Alltoall":
            whole, recvs, finish = _per_rank(recvbuf, size, call, writable=True)
            if _in_place(sendbuf):
                sends = [memoryview(bytes(view)) for view in recvs]
            else:
                _, sends, _ = _per_rank(sendbuf, size, call, writable=False)
                if sends[0].nbytes != recvs[0].nbytes:
                    raise MPIException(
                        ERR_COUNT,
                        f"{call}: blocks of {sends[0].nbytes} bytes are sent but blocks of "
                        f"{recvs[0].nbytes} bytes are expected",
                    )
        else:
            parse = _wspec if kind == "Alltoallw" else _vspec
            whole, recvs = parse(recvbuf, size, call, writable=True)
            if _in_place(sendbuf):
                sends = [memoryview(bytes(view)) for view in recvs]
            else:
                _, sends = parse(sendbuf, size, call, writable=False)
            finish = _unpack_after(whole)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.alltoallw_pairwise(rank, size, sends, recvs), finish

        return self._collective(call, kind, 0, plan, mode)

    @mpi_call
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Rank i sends its j-th block to rank j, which stores it as its i-th block."""
        self._alltoall("Alltoall", "Alltoall", sendbuf, recvbuf, "blocking")

    @mpi_call
    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoall", "Alltoall", sendbuf, recvbuf, "nonblocking")

    @mpi_call
    def Alltoall_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        return self._alltoall("Alltoall_init", "Alltoall", sendbuf, recvbuf, "persistent")

    @mpi_call
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall("Alltoallv", "Alltoallv", sendbuf, recvbuf, "blocking")

    @mpi_call
    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallv", "Alltoallv", sendbuf, recvbuf, "nonblocking")

    @mpi_call
    def Alltoallv_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        return self._alltoall("Alltoallv_init", "Alltoallv", sendbuf, recvbuf, "persistent")

    @mpi_call
    def Alltoallw(self, sendbuf: Any, recvbuf: Any) -> None:
        """Alltoall with per-peer counts, byte displacements and datatypes."""
        self._alltoall("Alltoallw", "Alltoallw", sendbuf, recvbuf, "blocking")

    @mpi_call
    def Ialltoallw(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallw", "Alltoallw", sendbuf, recvbuf, "nonblocking")

    @mpi_call
    def Alltoallw_init(self, sendbuf: Any, recvbuf: Any, info: Any = None) -> Prequest:
        return self._alltoall("Alltoallw_init", "Alltoallw", sendbuf, recvbuf, "persistent")

    @mpi_call
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Rank i sends ``sendobj[j]`` to rank j; returns the objects received, by rank."""
        from ._pickle import pickle

        impl = self._live()
        items = list(sendobj)
        if len(items) != impl.size:
            raise MPIException(
                ERR_ARG, f"alltoall: need a sequence of {impl.size} objects, got {len(items)}"
            )
        pickles = [pickle.dumps(item) for item in items]

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return algo.alltoall_objects(rank, size, pickles), None

        wires = self._collective("alltoall", "alltoall", 0, plan, "blocking")
        return [pickle.loads(w) for w in wires]


def _wspec(spec: Any, size: int, call: str, writable: bool) -> tuple[BufferSpec, list[memoryview]]:
    """Parse an Alltoallw buffer ``[buf, counts, byte displs, datatypes]``.

    Each block is parsed as ``[region, count, datatype]`` so that per-peer
    derived datatypes work; a receive spec's ``unpack`` scatters every block.
    """
    if not isinstance(spec, (list, tuple)) or len(spec) != 4:
        raise MPIException(ERR_BUFFER, f"{call}: expected [buf, counts, displs, datatypes]")
    buf, counts, displs, datatypes = spec
    parse = recv_buffer if writable else send_buffer
    whole = parse(buf)
    if not (len(counts) == len(displs) == len(datatypes) == size):
        raise MPIException(ERR_COUNT, f"{call}: need {size} counts, displacements and datatypes")
    views, unpacks = [], []
    for count, displ, datatype in zip(counts, displs, datatypes):
        if displ < 0 or displ > whole.mem.nbytes:
            raise MPIException(ERR_BUFFER, f"{call}: displacement {displ} lies outside the buffer")
        block = parse([whole.mem[displ:], count, datatype])
        views.append(block.mem)
        if block.unpack is not None:
            unpacks.append((block.unpack, block.mem.nbytes))
    if unpacks:

        def unpack_blocks(_: int) -> None:
            for unpack, nbytes in unpacks:
                unpack(nbytes)

        whole = BufferSpec(whole.mem, whole.count, whole.datatype, unpack=unpack_blocks)
    return whole, views
