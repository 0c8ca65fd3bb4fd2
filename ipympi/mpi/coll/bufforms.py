"""The buffer forms of collective calls: one block per rank, vectors, and Alltoallw's.

Collectives read their buffers in three shapes beyond the single message of
``mpi.buffers``, each parsed here into one byte view per rank plus a finishing step:

* Blocks (Gather's and Allgather's receive buffer, Scatter's send buffer, both of
  Alltoall): the forms of one message, where the count is the count *per rank*. Without
  a count the buffer is divided evenly among the ranks (``ValueError`` where it does not
  divide, as mpi4py raises it).
* Vectors (the ``v`` variants)::

      [buf, counts, displs, datatype]     [buf, (counts, displs), datatype]
      [buf, counts, datatype]             [buf, (counts, displs)]
      [buf, counts]    [buf, datatype]    buf

  ``counts`` is a sequence of one count per rank, or one integer for every rank, or
  None to deal the buffer's elements out (the first ranks get one more where they do
  not divide evenly); ``displs`` (in elements) is a sequence, one integer ``d`` for
  displacements ``0, d, 2d, ...``, or None to pack the blocks one after the other. As in
  mpi4py, a tuple is the ``(counts, displs)`` pair only in the two- and three-item forms;
  a list there, and anything in the four-item form, is the counts.
* Alltoallw's ``[buf, counts, displs, datatypes]`` and ``[buf, (counts, displs),
  datatypes]`` with byte displacements and one ``MPI.Datatype`` per rank, and
  ``[buf, datatypes]`` (one element of each, all at byte 0).

``None`` as ``buf`` is an empty buffer; ``BOTTOM`` takes the displacements of the
datatypes as addresses. Which collectives take ``IN_PLACE`` (and None meaning it) is for
the calls to decide: :func:`in_place` is the test they share.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from ...core.errors import ERR_COUNT
from ...core.errors import Exception as MPIException
from ...core.lazynumpy import np
from ..buffers import (
    BufferSpec,
    count_of,
    data_span,
    datatype_of,
    elements,
    format_datatype,
    message,
    ndarray_spec,
    not_a_multiple,
    split_items,
)
from ..datatype import BYTE, Datatype
from ..rawmem import BOTTOM, IN_PLACE, absolute_memory, acquire

__all__ = ["blocks", "exchange", "in_place", "unpack_after", "vector", "wvector"]

Finish = Callable[[Any], Any]


def in_place(buf: Any) -> bool:
    """Whether a send (or root receive) buffer asks for the in-place variant.

    As in mpi4py, None means ``IN_PLACE`` where the call allows it.
    """
    return buf is IN_PLACE or buf is None


def unpack_after(spec: BufferSpec, nbytes: int | None = None) -> Finish | None:
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


def _finish_all(specs: list[BufferSpec]) -> Finish | None:
    """One finishing step that unpacks every block that needs it."""
    unpacks = [(spec.unpack, spec.mem.nbytes) for spec in specs if spec.unpack is not None]
    if not unpacks:
        return None

    def finish(value: Any) -> Any:
        for unpack, nbytes in unpacks:
            unpack(nbytes)
        return value

    return finish


def _memory(buf: Any, datatype: Datatype | None, writable: bool) -> tuple[memoryview, Datatype]:
    """The bytes and datatype of a collective's buffer object (not None or BOTTOM)."""
    mem, fmt, itemsize = acquire(buf, writable)
    return mem, datatype if datatype is not None else format_datatype(fmt, itemsize)


def _entries(mem: memoryview, displ: int, datatype: Datatype) -> int:
    """How many elements of ``datatype`` the buffer holds from element ``displ`` on."""
    extent = datatype._impl.extent if datatype else 0
    if extent <= 0:
        what = "null" if not datatype else f"of extent {extent}"
        raise ValueError(f"message: cannot infer count, datatype is {what}")
    entries, remainder = divmod(mem.nbytes - displ * extent, extent)
    if remainder or entries < 0:
        raise not_a_multiple(mem.nbytes - displ * extent, datatype._impl)
    return entries


def _split_evenly(entries: int, size: int) -> int:
    count, remainder = divmod(entries, size)
    if remainder:
        raise ValueError(
            f"message: cannot infer count, number of entries {entries} is not a multiple "
            f"of required number of blocks {size}"
        )
    return count


# --- Blocks ----------------------------------------------------------------------


def blocks(
    spec: Any, size: int, writable: bool
) -> tuple[BufferSpec, list[memoryview], Finish | None]:
    """Parse a buffer of ``size`` equal blocks (count per rank, or an even division).

    Returns the whole message, one byte view per rank and, for receives, the step that
    unpacks derived datatypes at the end.
    """
    if type(spec) is np.ndarray:  # the common case: a whole array of a predefined type
        whole = ndarray_spec(spec, writable)
        if whole is not None and size and not whole.count % size:
            n = whole.mem.nbytes // size
            mem = whole.mem
            return whole, [mem[r * n : (r + 1) * n] for r in range(size)], None
    if spec is None:
        acquire(spec, writable)  # TypeError: None is no buffer, as in mpi4py
    buf, count_item, displ_item, type_item = split_items(spec)
    count = count_of(count_item, "count")
    displ = count_of(displ_item, "displacement") or 0
    datatype = datatype_of(type_item)
    if buf is None or buf is BOTTOM:
        whole = message(buf, None if count is None else count * size, displ, datatype, writable)
    else:
        mem, datatype = _memory(buf, datatype, writable)
        if count is None:
            count = _split_evenly(_entries(mem, displ, datatype), size)
        whole = elements(mem, count * size, displ, datatype, writable, 0)
    n = whole.mem.nbytes // size if size else 0
    views = [whole.mem[r * n : (r + 1) * n] for r in range(size)]
    return whole, views, unpack_after(whole) if writable else None


# --- Vectors ----------------------------------------------------------------------


def _sequence(item: Any, size: int, what: str | None) -> list[int]:
    """``size`` integers from a sequence of them (``ValueError`` for another length).

    Negative values are an ``ERR_COUNT`` when ``what`` names them, else allowed (byte
    displacements from ``BOTTOM``).
    """
    values = [operator.index(v) for v in item]  # TypeError for non-integers
    if len(values) != size:
        raise ValueError(f"expecting {size} items, got {len(values)}")
    if what is not None and any(v < 0 for v in values):
        raise MPIException(ERR_COUNT, f"negative {what} in {values}")
    return values


def _counts(item: Any, size: int) -> list[int] | None:
    """Per-rank counts from None (inferred later), one integer, or a sequence."""
    if item is None:
        return None
    count = _integer(item)
    if count is None:
        return _sequence(item, size, "count")
    if count < 0:
        raise MPIException(ERR_COUNT, f"negative count {count}")
    return [count] * size


def _integer(item: Any) -> int | None:
    """``item`` as one integer, or None when it is a sequence (of integers, presumably).

    numpy arrays of one element have ``__index__`` too, so the test is whether
    ``item`` can be iterated.
    """
    try:
        return operator.index(item)
    except TypeError:
        if hasattr(item, "__iter__"):
            return None
        raise


def _displs(item: Any, counts: list[int], size: int) -> list[int]:
    """Per-rank displacements from None (packed), a stride, or a sequence."""
    if item is None:
        displs, total = [], 0
        for count in counts:
            displs.append(total)
            total += count
        return displs
    stride = _integer(item)
    if stride is None:
        return _sequence(item, size, "displacement")
    return [r * stride for r in range(size)]


def vector(spec: Any, size: int, writable: bool) -> tuple[list[memoryview], Finish | None]:
    """Parse a ``v`` variant's buffer: one byte view per rank and the finishing step."""
    if spec is None:
        acquire(spec, writable)  # TypeError: None is no buffer, as in mpi4py
    buf, counts_item, displs_item, type_item = split_items(spec, (tuple,))
    counts = _counts(counts_item, size)
    datatype = datatype_of(type_item)
    if buf is None or buf is BOTTOM:
        if datatype is None:
            raise KeyError("cannot map None to MPI datatype")
        counts = counts if counts is not None else [0] * size
        displs = _displs(displs_item, counts, size)
        extent = datatype._impl.extent if datatype else 0
        places = [(count, displ * extent, datatype) for count, displ in zip(counts, displs)]
        return _placed(buf, places, writable)
    mem, datatype = _memory(buf, datatype, writable)
    if counts is None:
        counts = _spread(_entries(mem, 0, datatype), size)
    displs = _displs(displs_item, counts, size)
    specs = [  # a block of no data is empty wherever its displacement points
        elements(mem, count, displ if count else 0, datatype, writable, 0)
        for count, displ in zip(counts, displs)
    ]
    return [s.mem for s in specs], _finish_all(specs) if writable else None


def _spread(entries: int, size: int) -> list[int]:
    """Counts of ``entries`` elements dealt to ``size`` ranks, the first ranks one more."""
    share, extra = divmod(entries, size) if size else (0, 0)
    return [share + (r < extra) for r in range(size)]


def _placed(
    buf: Any, places: Sequence[tuple[int, int, Datatype | None]], writable: bool
) -> tuple[list[memoryview], Finish | None]:
    """Blocks of an empty buffer (None) or of absolute addresses (``BOTTOM``).

    ``places`` holds each block's count, byte offset and datatype. A block of no data
    (count 0) is empty wherever its displacement points: programs often leave it 0.
    """
    if buf is None:
        if any(count for count, _, datatype in places):
            raise ValueError("message: buffer is None but a count is not zero")
        return [memoryview(bytearray()) for _ in places], None
    spans = [
        data_span(datatype._impl.layout, count)
        for count, _, datatype in places
        if count and datatype
    ]
    offsets = [offset for count, offset, datatype in places if count and datatype]
    if not spans:
        return [memoryview(bytearray()) for _ in places], None
    low = min(off + lo for off, (lo, _) in zip(offsets, spans))
    high = max(off + hi for off, (_, hi) in zip(offsets, spans))
    mem = absolute_memory(low, high)
    specs = [
        elements(mem, count, 0, datatype, writable, offset - low)  # type: ignore[arg-type]
        if count
        else elements(mem, 0, 0, BYTE, writable, 0)
        for count, offset, datatype in places
    ]
    return [s.mem for s in specs], _finish_all(specs) if writable else None


# --- Alltoallw ----------------------------------------------------------------------


def wvector(spec: Any, size: int, writable: bool) -> tuple[list[memoryview], Finish | None]:
    """Parse an Alltoallw buffer: per-rank counts, byte displacements and datatypes.

    ``[buf, datatypes]`` is one element of each datatype, all at byte 0 of ``buf`` (the
    datatypes' own displacements place them); None and ``BOTTOM`` need the counts and
    displacements.
    """
    n = len(spec)  # TypeError for a bare buffer
    if n == 2:
        buf, types_item = spec
        counts_item = displs_item = None
    elif n == 3:
        buf, (counts_item, displs_item), types_item = spec  # ValueError unless a pair
    elif n == 4:
        buf, counts_item, displs_item, types_item = spec
    else:
        raise ValueError("message: expecting 2 to 4 items")
    if buf is None or buf is BOTTOM:
        if counts_item is None:
            raise ValueError("message: BOTTOM requires counts")
        if displs_item is None:
            raise ValueError("message: BOTTOM requires displs")
    if counts_item is None and displs_item is None:
        counts, displs = [1] * size, [0] * size
    else:
        counts = _sequence(counts_item, size, "count")
        displs = _sequence(displs_item, size, None)
    if len(types_item) != size:  # TypeError for a single datatype
        raise ValueError(f"expecting {size} items, got {len(types_item)}")
    datatypes = [_datatype_item(item) for item in types_item]
    places = list(zip(counts, displs, datatypes))
    if buf is None or buf is BOTTOM:
        return _placed(buf, places, writable)
    mem = acquire(buf, writable)[0]
    specs = []
    for count, displ, datatype in places:
        if not count:  # no data: the displacement is not used
            specs.append(elements(mem, 0, 0, BYTE, writable, 0))
            continue
        if displ < 0 or displ > mem.nbytes:
            raise ValueError(f"message: displacement {displ} out of bounds of {mem.nbytes} bytes")
        specs.append(elements(mem, count, 0, datatype, writable, displ))
    return [s.mem for s in specs], _finish_all(specs) if writable else None


def _datatype_item(item: Any) -> Datatype:
    """One of Alltoallw's datatypes: an ``MPI.Datatype`` (type codes are not taken there)."""
    if not isinstance(item, Datatype):
        raise TypeError(f"Cannot convert {type(item).__name__} to MPI.Datatype")
    return item


# --- Alltoall's three kinds ------------------------------------------------------------


def exchange(
    call: str,
    kind: str,
    sendbuf: Any,
    recvbuf: Any,
    sends: int,
    recvs: int,
    in_place_ok: bool,
    inter: bool = False,
) -> tuple[list[memoryview], list[memoryview], Finish | None]:
    """The blocks of an ``Alltoall``, ``Alltoallv`` or ``Alltoallw`` (``kind``): ``sends``
    blocks to send and ``recvs`` to receive (they differ for neighbourhoods), and the
    receive side's finishing step. With ``in_place_ok``, an in-place send buffer sends
    a copy of the receive buffer's blocks. An ``Alltoall``'s blocks sent and received
    have one size (``ERR_COUNT``), except across an intercommunicator (``inter``), where
    each group's blocks go to the other."""
    if kind == "Alltoall":
        _, into, finish = blocks(recvbuf, recvs, writable=True)
    else:
        into, finish = (wvector if kind == "Alltoallw" else vector)(recvbuf, recvs, True)
    if in_place_ok and in_place(sendbuf):
        return [memoryview(bytes(view)) for view in into], into, finish
    if kind != "Alltoall":
        return (wvector if kind == "Alltoallw" else vector)(sendbuf, sends, False)[0], into, finish
    _, out, _ = blocks(sendbuf, sends, writable=False)
    if not inter and out and into and out[0].nbytes != into[0].nbytes:
        raise MPIException(
            ERR_COUNT,
            f"{call}: blocks of {out[0].nbytes} bytes are sent but blocks of "
            f"{into[0].nbytes} bytes are expected",
        )
    return out, into, finish
