"""Message buffer specifications: from mpi4py's argument forms to raw user memory.

Every upper-case call (``Send``, ``Recv``, ``Bcast``, ...) takes its buffers in one of
mpi4py's forms::

    buf                                    # datatype from the buffer's format
    [buf, datatype]        (buf, datatype)
    [buf, count]                           # datatype from the buffer's format
    [buf, (count, displ)]
    [buf, count, datatype]
    [buf, (count, displ), datatype]        # skip ``displ`` elements first
    [buf, count, displ, datatype]
    [None, datatype]  [None, 0, datatype]  # an empty message
    [BOTTOM, count, datatype]              # the datatype holds absolute addresses

Any item but ``buf`` may be None (left out). ``buf`` is any object with the buffer
protocol (numpy arrays, bytes, bytearray, array.array, memoryview, ctypes arrays,
``MPI.buffer``), a DLPack producer or an object with ``__cuda_array_interface__``
(see ``rawmem`` and ``foreign``); ``datatype`` is an ``MPI.Datatype`` or a type code
such as ``'i'``.
:func:`send_buffer` and :func:`recv_buffer` turn one message into a :class:`BufferSpec`:
a flat byte view of the user's memory (no copy), the element count and the datatype. For
a derived datatype whose elements are not one dense block of memory, the spec holds the
*packed* message instead (see :class:`BufferSpec`). The collectives' per-rank and vector
forms are in ``coll/bufforms.py``, built from the pieces here (:func:`acquire`,
:func:`count_of`, :func:`datatype_of`, :func:`message`).

Errors are Python's, as mpi4py raises them (see "Parsing" below); this code runs on
every buffer call, so the common forms avoid creating numpy objects.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import Any

from ..core.constants import PROC_NULL
from ..core.errors import ERR_BUFFER, ERR_TYPE
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from ..core.typemap import element_dtype
from ..core.typemap_copy import gather, scatter
from ..progress.largebuf import buffer_address
from .datatype import _FORMATS, BYTE, Datatype, _TypeImpl, datatype_for_format
from .rawmem import BOTTOM, IN_PLACE, absolute_memory, acquire

__all__ = []


# --- The parsed form ---------------------------------------------------------------------


class BufferSpec:
    """User memory described by a buffer argument.

    ``mem`` is a 1-D, C-contiguous, format ``'B'`` view holding exactly the message:
    ``count`` elements of ``datatype``, ``datatype._packed_size`` bytes each.

    * For predefined datatypes, and derived ones whose elements are dense memory,
      ``mem`` views the user's memory (no copy) and ``unpack``/``repack`` are None.
      For the pair types (``DOUBLE_INT``, ...) an element is its C struct, padding
      included.
    * For other derived datatypes ``mem`` is the *packed* form (the basic elements in
      typemap order, no gaps). A send spec holds a packed copy made when it was parsed;
      ``repack()`` refreshes it from the user's memory (persistent requests call it at
      each start). A receive spec holds a zeroed buffer; ``unpack(nbytes, offset=0)``
      stores the whole basic elements among ``nbytes`` packed bytes from ``offset`` (a
      multiple of ``datatype._packed_size``) into the user's memory and leaves the rest
      of it untouched.

    ``element_dtype`` is the numpy dtype of the basic elements when they are all of one
    type (what reductions work on), else None. ``array`` is the user's numpy array
    when the argument was a plain C-contiguous array of a predefined type (the common
    case), so that reductions use it without building a new view.
    """

    __slots__ = ("array", "count", "datatype", "mem", "repack", "unpack")

    def __init__(
        self,
        mem: memoryview,
        count: int,
        datatype: Datatype,
        unpack: Callable[..., None] | None = None,
        repack: Callable[[], None] | None = None,
        array: np.ndarray | None = None,
    ) -> None:
        self.mem = mem
        self.count = count
        self.datatype = datatype
        self.unpack = unpack
        self.repack = repack
        self.array = array

    def __repr__(self) -> str:
        return f"BufferSpec(nbytes={self.mem.nbytes}, count={self.count}, datatype={self.datatype})"

    @property
    def nbytes(self) -> int:
        """Length of the memory in bytes."""
        return self.mem.nbytes

    @property
    def element_dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype of the basic elements if they are all alike, else None."""
        impl = self.datatype._impl
        if impl.predefined or impl.np_dtype is not None:
            return impl.np_dtype
        return element_dtype(impl.layout)

    @property
    def address(self) -> int:
        """Address of the first byte of the memory, or 0 when it is empty."""
        return buffer_address(self.mem)


def check_match(source: BufferSpec, target: BufferSpec, blocks: int = 1) -> None:
    """Reductions need send and receive buffers that agree: the same datatype, and
    ``blocks`` receive buffers' worth of elements to send (``ValueError``, as in mpi4py;
    ``blocks=0``: the counts follow another rule)."""
    if source.datatype != target.datatype:
        raise ValueError("mismatch in send and receive MPI datatypes")
    if blocks and source.count != target.count * blocks:
        send = source.count // blocks
        raise ValueError(f"mismatch in send count {send} and receive count {target.count}")


def as_ndarray(spec: BufferSpec) -> np.ndarray:
    """Return a numpy array of the spec's basic elements viewing ``mem`` (no copy).

    The array has the dtype of the basic elements (raw ``uint8`` for ``PACKED`` and
    for derived datatypes mixing several types) and is writable exactly when ``mem`` is.
    """
    array = spec.array
    if array is not None:
        return array if array.ndim == 1 else array.reshape(-1)
    dtype = spec.element_dtype
    if dtype is None:
        dtype = np.dtype(np.uint8)
    if not spec.mem.nbytes:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(spec.mem, dtype=dtype)


# --- Parsing -----------------------------------------------------------------------------
#
# Errors follow mpi4py, which checks a buffer argument in Python before any MPI call:
# TypeError for an object that is not memory or a count that is not an integer,
# BufferError for memory that cannot be used (read-only for a receive, not contiguous,
# foreign byte order), KeyError for a type code with no MPI datatype, and ValueError for
# a malformed form (item count, negative or out-of-bounds count or displacement, a count
# that cannot be inferred). Only what MPI itself would reject (an uncommitted datatype)
# is an ``MPI.Exception``.

_EMPTY_MEM = memoryview(bytearray())


def ndarray_datatype(dtype: np.dtype) -> Datatype | None:
    """The predefined datatype of a native numpy dtype, or None if there is none.

    Keyed by type character: equal dtypes such as ``'l'`` and ``'q'`` map to
    different MPI types (``LONG``, ``LONG_LONG``), as in mpi4py.
    """
    if not dtype.isnative:
        return None
    entry = _BY_CHAR.get(dtype.char)
    if entry is None:
        datatype = _FORMATS.get(dtype.char)
        if datatype is None:
            return None
        entry = _BY_CHAR[dtype.char] = (datatype, datatype._impl.extent)
    # Flexible dtypes ('S4', 'U3') share a character but not an item size.
    return entry[0] if entry[1] == dtype.itemsize else None


_BY_CHAR: dict[str, tuple[Datatype, int]] = {}


def ndarray_spec(array: np.ndarray, writable: bool) -> BufferSpec | None:
    """The spec of a whole numpy array in the common case, or None for any other
    (not C-contiguous, 0-d, read-only when ``writable``, no predefined datatype),
    which the general parser then handles, errors included.

    Kept to a few hundred nanoseconds: a memoryview's flags are read without
    building numpy's flags object."""
    datatype = ndarray_datatype(array.dtype)
    if datatype is None:
        return None
    mem = _whole_bytes(array, writable)
    if mem is None:
        return None
    return BufferSpec(mem, array.size, datatype, array=array)


def ndarray_bytes(array: np.ndarray, writable: bool) -> memoryview | None:
    """The bytes of a whole numpy array in the common case of :func:`ndarray_spec`,
    else None: for a call that needs the memory only (a blocking Bcast), without the
    cost of a :class:`BufferSpec`."""
    if ndarray_datatype(array.dtype) is None:
        return None
    return _whole_bytes(array, writable)


def _whole_bytes(array: np.ndarray, writable: bool) -> memoryview | None:
    view = memoryview(array)  # type: ignore[arg-type]
    if not view.c_contiguous or not view.ndim or (writable and view.readonly):
        return None
    return view.cast("B")


def send_buffer(spec: Any, peer: int = 0) -> BufferSpec:
    """Parse a send buffer argument; read-only memory is accepted.

    With ``peer`` (the destination) ``PROC_NULL`` the argument is not looked at: the
    message is empty, whatever it is, as in mpi4py.
    """
    if peer == PROC_NULL:
        return BufferSpec(_EMPTY_MEM, 0, BYTE)
    if type(spec) is np.ndarray:
        whole = ndarray_spec(spec, False)
        if whole is not None:
            return whole
    if type(spec) is list or type(spec) is tuple:
        return _parse_sequence(spec, False)
    if spec is None:
        acquire(spec, False)  # TypeError: None is no buffer, as in mpi4py
    return message(spec, None, None, None, False)


def send_memory(spec: Any, peer: int = 0) -> memoryview:
    """The memory of a send buffer argument, ``send_buffer(spec, peer).mem``, without
    building the spec in the common case of a plain array (:func:`ndarray_bytes`)."""
    if type(spec) is np.ndarray and peer != PROC_NULL:
        mem = ndarray_bytes(spec, False)
        if mem is not None:
            return mem
    return send_buffer(spec, peer).mem


def recv_buffer(spec: Any, peer: int = 0) -> BufferSpec:
    """Parse a receive buffer argument; the memory must be writable (else ``BufferError``).

    With ``peer`` (the source) ``PROC_NULL`` the argument is not looked at.
    """
    if peer == PROC_NULL:
        return BufferSpec(_EMPTY_MEM, 0, BYTE)
    if type(spec) is np.ndarray:
        whole = ndarray_spec(spec, True)
        if whole is not None:
            return whole
    if type(spec) is list or type(spec) is tuple:
        return _parse_sequence(spec, True)
    if spec is None:
        acquire(spec, True)  # TypeError: None is no buffer, as in mpi4py
    return message(spec, None, None, None, True)


def _parse_sequence(spec: list[Any] | tuple[Any, ...], writable: bool) -> BufferSpec:
    """Parse the list and tuple forms ``[buf, ...]`` of one message."""
    if len(spec) == 2 and type(spec[1]) is Datatype:  # [buf, MPI.DOUBLE], kept short
        buf = spec[0]
        if buf is not None and buf is not BOTTOM and buf is not IN_PLACE:
            return elements(acquire(buf, writable)[0], None, 0, spec[1], writable, 0)
    buf, count_item, displ_item, type_item = split_items(spec)
    return message(
        buf, count_of(count_item, "count"), count_of(displ_item, "displacement"), type_item,
        writable,
    )  # fmt: skip


_PAIRS = (list, tuple)


def split_items(spec: Any, pairs: tuple[type, ...] = _PAIRS) -> tuple[Any, Any, Any, Any]:
    """The items ``(buf, count, displ, datatype)`` of a buffer form, None where left out.

    mpi4py's rules: a bare buffer has no other items; in ``[buf, x]``, ``x`` is the
    datatype when it is an ``MPI.Datatype`` or a type code, else the count; only in the
    two- and three-item forms ``[buf, x]`` and ``[buf, x, datatype]`` is an ``x`` of one
    of the ``pairs`` types the ``(count, displ)`` pair (the vector forms pass ``tuple``
    alone: a list there is the counts); ``[buf, count, displ, datatype]`` is read as it
    stands. Another number of items is a ``ValueError``.
    """
    if type(spec) is not list and type(spec) is not tuple:
        return spec, None, None, None
    n = len(spec)
    if n == 4:
        return spec[0], spec[1], spec[2], spec[3]
    if n == 2:
        buf, count = spec
        if isinstance(count, (Datatype, str)):
            return buf, None, None, count
        datatype = None
    elif n == 3:
        buf, count, datatype = spec
    else:
        raise ValueError("message: expecting 2 to 4 items")
    if isinstance(count, pairs):
        pair: Any = count
        count, displ = pair  # ValueError unless a pair
        return buf, count, displ, datatype
    return buf, count, None, datatype


def count_of(item: Any, what: str) -> int | None:
    """A count or displacement item: None, or a non-negative integer.

    Anything with ``__index__`` is an integer (numpy integers, 0-d integer arrays);
    other types are a ``TypeError``, negative values a ``ValueError``.
    """
    if item is None:
        return None
    value = item if type(item) is int else operator.index(item)
    if value < 0:
        raise ValueError(f"message: negative {what} {value}")
    return value


def datatype_of(item: Any) -> Datatype | None:
    """The datatype item of a buffer form: None, an ``MPI.Datatype`` or a type code.

    A type code without an MPI datatype, or an item of another kind, is a ``KeyError``.
    """
    if item is None or isinstance(item, Datatype):
        return item
    if isinstance(item, str):
        try:
            return Datatype.fromcode(item)
        except ValueError:
            pass
    raise KeyError(f"cannot map {item!r} to MPI datatype")


def format_datatype(fmt: str, itemsize: int) -> Datatype:
    """The datatype of a buffer's elements, from its format (mpi4py's inference)."""
    datatype = _FORMATS.get(fmt)
    if datatype is not None and datatype._impl.extent == itemsize:
        return datatype
    order = fmt[:1]
    if order in "<>!" and order and order != _NATIVE_ORDER:
        raise BufferError(f"format string {fmt!r} with non-native byte order")
    try:
        return datatype_for_format(fmt, itemsize)
    except MPIException:
        raise KeyError(f"cannot map {fmt!r} to MPI datatype") from None


_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def message(
    buf: Any, count: int | None, displ: int | None, type_item: Any, writable: bool
) -> BufferSpec:
    """The spec of one message: ``count`` elements of a datatype from element ``displ``.

    ``buf`` is a buffer object, None or ``BOTTOM``; ``count``, ``displ`` and the datatype
    item (an ``MPI.Datatype`` or a type code) are None where the form left them out: the
    datatype then comes from the buffer's format, the displacement is 0 and the count is
    what the rest of the buffer holds. The buffer is taken before the datatype is looked
    up, so a form that is wrong in both raises the buffer's error, as in mpi4py.
    """
    if buf is None or buf is BOTTOM or buf is IN_PLACE:
        return _empty(buf, count, displ, datatype_of(type_item), writable)
    mem, fmt, itemsize = acquire(buf, writable)
    datatype = datatype_of(type_item)
    if datatype is None:
        datatype = format_datatype(fmt, itemsize)
    return elements(mem, count, displ or 0, datatype, writable, 0)


def not_a_multiple(length: int, impl: _TypeImpl) -> ValueError:
    """The error of a buffer of ``length`` bytes that holds no whole number of elements."""
    return ValueError(
        f"message: cannot infer count, buffer length {length} is not a multiple of "
        f"datatype extent {impl.extent} (lb:{impl.lb}, ub:{impl.lb + impl.extent})"
    )


def _empty(
    buf: Any, count: int | None, displ: int | None, datatype: Datatype | None, writable: bool
) -> BufferSpec:
    """Spec for None, ``BOTTOM`` and ``IN_PLACE`` as the buffer of one message.

    None and ``BOTTOM`` need a datatype (``KeyError``, as in mpi4py); ``IN_PLACE`` as a
    send buffer where a call does not take it is an empty message, and never a receive
    buffer (``ERR_BUFFER``); collectives turn None into ``IN_PLACE`` where they allow
    that. ``BOTTOM`` with a count is the absolute addresses of a derived datatype;
    otherwise the message is empty.
    """
    if buf is IN_PLACE and writable:
        raise MPIException(ERR_BUFFER, "MPI.IN_PLACE is not a receive buffer")
    if datatype is None:
        if buf is IN_PLACE:
            return BufferSpec(_EMPTY_MEM, 0, BYTE)
        raise KeyError("cannot map None to MPI datatype")
    if count and buf is BOTTOM:
        return _absolute(count, displ or 0, datatype, writable)
    if count:
        raise ValueError(f"message: buffer is {buf!r} but count is {count}")
    if displ:
        raise ValueError(f"message: displacement {displ} out of bounds of an empty buffer")
    return BufferSpec(_EMPTY_MEM, 0, datatype if datatype else BYTE)


def _absolute(count: int, displ: int, datatype: Datatype, writable: bool) -> BufferSpec:
    """``[BOTTOM, count, datatype]``: the datatype's displacements are addresses."""
    impl = _usable(datatype)
    origin = displ * impl.extent
    low, high = data_span(impl.layout, count)
    mem = absolute_memory(origin + low, origin + high)
    return elements(mem, count, 0, datatype, writable, origin - (origin + low))


def data_span(layout: Any, count: int) -> tuple[int, int]:
    """Bytes ``[low, high)`` that ``count`` elements touch, relative to their origin."""
    if count <= 0 or not layout.packed:
        return 0, 0
    spread = (count - 1) * layout.extent
    return layout.data_lo + min(spread, 0), layout.data_hi + max(spread, 0)


def _usable(datatype: Datatype) -> _TypeImpl:
    """Return the datatype object if it may describe message data; else raise ERR_TYPE."""
    impl = datatype._impl
    if impl.msg_ok and impl.committed:
        return impl
    if not datatype:
        raise MPIException(ERR_TYPE, "DATATYPE_NULL cannot describe a message buffer")
    if not impl.committed:
        raise MPIException(
            ERR_TYPE, f"datatype {impl.name or '(derived)'} is not committed; call Commit()"
        )
    if impl.extent == 0:
        raise MPIException(ERR_TYPE, f"{impl.name} is a bound marker, not message data")
    raise MPIException(
        ERR_TYPE, f"{impl.name} has no data representation in ipympi (numpy lacks the type)"
    )


def elements(
    mem: memoryview,
    count: int | None,
    displ: int,
    datatype: Datatype,
    writable: bool,
    origin: int,
) -> BufferSpec:
    """The spec of ``count`` elements of ``datatype`` at element ``displ`` of ``mem``.

    ``origin`` is the byte of ``mem`` where element 0 starts (non-zero only for absolute
    addresses). Without a count, the elements from ``displ`` on must fill the buffer.
    """
    nbytes = mem.nbytes
    impl = datatype._impl
    if count is None and not displ and not origin and impl.predefined and impl.msg_ok:
        # The common case ([buf, MPI.DOUBLE], bytearray, ...): the whole buffer.
        whole, remainder = divmod(nbytes, impl.extent)
        if not remainder:
            return BufferSpec(mem, whole, datatype)
    extent = impl.extent if datatype else 0
    if displ or count is None:
        what = "null" if not datatype else f"of extent {extent}"
        if extent <= 0:
            raise ValueError(f"message: cannot handle a displacement or count, datatype is {what}")
        if displ * extent > nbytes:
            raise ValueError(
                f"message: displacement {displ} out of bounds, "
                f"number of datatype entries {nbytes // extent}"
            )
    if count is None:
        count, remainder = divmod(nbytes - displ * extent, extent)
        if remainder:
            raise not_a_multiple(nbytes - displ * extent, impl)
    if count == 0 and not datatype:
        return BufferSpec(_EMPTY_MEM, 0, BYTE)
    impl = _usable(datatype)
    start = origin + displ * extent
    low, high = data_span(impl.layout, count)
    if start + low < 0 or start + high > nbytes:
        raise ValueError(
            f"message: {count} x {impl.name or 'datatype'} (extent {extent})"
            + (f" at displacement {displ}" if displ else "")
            + f" need bytes {start + low} to {start + high} of a buffer of {nbytes}"
        )
    if not impl.predefined and not impl.layout.raw:
        return _packed_spec(mem, count, start, datatype, impl, writable)
    begin = start + impl.lb
    stop = begin + count * extent
    if begin or stop != nbytes:
        mem = mem[begin:stop]
    return BufferSpec(mem, count, datatype)


def _packed_spec(
    mem: memoryview, count: int, origin: int, datatype: Datatype, impl: _TypeImpl, writable: bool
) -> BufferSpec:
    """The spec of a non-contiguous derived datatype: packed copy or receive area."""
    layout = impl.layout
    extent, nbytes = impl.extent, mem.nbytes
    user = np.frombuffer(mem, dtype=np.uint8) if nbytes else np.empty(0, np.uint8)
    size = count * layout.packed
    if not writable:
        packed = np.zeros(size, dtype=np.uint8)

        def repack() -> None:
            gather(layout, user, origin, count, packed)

        repack()
        return BufferSpec(packed.data, count, datatype, repack=repack)
    area = bytearray(size)
    target = np.frombuffer(area, dtype=np.uint8) if size else np.empty(0, np.uint8)

    def unpack(received: int, offset: int = 0) -> None:
        first, rest = divmod(offset, layout.packed or 1)
        if rest:
            raise ValueError(f"offset {offset} is not a multiple of {layout.packed}")
        scatter(layout, target, offset, count - first, received, user, origin + first * extent)

    return BufferSpec(memoryview(area), count, datatype, unpack=unpack)
