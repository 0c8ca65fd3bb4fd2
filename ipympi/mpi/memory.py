"""``MPI.buffer`` (alias ``MPI.memory``), ``MPI.Alloc_mem`` and ``MPI.Free_mem``.

``MPI.buffer`` is mpi4py's view of raw memory: a 1-D run of bytes with an address, made
from another object's memory (:meth:`buffer.frombuffer`, including DLPack and CAI
objects), from a raw address (:meth:`buffer.fromaddress`) or newly allocated
(:meth:`buffer.allocate`). It is a sequence of byte values, exposes the buffer protocol
(format ``'B'``) and can be released, after which it is empty.

The class is a subclass of ``numpy.ndarray`` (``uint8``, 1-D): Python 3.11 has no way
for a pure-Python class to export the buffer protocol (``__buffer__`` came with 3.12),
and an array can view any memory, keep its owner alive and export it. The class
overrides what makes it behave as mpi4py's buffer rather than as an array: indexing
(integers and step-1 slices only), assignment, ``len``, truth, equality (identity),
``repr`` and pickling (refused). Memory that a DLPack or CAI producer declares to be on
a device is passed to MPI by address but never read from Python (``BufferError``).

MPI lets an implementation hand out memory that is faster for communication (MPI-3.0
§2.2). ipympi has no special memory, so ``Alloc_mem`` is ``buffer.allocate``; what this
module adds is the bookkeeping the standard asks for: ``Free_mem`` accepts only blocks
from ``Alloc_mem`` (else ``ERR_BASE``) and releases them.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from typing import Any, cast

from ..core.errors import ERR_ARG, ERR_BASE, ERR_INFO, ERR_NO_MEM
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from .foreign import from_cai, from_dlpack
from .info import INFO_NULL, Info
from .rawmem import acquire

__all__ = ["Alloc_mem", "Free_mem", "buffer", "memory"]

_NO_ARGUMENT = object()


class buffer(np.ndarray):
    """A run of raw bytes: mpi4py's ``MPI.buffer``.

    ``buffer()`` is empty; ``buffer(obj)`` views the memory of ``obj`` (read-only when
    ``obj`` is). ``address``, ``nbytes``, ``readonly`` and ``obj`` (the object that owns
    the memory, or None) describe it; ``release()`` empties it.
    """

    _owner: Any = None
    _host: bool = True
    _released: bool = False

    def __new__(cls, buf: Any = _NO_ARGUMENT) -> buffer:
        if buf is _NO_ARGUMENT:
            return _null()
        return cls.frombuffer(buf, readonly=_is_readonly(buf))

    @classmethod
    def _make(cls, array: np.ndarray, owner: Any, host: bool) -> buffer:
        self = cast(buffer, array.view(cls))
        self._owner = owner
        self._host = host
        return self

    def __array_finalize__(self, parent: Any) -> None:
        # Views that numpy makes (slices, .view()) share the parent's memory and owner.
        self._owner = getattr(parent, "_owner", None)
        self._host = getattr(parent, "_host", True)
        self._released = False

    # -- constructors ---------------------------------------------------------------------
    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> buffer:
        """A new buffer of ``nbytes`` bytes (zeroed if ``clear``); ``obj`` owns them."""
        size = operator.index(nbytes)
        if size < 0:
            raise ValueError(f"expecting non-negative size, got {size}")
        # A numpy block has an address even when empty, and is its own owner.
        block = np.zeros(size, np.uint8) if clear else np.empty(size, np.uint8)
        return buffer._make(block, block, True)

    @staticmethod
    def frombuffer(obj: Any, readonly: bool = False) -> buffer:
        """A buffer viewing the memory of ``obj`` (buffer protocol, DLPack or CAI).

        Raises ``BufferError`` if ``readonly`` is false and the memory is read-only.
        """
        host = True
        if not _has_buffer_protocol(obj):
            foreign = _foreign(obj)
            host = foreign.host
            mem = foreign.mem
            if not readonly and mem.readonly:
                raise BufferError(f"{type(obj).__name__} object is not writable")
        else:
            mem = acquire(obj, not readonly)[0]
        array = np.frombuffer(mem, np.uint8) if mem.nbytes else np.empty(0, np.uint8)
        if readonly:
            array.flags.writeable = False
        return buffer._make(array, obj, host)

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> buffer:
        """A buffer of ``nbytes`` at a raw ``address``; nothing keeps that memory alive."""
        if address is None:
            raise TypeError("an integer is required")
        address, size = operator.index(address), operator.index(nbytes)
        if size < 0:
            raise ValueError(f"expecting non-negative buffer length, got {size}")
        if address == 0 and size > 0:
            raise ValueError("expecting non-NULL address")
        if size == 0:
            return _null()
        else:
            array = np.frombuffer(
                memoryview((ctypes.c_ubyte * size).from_address(address)), np.uint8
            )
        if readonly:
            array.flags.writeable = False
        return buffer._make(array, None, True)

    # -- description ----------------------------------------------------------------------
    @property
    def address(self) -> int:
        """The address of the first byte (0 once released)."""
        return 0 if self._released else int(self.__array_interface__["data"][0])

    @property
    def obj(self) -> Any:
        """The object whose memory this is, or None."""
        return None if self._released else self._owner

    @property
    def nbytes(self) -> int:
        """The length in bytes (0 once released)."""
        return 0 if self._released else self.size

    @property
    def readonly(self) -> bool:
        """Whether the memory may not be written through this buffer."""
        return not self._released and not self.flags.writeable

    @property
    def format(self) -> str:
        """Always ``'B'``: the items are unsigned bytes."""
        return "B"

    def __len__(self) -> int:
        return self.nbytes

    def __bool__(self) -> bool:
        return self.nbytes > 0

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f"address={self.address:#x}, nbytes={self.nbytes}"
        return f"<MPI.buffer object at {id(self):#x}: {where}>"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("cannot pickle 'MPI.buffer' object")

    # -- the sequence of bytes ------------------------------------------------------------
    def _host_view(self) -> np.ndarray:
        if not self._host:
            raise BufferError("the buffer is device memory: it cannot be accessed from Python")
        plain: np.ndarray = self.view(np.ndarray)
        return plain[:0] if self._released else plain

    def _range(self, item: Any) -> Any:
        """The int or step-1 slice that ``item`` selects (IndexError/TypeError else)."""
        n = self.nbytes
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step != 1:
                raise IndexError("slice with step not supported")
            return slice(start, max(start, stop))
        try:
            index = operator.index(item)
        except TypeError:
            raise TypeError("index must be integer or slice") from None
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("index out of range")
        return index

    def __getitem__(self, item: Any) -> Any:
        where = self._range(item)
        data = self._host_view()
        if isinstance(where, slice):
            part = cast(buffer, data[where].view(buffer))
            part._owner, part._host = self._owner, self._host
            return part
        return int(data[where])

    def __setitem__(self, item: Any, value: Any) -> None:
        where = self._range(item)
        data = self._host_view()
        if not data.flags.writeable:
            raise TypeError("buffer is read-only")
        if isinstance(where, slice) and not isinstance(value, int):
            source = np.frombuffer(memoryview(value).cast("B"), np.uint8)
            if source.size != where.stop - where.start:
                raise ValueError("slice length does not match buffer")
            value = source
        data[where] = value

    def __delitem__(self, item: Any) -> None:
        raise NotImplementedError("a buffer's bytes cannot be deleted")

    # -- conversions ----------------------------------------------------------------------
    def cast(self, format: str, shape: Any = None) -> memoryview:
        """A memoryview of the bytes as items of ``format`` (and ``shape``)."""
        view = memoryview(self._host_view())  # type: ignore[arg-type]
        return view.cast(format) if shape is None else view.cast(format, shape)  # type: ignore[call-overload]

    def tobytes(self, order: Any = None) -> bytes:
        """The bytes as a ``bytes`` object (``order`` is accepted for compatibility)."""
        return self._host_view().tobytes()

    def toreadonly(self) -> buffer:
        """A read-only buffer of the same memory and owner."""
        view: np.ndarray = self.view(np.ndarray)[: self.nbytes]
        if view.flags.writeable:
            view = view.view()
            view.flags.writeable = False
        return buffer._make(view, self.obj, self._host)

    def release(self) -> None:
        """Empty the buffer: address and size 0, no owner; the memory is not freed."""
        self._released = True
        self._owner = None


memory = buffer  # mpi4py's older name


def _null() -> buffer:
    """The empty buffer at address 0, writable and without owner (``buffer()``)."""
    empty = buffer._make(np.empty(0, np.uint8), None, True)
    empty._released = True
    return empty


def _has_buffer_protocol(obj: Any) -> bool:
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def _is_readonly(obj: Any) -> bool:
    """Whether ``obj``'s memory is read-only (for ``buffer(obj)``)."""
    if _has_buffer_protocol(obj):
        with memoryview(obj) as view:
            return view.readonly
    return _foreign(obj).mem.readonly


def _foreign(obj: Any) -> Any:
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cai(obj)
    raise TypeError(f"expecting buffer-like object, not {type(obj).__name__}")


# --- Alloc_mem / Free_mem --------------------------------------------------------------------

_lock = threading.Lock()
_blocks: dict[int, buffer] = {}  # id(owner) -> the buffer Alloc_mem returned


def Alloc_mem(size: int, info: Info = INFO_NULL) -> buffer:
    """Allocate ``size`` bytes and return them as a zero-filled ``MPI.buffer``.

    Raises ``Exception(ERR_ARG)`` for a negative size and ``Exception(ERR_NO_MEM)`` when
    the memory cannot be allocated. ``info`` hints are accepted and ignored.
    """
    nbytes = operator.index(size)
    if not isinstance(info, Info):
        raise MPIException(ERR_INFO, f"Alloc_mem: info must be an MPI.Info, not {info!r}")
    if nbytes < 0:
        raise MPIException(ERR_ARG, f"Alloc_mem: size must not be negative; got {nbytes}")
    try:
        block = buffer.allocate(nbytes, clear=True)
    except (MemoryError, OverflowError, ValueError):
        raise MPIException(ERR_NO_MEM, f"Alloc_mem: cannot allocate {nbytes} bytes") from None
    with _lock:
        _blocks[id(block.obj)] = block
    return block


def Free_mem(mem: Any) -> None:
    """Free a block returned by ``Alloc_mem``; the buffer is released.

    A block is named by its address, as ``MPI_Free_mem`` names it: another buffer over
    its memory (a window's ``tomemory()``) frees it too. Anything else, including a
    block freed before, raises ``Exception(ERR_BASE)``.
    """
    owner = mem.obj if isinstance(mem, buffer) else None
    with _lock:
        key = id(owner)
        block = _blocks.get(key) if owner is not None else None
        if owner is not None and (block is None or block.address != mem.address):
            key, block = next(
                ((k, b) for k, b in _blocks.items() if b.nbytes and b.address == mem.address),
                (key, None),
            )
        if block is not None and block.address == mem.address:
            del _blocks[key]
        else:
            block = None
    if block is None:
        raise MPIException(
            ERR_BASE, f"Free_mem: {type(mem).__name__} object is not memory from Alloc_mem"
        )
    block.release()
    mem.release()
