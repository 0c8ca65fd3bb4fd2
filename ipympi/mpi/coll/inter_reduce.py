"""Intercommunicator reductions: Reduce, Allreduce, Reduce_scatter(_block) and object forms.

A reduction on an intercommunicator combines the contributions of one group and
delivers the result to the *other* group (MPI 5.9.1, 5.9.6, 5.10): Reduce to
the ``ROOT`` process, Allreduce to every process, Reduce_scatter(_block) in
blocks over the processes. Each group first reduces to its leader (local rank 0)
with the binomial tree of :mod:`ipympi.core.reductions`, in ascending rank order so
that non-commutative operations combine as the standard requires; the leaders
then trade their results and each spreads the other group's result in its own
group. Every buffer form exists blocking, nonblocking and persistent;
``IN_PLACE`` is refused (``ERR_BUFFER``).

Reduce_scatter_block: each process contributes ``n * recvcount`` elements (n
the size of its own group) and receives block ``rank`` (``recvcount``
elements) of the other group's reduction; Reduce_scatter: ``recvcounts`` (one
entry per process of the own group, the same on all of them) cut the other
group's reduction into blocks. The element counts of both groups must be equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ...core import algorithms as algo
from ...core import reductions as red
from ...core.errors import ERR_COUNT
from ...core.errors import Exception as MPIException
from ...core.lazynumpy import np
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm, Round
from ..buffers import as_ndarray, recv_buffer
from ..errhandling import mpi_call
from ..op import SUM
from ..pickling import pickle
from ..request import Prequest, Request
from .inter_core import InterCollBase, no_in_place, nothing, shifted
from .reduce import _object_op, _Reduction

if TYPE_CHECKING:
    from ..info import Info
    from ..op import Op

__all__ = ["InterReductions"]


def _reduce_to_leader(
    values: Any, value: Any, commutative: bool, rank: int, n: int, lo: int
) -> Algorithm:
    """The local group's reduction, at its rank 0 (None elsewhere)."""
    return shifted(red.reduce_binomial(rank, n, 0, values, value, commutative), lo)


class InterReductions(InterCollBase):
    """Reduce, Allreduce and Reduce_scatter(_block) of ``MPI.Intercomm``."""

    __slots__ = ()

    # -- reduce ----------------------------------------------------------------------------
    def _reduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, root: int, mode: Form) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        if role == "root":
            out = recv_buffer(recvbuf)
            args = _Reduction(call, recvbuf, None, op, in_place_ok=False, needs_output=False)
            args.out = out
        elif role == "leaf":
            args = _Reduction(call, sendbuf, None, op, in_place_ok=False, needs_output=False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return nothing(), None
            values = args.values
            if role == "root":
                holder, target = values.target(args.source)

                def receive() -> Algorithm:
                    yield Round("receive the result", recvs=[(ro, target)])
                    return holder

                return receive(), args.store

            def run() -> Algorithm:
                commutative = args.op._commutative
                mine = yield from _reduce_to_leader(values, args.fresh(), commutative, rank, n, lo)
                if rank == 0:
                    yield Round("send the result to the root", sends=[(uroot, values.wire(mine))])

            return run(), None

        return self._inter(call, "Reduce", uroot, build, mode)

    @mpi_call
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> None:
        """The ``ROOT`` process receives the reduction of the other group's buffers."""
        self._reduce("Reduce", sendbuf, recvbuf, op, root, BLOCKING)

    @mpi_call
    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> Request:
        return self._reduce("Ireduce", sendbuf, recvbuf, op, root, NONBLOCKING)

    @mpi_call
    def Reduce_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0, info: Info | None = None
    ) -> Prequest:
        return self._reduce("Reduce_init", sendbuf, recvbuf, op, root, PERSISTENT)

    @mpi_call
    def reduce(self, sendobj: Any, op: Op = SUM, root: int = 0) -> Any:
        """Lower-case Reduce: the ``ROOT`` process returns the other group's reduction."""
        role, uroot = self._role(root, "reduce")
        combine = _object_op(op, "reduce")
        values = red.ObjectValues(combine)
        commutative = getattr(combine, "_commutative", False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return nothing(), None
            if role == "root":

                def receive() -> Algorithm:
                    (got,) = yield Round("receive the result", recvs=[(ro, None)])
                    return pickle.loads(got.data)

                return receive(), None

            def run() -> Algorithm:
                mine = yield from _reduce_to_leader(values, sendobj, commutative, rank, n, lo)
                if rank == 0:
                    yield Round("send the result to the root", sends=[(uroot, values.wire(mine))])

            return run(), None

        result = self._inter("reduce", "reduce", uroot, build)
        return result if role == "root" else None

    # -- allreduce -------------------------------------------------------------------------
    def _allreduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, mode: Form) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        args = _Reduction(call, sendbuf, recvbuf, op, in_place_ok=False, needs_output=True)
        commutative = args.op._commutative

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            values = args.values
            holder, target = values.target(args.source)

            def run() -> Algorithm:
                mine = yield from _reduce_to_leader(values, args.fresh(), commutative, rank, n, lo)
                if rank == 0:
                    yield Round(
                        "exchange results with the remote leader",
                        sends=[(ro, values.wire(mine))],
                        recvs=[(ro, target)],
                    )
                yield from shifted(algo.bcast_binomial(rank, n, 0, target), lo)  # type: ignore[arg-type]
                return holder

            return run(), args.store

        return self._inter(call, "Allreduce", 0, build, mode)

    @mpi_call
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Each group receives the reduction of the other group's buffers."""
        self._allreduce("Allreduce", sendbuf, recvbuf, op, BLOCKING)

    @mpi_call
    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._allreduce("Iallreduce", sendbuf, recvbuf, op, NONBLOCKING)

    @mpi_call
    def Allreduce_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._allreduce("Allreduce_init", sendbuf, recvbuf, op, PERSISTENT)

    @mpi_call
    def allreduce(self, sendobj: Any, op: Op = SUM) -> Any:
        """Lower-case Allreduce: each group returns the other group's reduction."""
        combine = _object_op(op, "allreduce")
        values = red.ObjectValues(combine)
        commutative = getattr(combine, "_commutative", False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            def run() -> Algorithm:
                mine = yield from _reduce_to_leader(values, sendobj, commutative, rank, n, lo)
                wire = None
                if rank == 0:
                    (got,) = yield Round(
                        "exchange results with the remote leader",
                        sends=[(ro, values.wire(mine))],
                        recvs=[(ro, None)],
                    )
                    wire = bytes(got.data)
                return (yield from shifted(algo.bcast_objects(rank, n, 0, wire), lo))

            return run(), None

        return pickle.loads(self._inter("allreduce", "allreduce", 0, build))

    # -- reduce_scatter ----------------------------------------------------------------------
    def _reduce_scatter(
        self, call: str, kind: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any, mode: Form
    ) -> Any:
        no_in_place(call, sendbuf, recvbuf)
        impl = self._live()
        n, me = impl.size, impl.rank
        args = _Reduction(  # the send buffer holds the blocks of several ranks: checked below
            call, sendbuf, recvbuf, op, in_place_ok=False, needs_output=True, out_blocks=0
        )
        total = args.source.size
        if counts is None:
            if total % n:
                raise MPIException(
                    ERR_COUNT,
                    f"{call}: {total} elements do not split evenly over the {n} processes "
                    "of the local group",
                )
            counts = [total // n] * n
        else:
            counts = [int(c) for c in counts]
        if len(counts) != n or sum(counts) > total or any(c < 0 for c in counts):
            raise MPIException(
                ERR_COUNT,
                f"{call}: invalid receive counts {counts} (one per process of the local group "
                f"of {n}, at most {total} elements in all)",
            )
        assert args.out is not None
        if args.out.count < counts[me]:
            raise MPIException(
                ERR_COUNT,
                f"{call}: the receive buffer holds {args.out.count} elements, needs {counts[me]}",
            )
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(int)
        itemsize = args.source.itemsize
        scratch = np.empty(counts[me], dtype=args.source.dtype)
        block = kind == "Reduce_scatter_block"

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            values = args.values
            mem = scratch.data.cast("B") if scratch.size else memoryview(bytearray())

            def run() -> Algorithm:
                commutative = args.op._commutative
                mine = yield from _reduce_to_leader(values, args.fresh(), commutative, rank, n, lo)
                theirs = None
                if rank == 0:
                    theirs, target = values.target(args.source)
                    yield Round(
                        "exchange results with the remote leader",
                        sends=[(ro, values.wire(mine))],
                        recvs=[(ro, target)],
                    )
                if block:
                    src = values.wire(theirs)[: offsets[-1] * itemsize] if rank == 0 else None
                    yield from shifted(algo.scatter_binomial(rank, n, 0, src, mem), lo)
                    return
                views = None
                if rank == 0:
                    flat = values.wire(theirs)
                    views = [
                        flat[offsets[r] * itemsize : offsets[r + 1] * itemsize] for r in range(n)
                    ]
                yield from shifted(algo.scatterv_linear(rank, n, 0, views, mem), lo)

            return run(), _store_block(args, scratch)

        return self._inter(call, kind, 0, build, mode)

    @mpi_call
    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Block ``rank`` (``recvcount`` elements) of the other group's reduction."""
        self._reduce_scatter(
            "Reduce_scatter_block",
            "Reduce_scatter_block",
            sendbuf,
            recvbuf,
            None,
            op,
            BLOCKING,
        )

    @mpi_call
    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._reduce_scatter(
            "Ireduce_scatter_block",
            "Reduce_scatter_block",
            sendbuf,
            recvbuf,
            None,
            op,
            NONBLOCKING,
        )

    @mpi_call
    def Reduce_scatter_block_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._reduce_scatter(
            "Reduce_scatter_block_init",
            "Reduce_scatter_block",
            sendbuf,
            recvbuf,
            None,
            op,
            PERSISTENT,
        )

    @mpi_call
    def Reduce_scatter(
        self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM
    ) -> None:
        """``recvcounts[rank]`` elements of the other group's reduction, in rank order."""
        self._reduce_scatter(
            "Reduce_scatter", "Reduce_scatter", sendbuf, recvbuf, recvcounts, op, BLOCKING
        )

    @mpi_call
    def Ireduce_scatter(
        self, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Op = SUM
    ) -> Request:
        return self._reduce_scatter(
            "Ireduce_scatter", "Reduce_scatter", sendbuf, recvbuf, recvcounts, op, NONBLOCKING
        )

    @mpi_call
    def Reduce_scatter_init(
        self,
        sendbuf: Any,
        recvbuf: Any,
        recvcounts: Any = None,
        op: Op = SUM,
        info: Info | None = None,
    ) -> Prequest:
        return self._reduce_scatter(
            "Reduce_scatter_init",
            "Reduce_scatter",
            sendbuf,
            recvbuf,
            recvcounts,
            op,
            PERSISTENT,
        )


def _store_block(args: _Reduction, scratch: np.ndarray) -> Callable[[Any], None]:
    """The finishing step of Reduce_scatter: this process's block into its receive buffer."""

    def finish(_: Any) -> None:
        assert args.out is not None
        out = as_ndarray(args.out).reshape(-1)
        np.copyto(out[: scratch.size], scratch)
        unpack = getattr(args.out, "unpack", None)
        if unpack is not None:
            unpack(args.out.mem.nbytes)

    return finish
