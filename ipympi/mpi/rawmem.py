"""Raw memory of buffer objects: byte views, addresses, and the sentinel buffers.

Every buffer argument ends here: :func:`acquire` takes an object's memory through the
buffer protocol, DLPack or the CUDA array interface (as mpi4py does) as one flat byte
view, without a copy; :func:`address_of` and :func:`absolute_memory` serve data placed
relative to ``BOTTOM``. Nothing here knows datatypes: ``buffers`` builds messages of
datatypes on top of it, and datatypes (``Get_address``, ``Pack``) use it directly.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ..core.errors import ERR_BUFFER
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from .foreign import Foreign, from_cai, from_dlpack

__all__ = [
    "BOTTOM",
    "BUFFER_AUTOMATIC",
    "IN_PLACE",
    "BottomType",
    "BufferAutomaticType",
    "InPlaceType",
]  # what the MPI module exports

_EMPTY_MEM = memoryview(bytearray())
_EXPECTED = "expecting a buffer or a list/tuple [buf, count, displ, datatype]"
_LOWEST_ADDRESS = 4096  # below this no address is valid: a null pointer plus a small offset


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


def acquire(obj: Any, writable: bool) -> tuple[memoryview, str, int]:
    """The memory of a buffer object: a 1-D byte view, the element format and item size.

    Takes the buffer protocol, then DLPack, then the CUDA array interface, as mpi4py
    does. ``TypeError`` if ``obj`` offers none of them; ``BufferError`` if the memory is
    read-only and ``writable`` is asked, or not one contiguous block.
    """
    try:
        view = memoryview(obj)
    except TypeError:
        view = None
    if view is None:
        foreign = _foreign_memory(obj)
        mem, fmt, itemsize = foreign.mem, foreign.format, foreign.itemsize
    else:
        if not view.c_contiguous:
            view = _c_contiguous(view)
        mem, fmt, itemsize = view, view.format, view.itemsize
        if not view.nbytes:  # memoryview cannot cast views with zeros in their shape
            mem = memoryview(b"") if view.readonly else memoryview(bytearray())
        elif view.ndim != 1 or fmt != "B":
            mem = view.cast("B")
    if writable and mem.readonly:
        raise BufferError(
            f"{type(obj).__name__} object is not writable; a receive buffer must be writable"
        )
    return mem, fmt, itemsize


def _foreign_memory(obj: Any) -> Foreign:
    """The memory of a DLPack or CAI object, or ``TypeError`` for anything else."""
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cai(obj)
    if obj is IN_PLACE:
        raise MPIException(ERR_BUFFER, "MPI.IN_PLACE is not allowed as this buffer")
    if isinstance(obj, (list, tuple, str, dict)) or obj is None:
        hint = "; Python objects go through the lower-case methods (send, bcast, ...)"
    else:
        hint = ""
    raise TypeError(f"message: {_EXPECTED}, not {type(obj).__name__}{hint}")


def _c_contiguous(view: memoryview) -> memoryview:
    """Return a C-contiguous view of the same memory, or raise if it is not dense."""
    if view.f_contiguous:
        # A Fortran-ordered block is dense memory; its transpose is C-ordered.
        return memoryview(np.asarray(view).T)
    raise BufferError(
        "buffer is not contiguous (e.g. a strided slice such as a[::2] or a column of a "
        "2-D array); pass a contiguous copy such as numpy.ascontiguousarray(a)"
    )


def byte_view(obj: Any, writable: bool) -> memoryview:
    """A 1-D, format ``'B'`` view of the memory of a buffer object."""
    return acquire(obj, writable)[0]


def address_of(obj: Any) -> int:
    """The address of the first byte of a buffer object (0 for ``BOTTOM`` and None)."""
    if obj is None or obj is BOTTOM:
        return 0
    if obj is IN_PLACE:
        return -1
    if isinstance(obj, np.ndarray):
        if getattr(obj, "_released", False):
            return 0  # an empty or released MPI.buffer: no memory, address 0
        return int(obj.__array_interface__["data"][0])
    try:
        view = memoryview(obj)
    except TypeError:
        return _foreign_memory(obj).address
    if not view.c_contiguous:
        view = _c_contiguous(view)
    return int(np.frombuffer(view.cast("B"), dtype=np.uint8).ctypes.data)


def absolute_memory(low: int, high: int) -> memoryview:
    """The bytes at addresses ``[low, high)``, for data placed relative to ``BOTTOM``.

    As in C, the addresses are the caller's to get right (from ``Get_address`` of live
    objects); an address in the first page is certainly wrong and raises ``ERR_BUFFER``.
    """
    if high <= low:
        return _EMPTY_MEM
    if low < _LOWEST_ADDRESS:
        raise MPIException(
            ERR_BUFFER,
            f"MPI.BOTTOM: the data starts at address {low:#x}, which is not valid memory "
            "(a datatype used with MPI.BOTTOM takes its displacements from Get_address)",
        )
    return memoryview((ctypes.c_ubyte * (high - low)).from_address(low)).cast("B")
