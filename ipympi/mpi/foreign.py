"""Memory of objects without the buffer protocol: DLPack tensors and the CUDA array interface.

mpi4py takes message memory from three kinds of objects: those with Python's buffer
protocol, DLPack producers (``__dlpack__``) and objects with a
``__cuda_array_interface__`` (CAI). For the last two it does not ask a library to make an
array; it reads the description itself and passes the data pointer to MPI, whatever
memory it points to. This module does the same for ipympi, which must then touch the
memory from Python: the result is a :class:`Foreign` holding a byte ``memoryview`` made
from the raw address with ctypes, plus the element format the description implies.

DLPack: ``obj.__dlpack__()`` returns a capsule named ``"dltensor_versioned"`` (a
``DLManagedTensorVersioned``) or ``"dltensor"`` (the legacy ``DLManagedTensor``). The
capsule is read where it is and kept alive for as long as the view is: it is neither
renamed to ``"used_dltensor..."`` nor its deleter called, so the producer's capsule
destructor stays the one owner of the tensor's lifetime. (Consuming the capsule the way
``numpy.from_dlpack`` does would keep a pointer into a ``DLManagedTensor`` that a
ctypes-made capsule frees with itself.) Only a versioned tensor's read-only flag makes
the memory read-only; a legacy tensor is writable.

CAI: the dictionary's ``data`` pointer, ``typestr``, ``shape`` and optional ``strides``,
``descr`` and ``mask`` are checked as mpi4py checks them; its read-only flag is honoured.

Errors are what mpi4py raises: ``TypeError``, ``KeyError`` and ``ValueError`` for
malformed descriptions (as the Python operations that read them raise them), and
``BufferError`` for memory that cannot be used (non-contiguous, read-only for a
receive, a consumed capsule, an unsupported DLPack version, masked arrays, foreign
byte order).
"""

from __future__ import annotations

import ctypes
import operator
import sys
import warnings
from typing import Any

__all__ = ["Foreign", "from_cai", "from_dlpack"]

KDL_CPU = 1  # kDLCPU, DLPack's device type for host memory
_DLPACK_MAJOR = 1  # the DLManagedTensorVersioned ABI this module reads
_FLAG_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

# Element formats (struct/buffer-protocol codes) by kind and size in bytes; one table
# serves DLPack's type codes (mapped to these kinds) and CAI's typestr kinds.
_LONG_IS_64 = ctypes.sizeof(ctypes.c_long) == 8
_FORMATS_BY_KIND: dict[str, dict[int, str]] = {
    "i": {1: "b", 2: "h", 4: "i", 8: "l" if _LONG_IS_64 else "q"},
    "u": {1: "B", 2: "H", 4: "I", 8: "L" if _LONG_IS_64 else "Q"},
    "f": {2: "e", 4: "f", 8: "d", ctypes.sizeof(ctypes.c_longdouble): "g"},
    "c": {8: "Zf", 16: "Zd", 2 * ctypes.sizeof(ctypes.c_longdouble): "Zg"},
    "b": {1: "?"},
}
_DLPACK_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}  # kDLInt, kDLUInt, ... kDLBool


class Foreign:
    """The memory of a DLPack tensor or CAI object, as ipympi uses it.

    ``mem`` is a 1-D, format ``'B'`` memoryview of the ``nbytes`` bytes (read-only when
    the producer says so); it keeps the producer's object (the capsule, or the CAI
    object) alive. ``format``/``itemsize`` describe the elements (``'B'``/1 for types
    with no buffer-protocol code), ``address`` is the first byte, and ``host`` says
    whether the producer declared host memory (mpi4py accesses device memory only
    through MPI, never from Python).
    """

    __slots__ = ("address", "format", "host", "itemsize", "mem")

    def __init__(self, mem: memoryview, fmt: str, itemsize: int, address: int, host: bool) -> None:
        self.mem = mem
        self.format = fmt
        self.itemsize = itemsize
        self.address = address
        self.host = host


def _raw_view(address: int, nbytes: int, readonly: bool, owner: Any) -> memoryview:
    """A byte view of ``nbytes`` at ``address`` that keeps ``owner`` alive."""
    if not nbytes or not address:
        view = memoryview(b"" if readonly else bytearray())
        return view
    raw = (ctypes.c_ubyte * nbytes).from_address(address)
    raw._owner = owner  # type: ignore[attr-defined]  # ctypes instances take attributes: the view keeps the owner alive
    view = memoryview(raw).cast("B")
    return view.toreadonly() if readonly else view


def _element_format(kind: str, itemsize: int) -> str:
    """The buffer-protocol code for ``kind`` elements of ``itemsize`` bytes, else ``'B'``."""
    return _FORMATS_BY_KIND.get(kind, {}).get(itemsize, "B")


def _contiguous(shape: list[int], strides: list[int] | None, unit: int) -> bool:
    """Whether ``strides`` (in multiples of ``unit``) lay ``shape`` out densely in C or
    Fortran order; dimensions of length 1 may have any stride."""
    if strides is None:
        return True
    for order in (range(len(shape) - 1, -1, -1), range(len(shape))):
        expected = unit
        for i in order:
            if shape[i] != 1 and strides[i] != expected:
                break
            expected *= shape[i]
        else:
            return True
    return False


# --- DLPack --------------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]  # fmt: skip


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _device(obj: Any) -> tuple[int, int]:
    """``obj.__dlpack_device__()`` as two ints (host when the method is missing)."""
    method = getattr(obj, "__dlpack_device__", None)
    if method is None and not hasattr(obj, "__dlpack_device__"):
        return KDL_CPU, 0
    device_type, device_id = method()  # type: ignore[misc]  # TypeError/ValueError: None, or a malformed answer
    return operator.index(device_type), operator.index(device_id)


def _capsule(obj: Any, device_type: int) -> Any:
    """Ask ``obj`` for its capsule, newest protocol first (host: no stream; else -1)."""
    stream = None if device_type == KDL_CPU else -1
    try:
        return obj.__dlpack__(stream=stream, max_version=(_DLPACK_MAJOR, 0))
    except TypeError:  # a producer of the legacy protocol: no max_version keyword
        return obj.__dlpack__(stream=stream)


def _tensor_of(capsule: Any) -> tuple[_DLTensor, bool]:
    """The DLTensor in a capsule and whether it is read-only (``BufferError`` if unusable)."""
    if type(capsule).__name__ != "PyCapsule":
        raise BufferError(f"dlpack: expected a capsule, got {type(capsule).__name__}")
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(
            _capsule_pointer(capsule, b"dltensor_versioned")
        )
        if managed.version.major != _DLPACK_MAJOR:
            raise BufferError(
                f"dlpack: unsupported DLPack version {managed.version.major}."
                f"{managed.version.minor} (ipympi reads version {_DLPACK_MAJOR})"
            )
        return managed.dl_tensor, bool(managed.flags & _FLAG_READ_ONLY)
    if _capsule_is_valid(capsule, b"dltensor"):
        legacy = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        return legacy.dl_tensor, False
    raise BufferError("dlpack: the capsule is not a live DLPack tensor (consumed already?)")


def from_dlpack(obj: Any) -> Foreign:
    """The memory of a DLPack producer, read from the capsule's tensor description."""
    device_type, _ = _device(obj)
    capsule = _capsule(obj, device_type)
    tensor, readonly = _tensor_of(capsule)
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferError(f"dlpack: negative number of dimensions {ndim}")
    if ndim and not tensor.shape:
        raise BufferError("dlpack: the tensor has dimensions but no shape")
    shape = [tensor.shape[i] for i in range(ndim)]
    if any(n < 0 for n in shape):
        raise BufferError(f"dlpack: negative extent in shape {shape}")
    strides = [tensor.strides[i] for i in range(ndim)] if ndim and tensor.strides else None
    if not _contiguous(shape, strides, 1):
        raise BufferError("dlpack: buffer is not contiguous")
    dtype = tensor.dtype
    itemsize = (dtype.bits * dtype.lanes + 7) // 8
    fmt = "B"
    if dtype.lanes == 1 and dtype.code in _DLPACK_KINDS:
        fmt = _element_format(_DLPACK_KINDS[dtype.code], itemsize)
    elif dtype.lanes == 2 and _DLPACK_KINDS.get(dtype.code) == "f":
        fmt = _element_format("c", itemsize)  # a (real, imaginary) pair: complex
    if fmt == "B":
        itemsize = 1
    size = 1
    for n in shape:
        size *= n
    nbytes = size * ((dtype.bits * dtype.lanes + 7) // 8)
    address = (tensor.data or 0) + tensor.byte_offset
    mem = _raw_view(address, nbytes, readonly, capsule)
    return Foreign(mem, fmt, itemsize, address, device_type == KDL_CPU)


# --- CUDA array interface --------------------------------------------------------------------


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if type(value) is not tuple and type(value) is not list:
        raise TypeError(f"__cuda_array_interface__: {what} must be a tuple, not "
                        f"{type(value).__name__}")  # fmt: skip
    return tuple(operator.index(v) for v in value)


def _typestr(typestr: Any) -> tuple[str, int]:
    """The element kind and size of a CAI ``typestr`` such as ``'<f8'``."""
    if not isinstance(typestr, str):
        raise TypeError(
            f"__cuda_array_interface__: typestr must be a str, not {type(typestr).__name__}"
        )
    order, kind, size = typestr[:1], typestr[1:2], typestr[2:]
    native = "<" if sys.byteorder == "little" else ">"
    if order not in (native, "|", "="):
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} has foreign byte order")
    return kind, int(size)  # ValueError for a malformed size


def from_cai(obj: Any) -> Foreign:
    """The memory described by ``obj.__cuda_array_interface__`` (taken as an address)."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError(f"__cuda_array_interface__ must be a dict, not {type(cai).__name__}")
    address, readonly = cai["data"]  # KeyError / TypeError / ValueError as malformed
    address = operator.index(address)
    if cai.get("mask") is not None:
        raise BufferError("__cuda_array_interface__: masked arrays are not supported")
    kind, itemsize = _typestr(cai["typestr"])
    shape = _int_tuple(cai["shape"], "shape")
    if any(n < 0 for n in shape):
        raise BufferError(f"__cuda_array_interface__: negative extent in shape {shape}")
    strides = cai.get("strides")
    if strides is not None:
        strides = _int_tuple(strides, "strides")
    if not _contiguous(list(shape), None if strides is None else list(strides), itemsize):
        raise BufferError("__cuda_array_interface__: buffer is not contiguous")
    descr = cai.get("descr")
    if descr is not None:
        if not isinstance(descr, list):
            raise TypeError(
                f"__cuda_array_interface__: descr must be a list, not {type(descr).__name__}"
            )
        if len(descr) != 1 or descr[0][1] != cai["typestr"]:
            warnings.warn(
                "__cuda_array_interface__: the fields in 'descr' are ignored; the memory "
                f"is taken as items of typestr {cai['typestr']!r}",
                RuntimeWarning,
                stacklevel=4,
            )
    fmt = _element_format(kind, itemsize)
    size = 1
    for n in shape:
        size *= n
    mem = _raw_view(address, size * itemsize, bool(readonly), obj)
    return Foreign(mem, fmt, 1 if fmt == "B" else itemsize, address, False)
