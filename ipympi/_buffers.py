"""Message buffer specifications: from mpi4py's argument forms to raw user memory.

Every upper-case call (``Send``, ``Recv``, ``Bcast``, ...) takes its buffers in one of
mpi4py's forms::

    buf                                    # datatype from the buffer's format
    [buf, datatype]        (buf, datatype)
    [buf, count]                           # datatype from the buffer's format
    [buf, count, datatype]
    [buf, (count, displ), datatype]        # skip ``displ`` elements first
    [buf, count, displ, datatype]
    None  [None, 0, datatype]  [BOTTOM, 0, datatype]      # empty buffer

``buf`` is any object with the buffer protocol (numpy arrays, bytes, bytearray,
array.array, memoryview, ctypes arrays) or a CPU DLPack tensor; ``datatype`` is an
``MPI.Datatype`` or a type code such as ``'i'`` or ``'d'``. :func:`send_buffer` and
:func:`recv_buffer` turn these into a :class:`BufferSpec`: a flat byte view of the user's
memory (no copy), the element count and the datatype. For a derived datatype whose
elements are not one dense block of memory, the spec holds the *packed* message instead
(see :class:`BufferSpec`).

Errors are always ``MPI.Exception`` with a message naming the problem: ``ERR_BUFFER`` for
anything that is not usable memory (including Python lists and strings, for which
mpi4py raises ``TypeError``), ``ERR_COUNT`` for bad counts and ``ERR_TYPE`` for bad
datatypes. A single exception type lets error handlers (``ERRORS_RETURN`` versus
``ERRORS_ARE_FATAL``) treat argument errors uniformly.

This code runs on every buffer call, so the common forms avoid creating numpy objects.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ._datatype import _FORMATS, BYTE, Datatype, _TypeImpl, datatype_for_format
from ._datatype_derived import check_span
from ._errors import ERR_BUFFER, ERR_COUNT, ERR_TYPE
from ._errors import Exception as MPIException
from ._typemap import element_dtype
from ._typemap_copy import gather, scatter

__all__ = [
    "BOTTOM",
    "BUFFER_AUTOMATIC",
    "IN_PLACE",
    "BottomType",
    "BufferAutomaticType",
    "BufferSpec",
    "InPlaceType",
    "as_ndarray",
    "byte_view",
    "recv_buffer",
    "send_buffer",
]


# --- Sentinel buffer addresses -----------------------------------------------------------


class _Sentinel:
    """A unique named object standing for a special buffer address.

    Compare sentinels by identity (``buf is MPI.IN_PLACE``). Each subclass has exactly
    one instance, which survives pickling.
    """

    __slots__ = ()
    _name = ""
    _truth = True
    _instance: _Sentinel | None = None

    def __new__(cls) -> _Sentinel:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return f"MPI.{self._name}"

    def __bool__(self) -> bool:
        return self._truth

    def __reduce__(self) -> str:
        return self._name


class BottomType(_Sentinel):
    """Type of ``MPI.BOTTOM``: address zero, for datatypes with absolute addresses."""

    __slots__ = ()
    _name = "BOTTOM"
    _truth = False


class InPlaceType(_Sentinel):
    """Type of ``MPI.IN_PLACE``: a collective's output buffer doubles as its input."""

    __slots__ = ()
    _name = "IN_PLACE"


class BufferAutomaticType(_Sentinel):
    """Type of ``MPI.BUFFER_AUTOMATIC``: let MPI manage the buffered-send buffer."""

    __slots__ = ()
    _name = "BUFFER_AUTOMATIC"


BOTTOM: Any = BottomType()
IN_PLACE: Any = InPlaceType()
BUFFER_AUTOMATIC: Any = BufferAutomaticType()


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
        mem = self.mem
        if not mem.nbytes:
            return 0
        if mem.readonly:
            return int(np.frombuffer(mem, dtype=np.uint8).__array_interface__["data"][0])
        return ctypes.addressof(ctypes.c_char.from_buffer(mem))


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

_EMPTY_MEM = memoryview(bytearray())
_EXPECTED = (
    "expected a buffer (numpy array, bytes, bytearray, array.array, memoryview) "
    "or a list [buf, count, datatype]"
)
_DLPACK_CPU = 1  # kDLCPU in DLPack's device enumeration
# Types that show a Python list of values was passed where a buffer was expected.
_NOT_BUFFERS = frozenset({int, float, complex, str, bool, list, tuple, dict})


def _ndarray_datatype(dtype: np.dtype) -> Datatype | None:
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


def send_buffer(spec: Any) -> BufferSpec:
    """Parse a send buffer argument; read-only memory is accepted."""
    if type(spec) is np.ndarray and spec.flags.c_contiguous and spec.ndim:
        # The common case, kept to a few hundred nanoseconds.
        datatype = _ndarray_datatype(spec.dtype)
        if datatype is not None:
            return BufferSpec(memoryview(spec).cast("B"), spec.size, datatype, array=spec)
    if type(spec) is list or type(spec) is tuple:
        return _parse_sequence(spec, False)
    if spec is None:
        return BufferSpec(_EMPTY_MEM, 0, BYTE)
    return _from_object(spec, None, 0, None, False)


def recv_buffer(spec: Any) -> BufferSpec:
    """Parse a receive buffer argument; the memory must be writable (else ``ERR_BUFFER``)."""
    if type(spec) is np.ndarray and spec.flags.c_contiguous and spec.flags.writeable and spec.ndim:
        datatype = _ndarray_datatype(spec.dtype)
        if datatype is not None:
            return BufferSpec(memoryview(spec).cast("B"), spec.size, datatype, array=spec)
    if type(spec) is list or type(spec) is tuple:
        return _parse_sequence(spec, True)
    if spec is None:
        return BufferSpec(_EMPTY_MEM, 0, BYTE)
    return _from_object(spec, None, 0, None, True)


def _buffer_error(message: str) -> MPIException:
    return MPIException(ERR_BUFFER, message)


def _parse_sequence(spec: list[Any] | tuple[Any, ...], writable: bool) -> BufferSpec:
    """Parse the list and tuple forms ``[buf, ...]``."""
    n = len(spec)
    if n == 2:
        buf, item = spec
        if item is None or isinstance(item, (Datatype, str)):
            count_item, displ_item, type_item = None, None, item
        else:
            count_item, displ_item, type_item = item, None, None
    elif n == 3:
        buf, count_item, type_item = spec
        displ_item = None
    elif n == 4:
        buf, count_item, displ_item, type_item = spec
    else:
        if n and type(spec[0]) in _NOT_BUFFERS:
            raise _not_a_buffer(spec)
        raise _buffer_error(
            "a buffer specification has 2 to 4 items: [buf, datatype], "
            f"[buf, count, datatype] or [buf, count, displ, datatype]; got {n} items"
        )
    if type(buf) in _NOT_BUFFERS:
        raise _not_a_buffer(spec)
    count, displ = _parse_count(count_item, displ_item)
    datatype = None if type_item is None else _parse_datatype(type_item)
    if buf is None or buf is BOTTOM:
        return _empty(buf, count, displ, datatype)
    return _from_object(buf, count, displ, datatype, writable)


def _not_a_buffer(spec: Any) -> MPIException:
    items = {type(item).__name__ for item in spec}
    inner = f" of {', '.join(sorted(items))}" if items else ""
    return _buffer_error(
        f"{_EXPECTED}; got {type(spec).__name__}{inner}. A Python {type(spec).__name__} is "
        "not a buffer: use a numpy array, or the lower-case methods (send, recv, bcast, ...) "
        "for Python objects"
    )


def _parse_count(count_item: Any, displ_item: Any) -> tuple[int | None, int]:
    """Return ``(count or None, displacement)`` from the count and displacement items."""
    if type(count_item) is tuple or type(count_item) is list:
        if len(count_item) != 2 or displ_item is not None:
            raise MPIException(
                ERR_COUNT, f"expected a (count, displacement) pair; got {count_item!r}"
            )
        count_item, displ_item = count_item
    if count_item is None:
        count = None
    else:
        try:
            count = operator.index(count_item)
        except TypeError:
            raise MPIException(
                ERR_COUNT, f"count must be an int, not {type(count_item).__name__}"
            ) from None
        if count < 0:
            raise MPIException(ERR_COUNT, f"count must not be negative; got {count}")
    if displ_item is None:
        return count, 0
    try:
        displ = operator.index(displ_item)
    except TypeError:
        raise _buffer_error(
            f"displacement must be an int, not {type(displ_item).__name__}"
        ) from None
    if displ < 0:
        raise _buffer_error(f"displacement must not be negative; got {displ}")
    return count, displ


def _parse_datatype(item: Any) -> Datatype:
    """Return the datatype given as an ``MPI.Datatype`` or a type code string."""
    if isinstance(item, Datatype):
        return item
    if isinstance(item, str):
        try:
            return Datatype.fromcode(item)
        except ValueError:
            raise MPIException(ERR_TYPE, f"no MPI datatype for type code {item!r}") from None
    raise MPIException(
        ERR_TYPE, f"datatype must be an MPI.Datatype or a type code string, not {item!r}"
    )


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


def _empty(buf: Any, count: int | None, displ: int, datatype: Datatype | None) -> BufferSpec:
    """Spec for ``[None, ...]`` and ``[BOTTOM, ...]``: only an empty message is possible."""
    if datatype is not None:
        _usable(datatype)
    if count:
        if buf is BOTTOM:
            raise _buffer_error(
                f"MPI.BOTTOM with count {count}: absolute addresses are not supported"
            )
        raise _buffer_error(f"buffer is None but count is {count}")
    if displ:
        raise _buffer_error(f"buffer is {buf!r} but displacement is {displ}")
    return BufferSpec(_EMPTY_MEM, 0, BYTE if datatype is None else datatype)


def _from_object(
    obj: Any, count: int | None, displ: int, datatype: Datatype | None, writable: bool
) -> BufferSpec:
    """Build the spec for buffer object ``obj`` with optional count/displ/datatype."""
    view = _contiguous_view(obj, writable, "receive buffer")
    if datatype is None:
        datatype = _FORMATS.get(view.format)
        if datatype is None or datatype._impl.extent != view.itemsize:
            datatype = datatype_for_format(view.format, view.itemsize)
    impl = _usable(datatype)
    mem = view if view.ndim == 1 and view.format == "B" else view.cast("B")
    extent = impl.extent
    nbytes = mem.nbytes
    if not impl.predefined and not impl.layout.raw:
        return _packed_spec(mem, count, displ, datatype, impl, writable)
    if count is None:
        start = displ * extent + impl.lb
        count, remainder = divmod(nbytes - start, extent)
        if remainder or count < 0:
            raise _buffer_error(
                f"cannot infer the count: the buffer has {nbytes} bytes, not a multiple of "
                f"{impl.name or 'the datatype'}'s extent {extent}"
                + (f" after a displacement of {displ}" if displ else "")
            )
        return BufferSpec(mem[start:] if start else mem, count, datatype)
    start = displ * extent + impl.lb
    stop = start + count * extent
    if start < 0:
        raise _buffer_error(
            f"the datatype's lower bound {impl.lb} puts its data before the buffer's start"
        )
    if stop > nbytes:
        raise _buffer_error(
            f"buffer too small: {count} x {impl.name or 'datatype'} (extent {extent})"
            + (f" at displacement {displ}" if displ else "")
            + f" needs {stop} bytes, the buffer has {nbytes}"
        )
    if start or stop != nbytes:
        mem = mem[start:stop]
    return BufferSpec(mem, count, datatype)


def _contiguous_view(obj: Any, writable: bool, what: str) -> memoryview:
    """A C-contiguous memoryview of a buffer object (``ERR_BUFFER`` if there is none)."""
    try:
        view = memoryview(obj)
    except TypeError:
        view = _view_of_non_buffer(obj)
    if writable and view.readonly:
        raise _buffer_error(
            f"{what} is read-only ({type(obj).__name__}); use a writable buffer "
            "such as a numpy array or a bytearray"
        )
    if not view.c_contiguous:
        view = _c_contiguous(view)
    return view


def byte_view(obj: Any, writable: bool, call: str = "buffer") -> memoryview:
    """A 1-D, format ``'B'`` view of the memory of a buffer object."""
    view = _contiguous_view(obj, writable, f"{call}: output buffer")
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def _packed_spec(
    mem: memoryview,
    count: int | None,
    displ: int,
    datatype: Datatype,
    impl: _TypeImpl,
    writable: bool,
) -> BufferSpec:
    """The spec of a non-contiguous derived datatype: packed copy or receive area."""
    layout = impl.layout
    extent, nbytes = impl.extent, mem.nbytes
    origin = displ * extent
    if count is None:
        if extent <= 0:
            raise _buffer_error(
                f"cannot infer the count from a datatype of extent {extent}; "
                "use [buf, count, datatype]"
            )
        count, remainder = divmod(nbytes - origin, extent)
        if remainder or count < 0:
            raise _buffer_error(
                f"cannot infer the count: the buffer has {nbytes} bytes, not a multiple of "
                f"the datatype's extent {extent}"
                + (f" after a displacement of {displ}" if displ else "")
            )
    check_span(layout, nbytes, origin, count, "buffer too small")
    user = np.frombuffer(mem, dtype=np.uint8) if nbytes else np.empty(0, np.uint8)
    size = count * layout.packed
    if not writable:
        packed = np.zeros(size, dtype=np.uint8)

        def repack() -> None:
            gather(layout, user, origin, count, packed)

        repack()
        return BufferSpec(memoryview(packed), count, datatype, repack=repack)
    area = bytearray(size)
    target = np.frombuffer(area, dtype=np.uint8) if size else np.empty(0, np.uint8)

    def unpack(received: int, offset: int = 0) -> None:
        first, rest = divmod(offset, layout.packed or 1)
        if rest:
            raise ValueError(f"offset {offset} is not a multiple of {layout.packed}")
        scatter(layout, target, offset, count - first, received, user, origin + first * extent)

    return BufferSpec(memoryview(area), count, datatype, unpack=unpack)


def _view_of_non_buffer(obj: Any) -> memoryview:
    """Return a view of a DLPack tensor, or raise ERR_BUFFER for anything else."""
    if isinstance(obj, _Sentinel):
        if obj is IN_PLACE:
            raise _buffer_error("MPI.IN_PLACE is only valid as a buffer of collective calls")
        raise _buffer_error(f"{obj!r} is not a buffer; use [MPI.BOTTOM, 0, datatype]")
    if hasattr(obj, "__dlpack__"):
        device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
        if device is not None and device[0] != _DLPACK_CPU:
            raise _buffer_error(
                f"{type(obj).__name__} lives in device memory (DLPack device {device}); "
                "only host (CPU) memory can be communicated"
            )
        try:
            return memoryview(np.from_dlpack(obj))
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            message = f"cannot access {type(obj).__name__} through DLPack: {exc}"
            raise _buffer_error(message) from exc
    if hasattr(obj, "__cuda_array_interface__"):
        raise _buffer_error(
            f"{type(obj).__name__} lives in GPU memory; only host (CPU) memory can be communicated"
        )
    if isinstance(obj, (list, tuple)):
        raise _not_a_buffer(obj)
    if isinstance(obj, str):
        raise _buffer_error(f"{_EXPECTED}; got str (encode text first, e.g. text.encode())")
    raise _buffer_error(f"{_EXPECTED}; got {type(obj).__name__}")


def _c_contiguous(view: memoryview) -> memoryview:
    """Return a C-contiguous view of the same memory, or raise if it is not dense."""
    if view.f_contiguous:
        # A Fortran-ordered block is dense memory; its transpose is C-ordered.
        return memoryview(np.asarray(view).T)
    raise _buffer_error(
        "buffer is not contiguous (e.g. a strided slice such as a[::2] or a column of a "
        "2-D array); pass a contiguous copy such as numpy.ascontiguousarray(a)"
    )
