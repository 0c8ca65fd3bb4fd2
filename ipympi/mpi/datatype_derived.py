"""Derived datatypes (MPI-1.1 §3.12, MPI-2 §4.1), decoding, and Pack/Unpack (§3.13).

:class:`DerivedMixin` holds the ``Datatype`` methods that build, decode and pack derived
datatypes; ``Datatype`` in :mod:`ipympi.mpi.datatype` inherits them. The layouts themselves
come from :mod:`ipympi.core.typemap` (and :mod:`ipympi.core.typemap_grid`), the copies from
:mod:`ipympi.core.typemap_copy`.

Envelopes and contents hold Python integers, which have no size limit: a count beyond a
C int is reported as it was given, as MPI 4's large-count (``_c``) calls report it.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core import typemap as tm
from ..core import typemap_copy as tc
from ..core import typemap_count as tcount
from ..core import typemap_grid as tg
from ..core.constants import (
    COMBINER_CONTIGUOUS,
    COMBINER_DARRAY,
    COMBINER_DUP,
    COMBINER_F90_COMPLEX,
    COMBINER_F90_INTEGER,
    COMBINER_F90_REAL,
    COMBINER_HINDEXED,
    COMBINER_HINDEXED_BLOCK,
    COMBINER_HVECTOR,
    COMBINER_INDEXED,
    COMBINER_INDEXED_BLOCK,
    COMBINER_NAMED,
    COMBINER_RESIZED,
    COMBINER_STRUCT,
    COMBINER_SUBARRAY,
    COMBINER_VECTOR,
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    DISTRIBUTE_NONE,
    ORDER_C,
    ORDER_F,
)
from ..core.errors import ERR_ARG, ERR_BUFFER, ERR_COUNT, ERR_RANK, ERR_TRUNCATE, ERR_TYPE
from ..core.errors import Exception as MPIException
from ..core.extfloat import external_floats
from ..core.lazynumpy import np
from .handles import DatatypeMixin
from .rawmem import address_of, byte_view

if TYPE_CHECKING:
    from .datatype import Datatype, _TypeImpl

__all__ = ["Aint_add", "Aint_diff", "DerivedMixin", "Get_address", "check_span"]

# A derived type's contents (Get_contents): integers, addresses, datatypes.
Contents = tuple[list[int], list[int], list[Any]]

_COMBINER_NAMES = {
    COMBINER_NAMED: "NAMED", COMBINER_DUP: "DUP", COMBINER_CONTIGUOUS: "CONTIGUOUS",
    COMBINER_VECTOR: "VECTOR", COMBINER_HVECTOR: "HVECTOR", COMBINER_INDEXED: "INDEXED",
    COMBINER_HINDEXED: "HINDEXED", COMBINER_INDEXED_BLOCK: "INDEXED_BLOCK",
    COMBINER_HINDEXED_BLOCK: "HINDEXED_BLOCK", COMBINER_STRUCT: "STRUCT",
    COMBINER_SUBARRAY: "SUBARRAY", COMBINER_DARRAY: "DARRAY", COMBINER_RESIZED: "RESIZED",
    COMBINER_F90_INTEGER: "F90_INTEGER", COMBINER_F90_REAL: "F90_REAL",
    COMBINER_F90_COMPLEX: "F90_COMPLEX",
}  # fmt: skip
_EXTERNAL32 = "external32"


# --- Argument checking -------------------------------------------------------------------


def _int(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise MPIException(ERR_ARG, f"{what} must be an int, not {type(value).__name__}") from None


def _count(value: Any, what: str) -> int:
    """A non-negative count (``ERR_COUNT`` otherwise, as MPICH)."""
    count = _int(value, what)
    if count < 0:
        raise MPIException(ERR_COUNT, f"{what} must not be negative; got {count}")
    return count


def _ints(values: Any, what: str) -> list[int]:
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return [int(v) for v in values.reshape(-1).tolist()]
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise MPIException(ERR_ARG, f"{what} must be a sequence of ints, not {values!r}")
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        return [_int(v, what) for v in values]  # raises for the first non-integer


def _counts(values: Any, what: str) -> list[int]:
    counts = _ints(values, what)
    if counts and min(counts) < 0:
        raise MPIException(ERR_COUNT, f"{what} must not be negative; got {min(counts)}")
    return counts


def _same_length(call: str, **arrays: Sequence[Any]) -> int:
    """The common length of ``arrays``; ``ValueError`` (as mpi4py) when they differ."""
    lengths = [len(values) for values in arrays.values()]
    if lengths.count(lengths[0]) != len(lengths):
        shown = ", ".join(f"{n}={k}" for n, k in zip(arrays, lengths))
        raise ValueError(f"{call}: the sequences differ in length ({shown})")
    return lengths[0]


def _check(condition: bool, error: int, message: str) -> None:
    if not condition:
        raise MPIException(error, message)


def check_span(layout: tm.Layout, nbytes: int, origin: int, count: int, call: str) -> None:
    """Raise ``ERR_BUFFER`` unless the data of ``count`` elements from byte ``origin`` lie
    inside a buffer of ``nbytes`` bytes."""
    if count <= 0 or not layout.packed:
        return
    spread = (count - 1) * layout.extent
    low = origin + layout.data_lo + min(spread, 0)
    high = origin + layout.data_hi + max(spread, 0)
    if low < 0 or high > nbytes:
        raise MPIException(
            ERR_BUFFER,
            f"{call}: {count} element(s) of the datatype touch bytes {low} to {high} of the "
            f"buffer, which has {nbytes} bytes",
        )


# --- The Datatype methods ----------------------------------------------------------------


class DerivedMixin(DatatypeMixin):
    """Constructors, decoding and packing of ``Datatype`` (see the module docstring)."""

    __slots__ = ()

    def _base(self, call: str) -> _TypeImpl:
        """The old type of a constructor: live and not an LB/UB marker."""
        impl = self._live()
        if impl.layout.marker:
            raise MPIException(ERR_TYPE, f"{call}: {impl.name} is only valid in Create_struct")
        return impl

    # -- constructors (Dup, which copies attributes, is in mpi.attributes) ---------------
    def Create_contiguous(self, count: int) -> Datatype:
        """``count`` copies of this datatype, one extent apart."""
        count = _count(count, "count")
        old = self._base("Create_contiguous")
        return self._derive(
            tm.contiguous(old.layout, count), COMBINER_CONTIGUOUS, ([count], [], [old])
        )

    def Create_vector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """``count`` blocks of ``blocklength`` copies; ``stride`` counts extents."""
        count, blocklength = _count(count, "count"), _count(blocklength, "blocklength")
        stride = _int(stride, "stride")
        old = self._base("Create_vector")
        layout = tm.hvector(old.layout, count, blocklength, stride * old.extent)
        return self._derive(layout, COMBINER_VECTOR, ([count, blocklength, stride], [], [old]))

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Datatype:
        """Like ``Create_vector``, with ``stride`` in bytes."""
        count, blocklength = _count(count, "count"), _count(blocklength, "blocklength")
        stride = _int(stride, "stride")
        old = self._base("Create_hvector")
        layout = tm.hvector(old.layout, count, blocklength, stride)
        return self._derive(layout, COMBINER_HVECTOR, ([count, blocklength], [stride], [old]))

    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        """Blocks of ``blocklengths[i]`` copies at ``displacements[i]`` extents."""
        lengths = _counts(blocklengths, "blocklengths")
        disps = _ints(displacements, "displacements")
        n = _same_length("Create_indexed", blocklengths=lengths, displacements=disps)
        old = self._base("Create_indexed")
        layout = tm.hindexed(old.layout, lengths, np.asarray(disps, dtype=np.int64) * old.extent)
        return self._derive(layout, COMBINER_INDEXED, ([n, *lengths, *disps], [], [old]))

    def Create_hindexed(
        self, blocklengths: Sequence[int], displacements: Sequence[int]
    ) -> Datatype:
        """Like ``Create_indexed``, with displacements in bytes."""
        lengths = _counts(blocklengths, "blocklengths")
        disps = _ints(displacements, "displacements")
        n = _same_length("Create_hindexed", blocklengths=lengths, displacements=disps)
        old = self._base("Create_hindexed")
        layout = tm.hindexed(old.layout, lengths, disps)
        return self._derive(layout, COMBINER_HINDEXED, ([n, *lengths], disps, [old]))

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        """Blocks of ``blocklength`` copies at ``displacements[i]`` extents."""
        blocklength = _count(blocklength, "blocklength")
        disps = _ints(displacements, "displacements")
        old = self._base("Create_indexed_block")
        n = len(disps)
        starts = np.asarray(disps, dtype=np.int64) * old.extent
        layout = tm.hindexed(old.layout, [blocklength] * n, starts)
        contents: Contents = ([n, blocklength, *disps], [], [old])
        return self._derive(layout, COMBINER_INDEXED_BLOCK, contents)

    def Create_hindexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        """Like ``Create_indexed_block``, with displacements in bytes."""
        blocklength = _count(blocklength, "blocklength")
        disps = _ints(displacements, "displacements")
        old = self._base("Create_hindexed_block")
        n = len(disps)
        layout = tm.hindexed(old.layout, [blocklength] * n, disps)
        return self._derive(layout, COMBINER_HINDEXED_BLOCK, ([n, blocklength], disps, [old]))

    @classmethod
    def Create_struct(
        cls,
        blocklengths: Sequence[int],
        displacements: Sequence[int],
        datatypes: Sequence[Datatype],
    ) -> Datatype:
        """Block ``i`` holds ``blocklengths[i]`` copies of ``datatypes[i]`` at byte
        ``displacements[i]``."""
        lengths = _counts(blocklengths, "blocklengths")
        disps = _ints(displacements, "displacements")
        types = list(datatypes)
        n = _same_length(
            "Create_struct", blocklengths=lengths, displacements=disps, datatypes=types
        )
        impls = []
        for datatype in types:
            if not isinstance(datatype, DerivedMixin):
                raise MPIException(ERR_TYPE, f"Create_struct: {datatype!r} is not a Datatype")
            impls.append(datatype._live())
        layout = tm.struct([t.layout for t in impls], lengths, disps)
        return cls._derive(layout, COMBINER_STRUCT, ([n, *lengths], disps, impls))

    def Create_subarray(
        self,
        sizes: Sequence[int],
        subsizes: Sequence[int],
        starts: Sequence[int],
        order: int = ORDER_C,
    ) -> Datatype:
        """A ``subsizes`` block at ``starts`` of an array of shape ``sizes``."""
        sizes_, subsizes_ = _ints(sizes, "sizes"), _ints(subsizes, "subsizes")
        starts_, order = _ints(starts, "starts"), _int(order, "order")
        ndims = _same_length("Create_subarray", sizes=sizes_, subsizes=subsizes_, starts=starts_)
        _check(ndims > 0, ERR_ARG, "Create_subarray: an array needs at least one dimension")
        _check(order in (ORDER_C, ORDER_F), ERR_ARG, f"Create_subarray: invalid order {order}")
        for size, sub, start in zip(sizes_, subsizes_, starts_):
            _check(
                0 <= sub <= size and 0 <= start <= size - sub,
                ERR_ARG,
                f"Create_subarray: subsize {sub} at start {start} does not fit in size {size}",
            )
        old = self._base("Create_subarray")
        layout = tg.subarray(old.layout, sizes_, subsizes_, starts_, order)
        contents: Contents = (
            [ndims, *sizes_, *subsizes_, *starts_, order],
            [],
            [old],
        )
        return self._derive(layout, COMBINER_SUBARRAY, contents)

    def Create_darray(
        self,
        size: int,
        rank: int,
        gsizes: Sequence[int],
        distribs: Sequence[int],
        dargs: Sequence[int],
        psizes: Sequence[int],
        order: int = ORDER_C,
    ) -> Datatype:
        """The part that process ``rank`` of ``size`` owns of a distributed array."""
        size, rank, order = _int(size, "size"), _int(rank, "rank"), _int(order, "order")
        g, d, a, p = (_ints(v, n) for v, n in ((gsizes, "gsizes"), (distribs, "distribs"),
                                               (dargs, "dargs"), (psizes, "psizes")))  # fmt: skip
        ndims = _same_length("Create_darray", gsizes=g, distribs=d, dargs=a, psizes=p)
        _check(size > 0, ERR_ARG, f"Create_darray: size must be positive; got {size}")
        _check(0 <= rank < size, ERR_RANK, f"Create_darray: rank {rank} not in [0, {size})")
        _check(ndims > 0, ERR_ARG, "Create_darray: an array needs at least one dimension")
        _check(order in (ORDER_C, ORDER_F), ERR_ARG, f"Create_darray: invalid order {order}")
        _check(
            all(n > 0 for n in g + p) and int(np.prod(p)) == size,
            ERR_ARG,
            f"Create_darray: gsizes {g} and psizes {p} must be positive, psizes multiplying "
            f"to size {size}",
        )
        for gsize, distrib, darg, psize in zip(g, d, a, p):
            _check_distribution(gsize, distrib, darg, psize)
        old = self._base("Create_darray")
        layout = tg.darray(old.layout, rank, g, d, a, p, order)
        contents: Contents = (
            [size, rank, ndims, *g, *d, *a, *p, order],
            [],
            [old],
        )
        return self._derive(layout, COMBINER_DARRAY, contents)

    def Create_resized(self, lb: int, extent: int) -> Datatype:
        """The same type map with lower bound ``lb`` and extent ``extent``."""
        lb, extent = _int(lb, "lb"), _int(extent, "extent")
        old = self._base("Create_resized")
        layout = tm.resized(old.layout, lb, extent)
        return self._derive(layout, COMBINER_RESIZED, ([], [lb, extent], [old]))

    Resized = Create_resized

    # -- decoding -----------------------------------------------------------------------
    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """Return ``(num_integers, num_addresses, num_large_counts, num_datatypes,
        combiner)``, the lengths of the lists ``Get_contents`` returns."""
        impl = self._live()
        ints, addrs, types = impl.contents
        return (len(ints), len(addrs), 0, len(types), impl.combiner)

    @property
    def envelope(self) -> tuple[int, int, int, int, int]:
        """The result of ``Get_envelope()``."""
        return self.Get_envelope()

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list[Datatype]]:
        """Return the arguments of the constructor: ``(integers, addresses, large_counts,
        datatypes)``; ``ERR_TYPE`` for named predefined datatypes."""
        impl = self._live()
        if impl.combiner == COMBINER_NAMED:
            raise MPIException(ERR_TYPE, f"{impl.name} is a named predefined datatype")
        ints, addrs, types = impl.contents
        return list(ints), list(addrs), [], [self._handle(t) for t in types]

    @property
    def contents(self) -> tuple[list[int], list[int], list[int], list[Datatype]]:
        """The result of ``Get_contents()``."""
        return self.Get_contents()

    def decode(self) -> tuple[Datatype, str, dict[str, Any]]:
        """Return ``(old type, combiner name, constructor arguments)``.

        A named type decodes to ``(itself, 'NAMED', {})``; a struct's old type is a
        null handle, its datatypes are in the arguments, and so is an F90 type's
        (``Create_f90_*`` are class methods).
        """
        impl = self._live()
        name = _COMBINER_NAMES[impl.combiner]
        if impl.combiner == COMBINER_NAMED:
            return self, name, {}  # type: ignore[return-value]
        ints, addrs, _, types = self.Get_contents()
        if impl.combiner == COMBINER_F90_INTEGER:
            return type(self)(), name, {"r": ints[0]}  # type: ignore[return-value]
        if impl.combiner in (COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
            return type(self)(), name, {"p": ints[0], "r": ints[1]}  # type: ignore[return-value]
        if impl.combiner == COMBINER_STRUCT:
            params = {"blocklengths": ints[1:], "displacements": addrs, "datatypes": types}
            return type(self)(), name, params  # type: ignore[return-value]
        return types[0], name, _decode_params(impl.combiner, ints, addrs)

    @property
    def combiner(self) -> int:
        """The constructor that made the datatype (``COMBINER_*``)."""
        return self._live().combiner

    @property
    def is_named(self) -> bool:
        """Whether the datatype is a named predefined one."""
        return self._live().combiner == COMBINER_NAMED

    @property
    def is_predefined(self) -> bool:
        """Whether the datatype is predefined (named) or null."""
        return self._impl.predefined

    # -- pack and unpack ----------------------------------------------------------------
    def _committed(self, call: str) -> _TypeImpl:
        impl = self._live()
        if not impl.committed:
            raise MPIException(ERR_TYPE, f"{call}: the datatype is not committed; call Commit()")
        if not impl.msg_ok:
            raise MPIException(ERR_TYPE, f"{call}: {impl.name} has no data representation")
        return impl

    def Pack(self, inbuf: Any, outbuf: Any, position: int, comm: Any) -> int:
        """Pack ``inbuf`` (``count = len // extent`` elements, or ``[buf, count]``) into
        ``outbuf`` at byte ``position``; return the new position."""
        impl = self._committed("Pack")
        layout = impl.layout
        src, count = _elements_of(inbuf, impl, False, "Pack")
        out = _bytes_of(outbuf, True, "Pack")
        stop = _room(position, count * layout.packed, out.nbytes, "Pack")
        tc.gather(layout, src, 0, count, out, stop - count * layout.packed)
        return stop

    def Unpack(self, inbuf: Any, position: int, outbuf: Any, comm: Any) -> int:
        """Unpack from ``inbuf`` at byte ``position`` into ``outbuf`` (``len // extent``
        elements, or ``[buf, count]``); return the new position."""
        impl = self._committed("Unpack")
        layout = impl.layout
        data = _bytes_of(inbuf, False, "Unpack")
        dst, count = _elements_of(outbuf, impl, True, "Unpack")
        need = count * layout.packed
        stop = _room(position, need, data.nbytes, "Unpack")
        tc.scatter(layout, data, stop - need, count, need, dst, 0)
        return stop

    def Pack_size(self, count: int, comm: Any) -> int:
        """Bytes that ``Pack`` uses for ``count`` elements (exact, hence an upper bound)."""
        count = _count(count, "count")
        return count * self._committed("Pack_size").layout.packed

    def Pack_external(self, datarep: str, inbuf: Any, outbuf: Any, position: int) -> int:
        """Pack into the portable big-endian ``"external32"`` representation."""
        impl = self._committed("Pack_external")
        size = _ext32(impl, datarep, "Pack_external")
        src, count = _elements_of(inbuf, impl, False, "Pack_external")
        out = _bytes_of(outbuf, True, "Pack_external")
        stop = _room(position, count * size, out.nbytes, "Pack_external")
        packed = np.zeros(count * impl.layout.packed, dtype=np.uint8)
        tc.gather(impl.layout, src, 0, count, packed)
        tc.to_external(impl.layout, packed, count, out, stop - count * size)
        return stop

    def Unpack_external(self, datarep: str, inbuf: Any, position: int, outbuf: Any) -> int:
        """Unpack from the ``"external32"`` representation."""
        impl = self._committed("Unpack_external")
        size = _ext32(impl, datarep, "Unpack_external")
        data = _bytes_of(inbuf, False, "Unpack_external")
        dst, count = _elements_of(outbuf, impl, True, "Unpack_external")
        stop = _room(position, count * size, data.nbytes, "Unpack_external")
        packed = np.zeros(count * impl.layout.packed, dtype=np.uint8)
        tc.from_external(impl.layout, data, stop - count * size, count, packed)
        tc.scatter(impl.layout, packed, 0, count, packed.nbytes, dst, 0)
        return stop

    def Pack_external_size(self, datarep: str, count: int) -> int:
        """Bytes of ``count`` elements in the ``"external32"`` representation."""
        count = _count(count, "count")
        return count * _ext32(self._committed("Pack_external_size"), datarep, "Pack_external_size")

    # -- message sizes, for Status ------------------------------------------------------
    @property
    def _packed_size(self) -> int:
        """Bytes one element takes in a message (and in ``Pack``)."""
        return self._live().layout.packed

    def _elements_in(self, nbytes: int) -> int:
        """Basic elements in ``nbytes`` of message data, or ``UNDEFINED``."""
        return tcount.elements_in(self._live().layout, nbytes)

    def _bytes_of_elements(self, count: int) -> int:
        """Message bytes of the first ``count`` basic elements."""
        return tcount.bytes_of_elements(self._live().layout, count)


def _check_distribution(gsize: int, distrib: int, darg: int, psize: int) -> None:
    valid = (DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_NONE)
    _check(distrib in valid, ERR_ARG, f"Create_darray: invalid distribution {distrib}")
    if distrib == DISTRIBUTE_NONE:
        _check(psize == 1, ERR_ARG, "Create_darray: DISTRIBUTE_NONE needs a psize of 1")
    elif darg != DISTRIBUTE_DFLT_DARG:
        _check(darg > 0, ERR_ARG, f"Create_darray: invalid distribution argument {darg}")
        _check(
            distrib == DISTRIBUTE_CYCLIC or darg * psize >= gsize,
            ERR_ARG,
            f"Create_darray: blocks of {darg} on {psize} processes cannot hold {gsize}",
        )


def _decode_params(combiner: int, ints: list[int], addrs: list[int]) -> dict[str, Any]:
    """The keyword form of a constructor's integer and address arguments."""
    if combiner == COMBINER_DUP:
        return {}
    if combiner == COMBINER_CONTIGUOUS:
        return {"count": ints[0]}
    if combiner == COMBINER_VECTOR:
        return {"count": ints[0], "blocklength": ints[1], "stride": ints[2]}
    if combiner == COMBINER_HVECTOR:
        return {"count": ints[0], "blocklength": ints[1], "stride": addrs[0]}
    if combiner == COMBINER_INDEXED:
        n = ints[0]
        return {"blocklengths": ints[1 : 1 + n], "displacements": ints[1 + n :]}
    if combiner == COMBINER_HINDEXED:
        return {"blocklengths": ints[1:], "displacements": addrs}
    if combiner == COMBINER_INDEXED_BLOCK:
        return {"blocklength": ints[1], "displacements": ints[2:]}
    if combiner == COMBINER_HINDEXED_BLOCK:
        return {"blocklength": ints[1], "displacements": addrs}
    if combiner == COMBINER_SUBARRAY:
        n = ints[0]
        sizes, subsizes, starts = (ints[1 + k * n : 1 + (k + 1) * n] for k in range(3))
        return {"sizes": sizes, "subsizes": subsizes, "starts": starts, "order": ints[-1]}
    if combiner == COMBINER_DARRAY:
        n = ints[2]
        g, d, a, p = (ints[3 + k * n : 3 + (k + 1) * n] for k in range(4))
        return {"size": ints[0], "rank": ints[1], "gsizes": g, "distribs": d, "dargs": a,
                "psizes": p, "order": ints[-1]}  # fmt: skip
    assert combiner == COMBINER_RESIZED
    return {"lb": addrs[0], "extent": addrs[1]}


# --- Buffers of Pack and Unpack ----------------------------------------------------------


def _bytes_of(buf: Any, writable: bool, call: str) -> np.ndarray:
    """A ``uint8`` array viewing the memory of a buffer object."""

    del call  # the buffer errors name the object, as mpi4py's do
    return np.frombuffer(byte_view(buf, writable), dtype=np.uint8)


def _elements_of(spec: Any, impl: _TypeImpl, writable: bool, call: str) -> tuple[np.ndarray, int]:
    """The memory and element count of ``buf`` (``len // extent``) or ``[buf, count]``."""
    count: int | None = None
    buf = spec
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        buf, count = spec[0], _count(spec[1], "count")
    data = _bytes_of(buf, writable, call)
    if count is None:
        extent = impl.extent
        if extent <= 0:
            raise MPIException(
                ERR_ARG, f"{call}: cannot infer a count from extent {extent}; pass [buf, count]"
            )
        count = data.nbytes // extent
    check_span(impl.layout, data.nbytes, 0, count, call)
    return data, count


def _room(position: Any, need: int, nbytes: int, call: str) -> int:
    """Check that ``need`` bytes fit at ``position``; return the end position."""
    position = _int(position, "position")
    if position < 0:
        raise MPIException(ERR_ARG, f"{call}: position must not be negative; got {position}")
    if position + need > nbytes:
        raise MPIException(
            ERR_TRUNCATE,
            f"{call}: {need} bytes at position {position} do not fit in a buffer of {nbytes}",
        )
    return position + need


def _ext32(impl: _TypeImpl, datarep: Any, call: str) -> int:
    """The external32 size of one element; ``ERR_ARG`` for another representation."""
    if datarep != _EXTERNAL32:
        raise MPIException(ERR_ARG, f"{call}: unknown data representation {datarep!r}")
    try:
        return tc.ext32_size(impl.layout)
    except ValueError as exc:
        raise MPIException(ERR_TYPE, f"{call}: {exc}") from None


# --- Addresses ---------------------------------------------------------------------------


def Get_address(location: Any) -> int:
    """Return the address of the first byte of a buffer (0 for ``MPI.BOTTOM``)."""

    return address_of(location)


def Aint_add(base: int, disp: int) -> int:
    """Return ``base + disp`` (an address plus a displacement)."""
    return _int(base, "base") + _int(disp, "disp")


def Aint_diff(addr1: int, addr2: int) -> int:
    """Return ``addr1 - addr2`` (the displacement between two addresses)."""
    return _int(addr1, "addr1") - _int(addr2, "addr2")


# --- Predefined datatypes as leaves ------------------------------------------------------

# external32 sizes that differ from the native ones (MPI-2.2 Table 13.2).
_EXT32_SIZES = {"LONG": 4, "UNSIGNED_LONG": 4, "WCHAR": 2, "LONG_INT": 4}
# Alignments of the types numpy lacks, as C and Fortran compilers give them on 64-bit
# platforms (a 16-byte integer as __int128; half-precision parts as _Float16).
_OPAQUE_ALIGN = {"INTEGER16": 16, "LOGICAL16": 16, "COMPLEX4": 2, "BFLOAT16_T": 2}


def _leaf_key(dtype: np.dtype[Any]) -> tuple[str, int]:
    """The class MPICH puts a basic type in when deciding whether a struct pads."""
    kind = {"i": "int", "u": "int", "U": "int", "b": "int", "S": "int"}.get(dtype.kind)
    return (kind or dtype.kind, dtype.itemsize)


def _ext32_part(dtype: np.dtype[Any], key: str | None) -> tm.Ext32Part | None:
    """The big-endian dtype of a basic element in external32 form, or the conversion of
    long doubles (IEEE binary128), if ipympi has one."""
    kind, size = dtype.kind, dtype.itemsize
    if kind == "V":
        return None
    if (kind == "f" and size > 8) or (kind == "c" and size > 16):
        return external_floats(dtype)
    if kind == "b":
        return np.dtype("?")
    size = _EXT32_SIZES.get(key or "", size)
    return np.dtype(f">{'u' if kind in 'SU' else kind}{size}")


def predefined_layout(impl: _TypeImpl) -> tm.Layout:
    """Register a predefined datatype as a typemap leaf and return its layout."""
    if impl.key in ("LB", "UB"):
        return tm.marker_layout(-1 if impl.key == "LB" else 1)
    dtype = impl.np_dtype
    if dtype is None:
        dtype = np.dtype(np.uint8) if impl.size == 1 else np.dtype((np.void, impl.size))
    if dtype.names:
        value, index = dtype.fields["value"][0], dtype.fields["index"]  # type: ignore[index]
        parts: tuple[tuple[int, np.dtype[Any]], ...] = ((0, value), (index[1], index[0]))
        key: Any = ("pair", impl.key)
        ext: tuple[tm.Ext32Part | None, ...] = (
            _ext32_part(value, impl.key),
            _ext32_part(index[0], None),
        )
    else:
        parts, key, ext = ((0, dtype),), _leaf_key(dtype), (_ext32_part(dtype, impl.key),)
    leaf = tm.Leaf(
        name=impl.name,
        dtype=dtype,
        size=impl.size,
        align=_OPAQUE_ALIGN.get(impl.key or "", dtype.alignment),
        key=key,
        parts=parts,
        ext32=None if None in ext else ext,  # type: ignore[arg-type]
        msg_ok=impl.msg_ok,
    )
    return tm.leaf_layout(tm.register_leaf(leaf), impl.extent, impl.true_extent)


# Predefined datatypes whose typemap leaf is not made yet, in definition order. Leaf ids
# are part of type signatures, which ranks compare: the leaves are made all at once, in
# this order, when the first typemap is needed, whichever type a program uses first.
_PENDING: list[_TypeImpl] = []
_pending_lock = threading.Lock()


def defer_leaves(impls: Iterable[_TypeImpl]) -> None:
    """Let :func:`make_leaves` make the leaves of ``impls`` (in this order)."""
    _PENDING.extend(impls)


def make_leaves() -> None:
    """Give every predefined datatype its typemap leaf, once (see above)."""
    with _pending_lock:
        for impl in _PENDING:
            impl.layout = predefined_layout(impl)
        _PENDING.clear()
