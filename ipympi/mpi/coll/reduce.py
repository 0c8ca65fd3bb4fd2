"""Reduction collectives of ``MPI.Intracomm``: Reduce, Allreduce, Reduce_scatter(_block),
Scan, Exscan, in blocking, nonblocking, persistent and lower-case forms.

The reduction runs on a private working copy of each rank's contribution (a
typed numpy array, or a Python object for lower-case calls) with the
algorithms of ``core.reductions``; results are copied into the receive buffers at
the end. ``IN_PLACE`` takes the input from the receive buffer where the
standard allows it (Reduce at the root; Allreduce, Reduce_scatter, Scan,
Exscan everywhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core import algorithms as algo
from ...core import reductions as red
from ...core.errors import ERR_BUFFER, ERR_COUNT, ERR_OP
from ...core.errors import Exception as MPIException
from ...core.lazynumpy import np
from ...core.modes import BLOCKING, NONBLOCKING, PERSISTENT, Form
from ...core.schedule import Algorithm
from ...progress import tracing as _trace
from ..buffers import (
    BufferSpec,
    as_ndarray,
    check_match,
    ndarray_datatype,
    recv_buffer,
    send_buffer,
)
from ..errhandling import mpi_call
from ..handles import CollectiveMixin
from ..op import MAX, MIN, PROD, SUM, Op
from ..rawmem import IN_PLACE
from ..request import Prequest, Request
from . import fast
from .bufforms import in_place as in_place_or_none

if TYPE_CHECKING:
    from ..info import Info

__all__ = ["Reductions"]

# Above this size (bytes) a commutative Allreduce uses the ring algorithm.
LARGE_ALLREDUCE = 256 * 1024


def _check_op(op: Any, call: str) -> Op:
    if not isinstance(op, Op) or not op:
        raise MPIException(ERR_OP, f"{call}: {op!r} is not a valid reduction operation")
    return op


def _typed(spec: BufferSpec) -> np.ndarray:
    """The spec's elements as a 1-D typed array viewing its memory."""
    return as_ndarray(spec)


class _Reduction:
    """Parsed arguments of one buffer reduction call on one rank."""

    def __init__(
        self,
        call: str,
        sendbuf: Any,
        recvbuf: Any,
        op: Any,
        in_place_ok: bool,
        needs_output: bool,
        one_element: bool = False,
        out_blocks: int = 1,
    ) -> None:
        """``one_element``: the algorithm may work on a one-element buffer as a Python
        number (:class:`~ipympi.core.reductions.ScalarValues`; not while tracing, whose
        drawings show buffers as arrays). ``out_blocks``: the send buffer holds that
        many receive buffers' worth of elements (0: no such rule, Reduce_scatter)."""
        self.op = _check_op(op, call)
        if sendbuf is IN_PLACE and not in_place_ok:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is not allowed here")
        in_place = self.in_place = in_place_ok and in_place_or_none(sendbuf)
        self.out: BufferSpec | None = recv_buffer(recvbuf) if needs_output or in_place else None
        source = self.out if in_place else send_buffer(sendbuf)
        assert source is not None
        if self.out is not None and source is not self.out:
            check_match(source, self.out, out_blocks)
        self.datatype = source.datatype
        self.op._check_datatype(self.datatype)
        # The contribution is read when the operation starts (every Start, for a
        # persistent request) into a private copy: algorithms combine in place.
        self.source = _typed(source)
        impl = self.op._impl
        scalar = None
        if one_element and _trace.current is None and self.source.size == 1:
            self._out_array = None if self.out is None else _typed(self.out)
            scalar = red.ScalarValues.for_array(impl, self.source, self._out_array)
        self.scalar = scalar is not None
        self.values: red.Values = scalar or red.ArrayValues(impl.reduce_arrays, self.datatype)
        self._in_output: np.ndarray | None = None  # the accumulator, when it is the output

    def fresh(self) -> Any:
        """A private copy of this rank's contribution, taken now."""
        return self.source.item() if self.scalar else self.source.copy()

    def accumulator(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Where an algorithm that computes in the array it is given, and returns it (the
        ring), computes: (the receive buffer's own elements, this rank's contribution
        for the algorithm to take from: None when it is there already, IN_PLACE), when
        they can hold it (the result then needs no copy: :meth:`store` sees it there);
        else (a private copy of the contribution, None). The receive buffer is undefined
        until the call completes, so using it meanwhile is allowed. While tracing, the
        contribution is in the array from the start (the drawings show it there)."""
        out = None if self.out is None or self.scalar else _typed(self.out)
        if out is None or out.size != self.source.size:
            return self.fresh(), None
        self._in_output = out
        if self.in_place:
            return out, None
        if _trace.current is not None:
            np.copyto(out, self.source)
            return out, None
        return out, self.source

    def direct(self) -> tuple[np.ndarray, np.ndarray]:
        """(this rank's contribution, where the result goes) for an algorithm that other
        ranks read from (``shmpath.allreduce_direct``): contiguous arrays, the result in
        the receive buffer's own elements when they can hold it (:meth:`store` then sees
        it there), else in a new array; the same array with IN_PLACE."""
        src = np.ascontiguousarray(self.source)
        if self.in_place and src is self.source:  # the receive buffer's own elements
            self._in_output = src
            return src, src
        out = None if self.out is None else _typed(self.out)
        if out is None or out.size != src.size or not out.flags.c_contiguous:
            out = np.empty_like(src)
        self._in_output = out
        return src, out

    def store(self, result: Any) -> None:
        """Copy a result into the receive buffer (and scatter derived types)."""
        if result is None or self.out is None:
            return
        # Not None: a scalar reduction with an output has its array (see __init__).
        out: np.ndarray = self._out_array if self.scalar else _typed(self.out)  # type: ignore[assignment]
        size = 1 if self.scalar else result.size
        if out.size != size:
            raise MPIException(
                ERR_COUNT,
                f"the receive buffer holds {out.size} elements, the result has {size}",
            )
        if self.scalar:
            out[0] = result
        elif result is not self._in_output:
            np.copyto(out, result)  # both 1-D
        unpack = self.out.unpack
        if unpack is not None:
            unpack(self.out.mem.nbytes)


class Reductions(CollectiveMixin):
    """Mixin with the reduction collectives; ``self`` is an ``MPI.Intracomm``."""

    __slots__ = ()

    # -- Reduce ----------------------------------------------------------------------
    def _reduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, root: int, mode: Form) -> Any:
        impl = self._live()
        root = self._check_root(impl, root, call)
        at_root = impl.rank == root
        if sendbuf is IN_PLACE and not at_root:
            raise MPIException(ERR_BUFFER, f"{call}: MPI.IN_PLACE is allowed at the root only")
        args = _Reduction(
            call, sendbuf, recvbuf, op, in_place_ok=at_root, needs_output=at_root, one_element=True
        )
        if mode is BLOCKING and args.source.nbytes < LARGE_ALLREDUCE:
            result = fast.reduce(self, impl, call, root, args.values, args.fresh())
            if result is not fast.GENERAL:
                args.store(result)
                return None

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            gen = red.reduce_binomial(
                rank, size, root, args.values, args.fresh(), args.op._commutative
            )
            return gen, args.store

        return self._collective(call, "Reduce", root, plan, mode)

    @mpi_call
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM, root: int = 0) -> None:
        """Combine every rank's buffer with ``op`` into ``recvbuf`` at ``root``."""
        impl = self._live()
        if type(root) is int and 0 <= root < impl.size:
            # one element as a Python number, as in Allreduce (the receive buffer
            # matters at the root only)
            at_root = impl.rank == root
            values = _one_element(sendbuf, recvbuf if at_root else sendbuf, op)
            if values is not None:
                result = fast.reduce(self, impl, "Reduce", root, values, sendbuf.item())
                if result is not fast.GENERAL:
                    if at_root:
                        recvbuf[0] = result
                    return
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
        """Combine one Python object per rank; the root returns the result, others None."""
        impl = self._live()
        root = self._check_root(impl, root, "reduce")
        op = _object_op(op, "reduce")
        values = red.ObjectValues(op)
        commutative = getattr(op, "_commutative", False)
        result = fast.reduce(self, impl, "reduce", root, values, sendobj, "reduce")
        if result is not fast.GENERAL:
            return result

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return red.reduce_binomial(rank, size, root, values, sendobj, commutative), None

        return self._collective("reduce", "reduce", root, plan, BLOCKING)

    # -- Allreduce ---------------------------------------------------------------------
    def _allreduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, mode: Form) -> Any:
        impl = self._live()
        args = _Reduction(
            call, sendbuf, recvbuf, op, in_place_ok=True, needs_output=True, one_element=True
        )
        nbytes = args.source.nbytes
        ring = (
            nbytes >= LARGE_ALLREDUCE
            and args.op._commutative
            and impl.size > 1
            and args.source.size >= impl.size
        )
        if mode is BLOCKING:
            if ring:  # on one host: each rank reads the others' memory
                src, out = args.direct()
                result = fast.allreduce_direct(self, impl, call, args.values, src, out)
            elif not args.scalar and args.op._is_predefined():
                # combined into the output from the other ranks' data where it lies (a
                # user's function might write into its input: it gets copies as before)
                src, out = args.direct()
                result = fast.allreduce_into(self, impl, call, args.values, src, out)
            else:
                result = fast.allreduce(self, impl, call, "Allreduce", args.values, args.fresh())
            if result is not fast.GENERAL:
                args.store(result)
                return None

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            if ring:
                # A ring is for large buffers only: their values are ArrayValues.
                gen = red.allreduce_ring(rank, size, args.values, *args.accumulator())  # type: ignore[arg-type]
            else:
                gen = red.allreduce_recursive_doubling(rank, size, args.values, args.fresh())
            return gen, args.store

        return self._collective(call, "Allreduce", 0, plan, mode)

    @mpi_call
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Combine every rank's buffer with ``op``; every rank gets the same result."""
        values = _one_element(sendbuf, recvbuf, op)
        if values is not None:
            impl = self._live()
            result = fast.allreduce(self, impl, "Allreduce", "Allreduce", values, sendbuf.item())
            if result is not fast.GENERAL:
                recvbuf[0] = result
                return
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
        """Combine one Python object per rank; every rank returns the result."""
        values = _PREDEFINED_OBJECT_VALUES.get(op._impl) if type(op) is Op else None
        if values is None:
            values = red.ObjectValues(_object_op(op, "allreduce"))
        impl = self._live()
        result = fast.allreduce(self, impl, "allreduce", "allreduce", values, sendobj)
        if result is not fast.GENERAL:
            return result

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return red.allreduce_recursive_doubling(rank, size, values, sendobj), None

        return self._collective("allreduce", "allreduce", 0, plan, BLOCKING)

    # -- Reduce_scatter ------------------------------------------------------------------
    def _reduce_scatter(
        self, call: str, kind: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any, mode: Form
    ) -> Any:
        impl = self._live()
        size = impl.size
        args = _Reduction(
            call, sendbuf, recvbuf, op, in_place_ok=True, needs_output=True,
            out_blocks=impl.size if kind == "Reduce_scatter_block" else 0,
        )  # fmt: skip
        total = args.source.size
        if counts is None and kind == "Reduce_scatter" and not args.in_place:
            # As in mpi4py: each rank's share is what its receive buffer holds.
            assert args.out is not None
            counts = self.allgather(args.out.count)
        elif counts is None:
            counts = [total // size] * size
            if total % size:
                raise MPIException(
                    ERR_COUNT, f"{call}: {total} elements do not split evenly over {size} ranks"
                )
        counts = [int(c) for c in counts]
        if len(counts) != size or any(c < 0 for c in counts):
            raise MPIException(ERR_COUNT, f"{call}: invalid receive counts {counts}")
        if sum(counts) != total:
            raise ValueError(f"mismatch in send count {total} and sum(counts) {sum(counts)}")
        out_count = None if args.in_place or args.out is None else args.out.count
        if out_count is not None and out_count < counts[impl.rank]:
            raise ValueError(
                f"mismatch in receive count {out_count} and counts[{impl.rank}] {counts[impl.rank]}"
            )
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(int)
        itemsize = args.source.itemsize

        def finish(_: Any) -> None:
            assert args.out is not None
            out = _typed(args.out)
            mine = counts[impl.rank]
            np.copyto(out[:mine], scratch[:mine])
            unpack = getattr(args.out, "unpack", None)
            if unpack is not None:
                unpack(args.out.mem.nbytes)

        scratch = np.empty(counts[impl.rank], dtype=args.source.dtype)

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            def reduce_then_scatterv() -> Algorithm:
                commutative = args.op._commutative
                result = yield from red.reduce_binomial(
                    rank, size, 0, args.values, args.fresh(), commutative
                )
                mem = scratch.data.cast("B") if scratch.size else memoryview(bytearray())
                if rank == 0:
                    flat = memoryview(result).cast("B") if result.size else memoryview(b"")
                    views = [
                        flat[offsets[r] * itemsize : offsets[r + 1] * itemsize] for r in range(size)
                    ]
                    yield from algo.scatterv_linear(rank, size, 0, views, mem)
                else:
                    yield from algo.scatterv_linear(rank, size, 0, None, mem)

            return reduce_then_scatterv(), finish

        return self._collective(call, kind, 0, plan, mode)

    @mpi_call
    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Reduce ``size`` equal blocks; rank i receives the i-th block of the result."""
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
        """Reduce, then rank i receives ``recvcounts[i]`` elements of the result."""
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

    # -- Scan / Exscan ----------------------------------------------------------------------
    def _scan(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, op: Any, mode: Form) -> Any:
        args = _Reduction(
            call, sendbuf, recvbuf, op, in_place_ok=True, needs_output=True, one_element=True
        )
        scan = red.scan_recursive_doubling if kind == "Scan" else red.exscan_recursive_doubling

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return scan(rank, size, args.values, args.fresh()), args.store

        return self._collective(call, kind, 0, plan, mode)

    @mpi_call
    def Scan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Inclusive prefix reduction: rank i gets ranks 0..i combined."""
        self._scan("Scan", "Scan", sendbuf, recvbuf, op, BLOCKING)

    @mpi_call
    def Iscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._scan("Iscan", "Scan", sendbuf, recvbuf, op, NONBLOCKING)

    @mpi_call
    def Scan_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._scan("Scan_init", "Scan", sendbuf, recvbuf, op, PERSISTENT)

    @mpi_call
    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> None:
        """Exclusive prefix reduction: rank i gets ranks 0..i-1; rank 0's buffer is untouched."""
        self._scan("Exscan", "Exscan", sendbuf, recvbuf, op, BLOCKING)

    @mpi_call
    def Iexscan(self, sendbuf: Any, recvbuf: Any, op: Op = SUM) -> Request:
        return self._scan("Iexscan", "Exscan", sendbuf, recvbuf, op, NONBLOCKING)

    @mpi_call
    def Exscan_init(
        self, sendbuf: Any, recvbuf: Any, op: Op = SUM, info: Info | None = None
    ) -> Prequest:
        return self._scan("Exscan_init", "Exscan", sendbuf, recvbuf, op, PERSISTENT)

    @mpi_call
    def scan(self, sendobj: Any, op: Op = SUM) -> Any:
        """Inclusive prefix reduction of Python objects."""
        values = red.ObjectValues(_object_op(op, "scan"))

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return red.scan_recursive_doubling(rank, size, values, sendobj), None

        return self._collective("scan", "scan", 0, plan, BLOCKING)

    @mpi_call
    def exscan(self, sendobj: Any, op: Op = SUM) -> Any:
        """Exclusive prefix reduction of Python objects; rank 0 returns None."""
        values = red.ObjectValues(_object_op(op, "exscan"))

        def plan(rank: int, size: int) -> tuple[Algorithm, Any]:
            return red.exscan_recursive_doubling(rank, size, values, sendobj), None

        return self._collective("exscan", "exscan", 0, plan, BLOCKING)


def _one_element(sendbuf: Any, recvbuf: Any, op: Any) -> red.ScalarValues | None:
    """How to reduce ``sendbuf`` into ``recvbuf`` as Python numbers, when both are
    plain one-element 1-D numpy arrays of one native integer or float64 type that
    ``op`` (a predefined operation) reduces; else None.

    Blocking Allreduce and Reduce then skip parsing their buffers into specifications: one
    such call (a norm, a dot product, a residual: the most frequent Allreduce)
    costs as much again as its messages on a busy machine. Anything else, or a
    check that fails, takes the general parse, which raises the usual errors.
    """
    if (
        type(sendbuf) is not np.ndarray
        or type(recvbuf) is not np.ndarray
        or sendbuf.shape != (1,)
        or recvbuf.shape != (1,)
        or type(op) is not Op
    ):
        return None
    dtype = sendbuf.dtype
    if recvbuf.dtype != dtype or not dtype.isnative or not recvbuf.flags.writeable:
        return None
    key = (op._impl, dtype.char)
    values = _SCALAR_VALUES.get(key, False)
    if values is False:
        values = _SCALAR_VALUES[key] = _scalar_values_for(op, sendbuf)
    return values  # type: ignore[return-value]


def _scalar_values_for(op: Op, array: np.ndarray) -> red.ScalarValues | None:
    """The :class:`~ipympi.core.reductions.ScalarValues` of ``op`` on ``array``'s type,
    when ``op`` is predefined and valid for it, else None."""
    datatype = ndarray_datatype(array.dtype)
    if datatype is None or op._impl.key is None:
        return None
    try:
        op._check_datatype(datatype)
    except MPIException:
        return None
    return red.ScalarValues.for_array(op._impl, array, array)


# (operation, dtype character) -> ScalarValues, or None where the general path runs
_SCALAR_VALUES: dict[tuple[Any, str], red.ScalarValues | None] = {}


def _object_op(op: Any, call: str) -> Any:
    """The object-level combine function of an ``MPI.Op`` (or a plain callable)."""
    if isinstance(op, Op):
        _check_op(op, call)
        return _ObjectOp(op)
    if callable(op):
        return op
    raise MPIException(ERR_OP, f"{call}: {op!r} is not a reduction operation")


class _ObjectOp:
    """Adapter: ``combine(left, right)`` for lower-case reductions, keeping commutativity."""

    def __init__(self, op: Op) -> None:
        self._op = op
        self._commutative = op._commutative

    def __call__(self, left: Any, right: Any) -> Any:
        return self._op._reduce_objects(left, right)


# The object values of the predefined operations lower-case allreduce uses most, by
# operation object (every handle of SUM has SUM's), combining with their functions.
_PREDEFINED_OBJECT_VALUES = {
    op._impl: red.ObjectValues(op._impl.reduce_objects) for op in (SUM, PROD, MAX, MIN)
}
