"""``mpi4py.util.dtlib``: convert numpy dtypes to MPI datatypes and back.

:func:`from_numpy_dtype` builds the MPI datatype with the memory layout of a numpy dtype:
a scalar is (a duplicate of) the predefined datatype of its type code, a subarray is a
contiguous (1-D) or subarray (n-D) datatype, and a structured dtype is a struct datatype
of its fields, resized to the dtype's item size where its extent differs.

:func:`to_numpy_dtype` goes the other way by decoding the datatype's constructor
(``Datatype.decode``):

========================================  ================================================
MPI datatype                              numpy dtype
========================================  ================================================
predefined                                its type code (value-index pairs such as
                                          ``MPI.DOUBLE_INT``: an aligned ``(value, int)``
                                          struct)
duplicate                                 the dtype of the original
contiguous ``n``                          subarray of shape ``(n,)``
subarray covering the whole array         subarray of that shape (reversed for Fortran
                                          order: the same memory)
(h)vector, (h)indexed(_block), struct     struct with one field per block, at the
                                          block's byte offset; a block of ``n > 1``
                                          items (always for vectors and indexed types)
                                          is a field of shape ``(n,)``
struct resized to lower bound 0           the same struct with the new item size
========================================  ================================================

A struct's item size is the datatype's extent, or more when the blocks reach past it
(a lower bound above 0 leaves room before the first field); it is an aligned struct
when every field's offset, and the item size, are multiples of the field alignments
and every struct inside it is aligned.
Anything else (partial subarrays, distributed arrays, other resized types, negative
offsets) raises ``ValueError``.

Without numpy, :func:`to_numpy_dtype` returns the specification numpy would take (a type
code, a ``(spec, shape)`` tuple or a dict of ``names``, ``formats``, ``offsets``,
``itemsize`` and ``aligned``) and :func:`from_numpy_dtype` raises ``RuntimeError``.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any, NamedTuple, Union

from ... import MPI

try:
    from numpy import dtype as _numpy_dtype

    _np_dtype: Any = _numpy_dtype
except ImportError:  # pragma: no cover - numpy is a dependency of ipympi
    _np_dtype = None

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]

DTypeSpec = Union[str, tuple, dict]


# -- numpy dtype -> MPI datatype --------------------------------------------------------------


def from_numpy_dtype(dtype: Any) -> MPI.Datatype:
    """Convert a numpy dtype (or anything ``numpy.dtype`` takes) to an MPI datatype.

    The result is always a new datatype (a duplicate, for a scalar), not committed;
    free it when done.
    """
    if _np_dtype is None:
        raise RuntimeError("from_numpy_dtype: numpy is not available")
    datatype = _from_dtype(_np_dtype(dtype))
    return datatype.Dup() if datatype.is_predefined else datatype


def _from_dtype(dt: Any) -> MPI.Datatype:
    """The datatype of ``dt``: predefined for a scalar, else new (free it after use)."""
    if dt.hasobject:
        raise ValueError(f"cannot convert numpy dtype {dt} (it holds Python objects)")
    if dt.fields is not None:
        return _from_struct(dt)
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return _derive(_from_dtype(base), lambda t: _shaped(t, shape))
    return _from_scalar(dt)


def _from_struct(dt: Any) -> MPI.Datatype:
    fields = [dt.fields[name] for name in dt.names]
    types = [_from_dtype(field[0]) for field in fields]
    try:
        struct = MPI.Datatype.Create_struct([1] * len(fields), [f[1] for f in fields], types)
    finally:
        for datatype in types:
            _free(datatype)
    if struct.lb == 0 and struct.extent == dt.itemsize:
        return struct
    return _derive(struct, lambda t: t.Create_resized(0, dt.itemsize))


def _shaped(base: MPI.Datatype, shape: tuple[int, ...]) -> MPI.Datatype:
    if len(shape) == 1:
        return base.Create_contiguous(shape[0])
    return base.Create_subarray(shape, shape, [0] * len(shape), MPI.ORDER_C)


def _from_scalar(dt: Any) -> MPI.Datatype:
    if not dt.isnative:
        raise ValueError(f"cannot convert numpy dtype {dt} (not in native byte order)")
    if dt.kind == "V":
        raise ValueError(f"cannot convert numpy dtype {dt} (raw bytes of no type)")
    if dt.kind in "SU":  # strings: arrays of characters
        char = MPI.Datatype.fromcode("c" if dt.kind == "S" else "U")
        count = dt.itemsize // char.Get_size()
        return char if count == 1 else char.Create_contiguous(count)
    try:
        return MPI.Datatype.fromcode(dt.char)
    except (KeyError, ValueError):
        raise ValueError(f"cannot convert numpy dtype {dt}: no MPI datatype") from None


def _derive(base: MPI.Datatype, make: Any) -> MPI.Datatype:
    """``make(base)``, freeing ``base`` afterwards if it was derived."""
    try:
        return make(base)
    finally:
        _free(base)


def _free(datatype: MPI.Datatype) -> None:
    if not datatype.is_predefined:
        datatype.Free()


# -- MPI datatype -> numpy dtype --------------------------------------------------------------


class _Dtype(NamedTuple):
    """A numpy dtype in the making: the ``spec`` ``numpy.dtype()`` takes, with the layout
    facts a struct around it needs, so that nested types are described only once.

    ``alignment`` is the alignment numpy gives the dtype (1 for an unaligned struct);
    ``aligned`` tells that it holds no unaligned struct; ``fields`` are a struct's
    ``(field, offset)`` pairs (``None`` for other dtypes).
    """

    spec: DTypeSpec
    itemsize: int
    alignment: int
    aligned: bool = True
    fields: tuple[tuple[_Dtype, int], ...] | None = None


def to_numpy_dtype(datatype: MPI.Datatype) -> Any:
    """Convert an MPI datatype to a numpy dtype (or its specification, without numpy)."""
    spec = _describe(datatype).spec
    return spec if _np_dtype is None else _np_dtype(spec)


def _describe(datatype: MPI.Datatype) -> _Dtype:
    if datatype == MPI.DATATYPE_NULL:
        raise ValueError("cannot convert MPI.DATATYPE_NULL")
    base, combiner, params = datatype.decode()
    if combiner == "NAMED" or combiner.startswith("F90_"):
        return _named(datatype)
    if combiner == "DUP":
        return _describe(base)
    if combiner == "CONTIGUOUS":
        return _array(_describe(base), (params["count"],))
    if combiner == "SUBARRAY":
        return _subarray(base, params)
    if combiner == "RESIZED":
        return _resized(datatype, base, params)
    if combiner == "STRUCT":
        blocks = zip(params["blocklengths"], params["displacements"], params["datatypes"])
        fields = [(_array(_describe(t), (n,)) if n != 1 else _describe(t), d) for n, d, t in blocks]
        return _struct(datatype, fields)
    return _struct(datatype, _blocks(base, combiner, params))


def _array(item: _Dtype, shape: tuple[int, ...]) -> _Dtype:
    """A subarray of ``shape`` items."""
    return _Dtype((item.spec, shape), item.itemsize * math.prod(shape), item.alignment,
                  item.aligned)  # fmt: skip


def _blocks(base: MPI.Datatype, combiner: str, params: dict[str, Any]) -> list[tuple[_Dtype, int]]:
    """The ``(field, byte offset)`` blocks of a vector or indexed datatype."""
    unit = base.extent if combiner in ("VECTOR", "INDEXED", "INDEXED_BLOCK") else 1
    if combiner in ("VECTOR", "HVECTOR"):
        count, length, stride = params["count"], params["blocklength"], params["stride"]
        lengths, offsets = [length] * count, [i * stride for i in range(count)]
    elif combiner in ("INDEXED", "HINDEXED"):
        lengths, offsets = params["blocklengths"], params["displacements"]
    elif combiner in ("INDEXED_BLOCK", "HINDEXED_BLOCK"):
        offsets = params["displacements"]
        lengths = [params["blocklength"]] * len(offsets)
    else:
        raise ValueError(f"cannot convert an MPI datatype made by {combiner} to a numpy dtype")
    item = _describe(base)
    return [(_array(item, (n,)), d * unit) for n, d in zip(lengths, offsets)]


def _subarray(base: MPI.Datatype, params: dict[str, Any]) -> _Dtype:
    sizes, subsizes, starts = params["sizes"], params["subsizes"], params["starts"]
    if list(sizes) != list(subsizes) or any(starts):
        raise ValueError("cannot convert a subarray datatype that is part of its array")
    shape = tuple(sizes) if params["order"] == MPI.ORDER_C else tuple(reversed(sizes))
    return _array(_describe(base), shape)


def _resized(datatype: MPI.Datatype, base: MPI.Datatype, params: dict[str, Any]) -> _Dtype:
    inner = _describe(base)
    if params["lb"] != 0 or inner.fields is None:
        raise ValueError("cannot convert a resized datatype other than a struct with lb 0")
    return _struct(datatype, list(inner.fields))


def _struct(datatype: MPI.Datatype, fields: list[tuple[_Dtype, int]]) -> _Dtype:
    """The struct of ``fields`` (``(field, offset)``) laid out as ``datatype``."""
    if any(offset < 0 for _, offset in fields):
        raise ValueError("cannot convert a datatype with blocks below offset 0")
    end = max((offset + field.itemsize for field, offset in fields), default=0)
    itemsize = max(datatype.extent, end)
    alignment = max((field.alignment for field, _ in fields), default=1)
    aligned = (
        all(offset % field.alignment == 0 and field.aligned for field, offset in fields)
        and itemsize % alignment == 0  # numpy aligns nested structs too
    )
    spec = {
        "names": [f"f{i}" for i in range(len(fields))],
        "formats": [field.spec for field, _ in fields],
        "offsets": [offset for _, offset in fields],
        "itemsize": itemsize,
        "aligned": aligned,
    }
    return _Dtype(spec, itemsize, alignment if aligned else 1, aligned, tuple(fields))


# -- predefined datatypes ---------------------------------------------------------------------

_PAIRS = {
    "SHORT_INT": "h",
    "INT_INT": "i",
    "TWOINT": "i",
    "LONG_INT": "l",
    "FLOAT_INT": "f",
    "DOUBLE_INT": "d",
    "LONG_DOUBLE_INT": "g",
}


def _named(datatype: MPI.Datatype) -> _Dtype:
    """A predefined datatype: its type code, or a value-index pair struct."""
    try:
        return _scalar(datatype.tocode())
    except ValueError:  # no type code: a pair, or a type numpy has no scalar for
        pass
    for name, value_code in _PAIRS.items():
        pair = getattr(MPI, name, None)
        if pair is not None and pair != MPI.DATATYPE_NULL and datatype == pair:
            # C's struct {value; int}: the index at the first offset aligned for an int
            value, index = _scalar(value_code), _scalar("i")
            offset = -(-value.itemsize // index.alignment) * index.alignment
            return _struct(datatype, [(value, 0), (index, offset)])
    typestr = datatype.typestr
    if not typestr or typestr[0] == "V":
        raise ValueError(f"cannot convert {datatype.name} to a numpy dtype")
    return _scalar(typestr)


# Alignment of numpy's type codes, as the C compiler aligns the matching C types.
_C_ALIGNMENT = {
    "?": ctypes.alignment(ctypes.c_bool),
    "b": 1, "B": 1, "c": 1, "S": 1, "V": 1,
    "h": ctypes.alignment(ctypes.c_short), "H": ctypes.alignment(ctypes.c_short),
    "i": ctypes.alignment(ctypes.c_int), "I": ctypes.alignment(ctypes.c_int),
    "l": ctypes.alignment(ctypes.c_long), "L": ctypes.alignment(ctypes.c_long),
    "q": ctypes.alignment(ctypes.c_longlong), "Q": ctypes.alignment(ctypes.c_longlong),
    "p": ctypes.alignment(ctypes.c_ssize_t), "P": ctypes.alignment(ctypes.c_size_t),
    "e": 2,
    "f": ctypes.alignment(ctypes.c_float), "F": ctypes.alignment(ctypes.c_float),
    "d": ctypes.alignment(ctypes.c_double), "D": ctypes.alignment(ctypes.c_double),
    "g": ctypes.alignment(ctypes.c_longdouble), "G": ctypes.alignment(ctypes.c_longdouble),
    "U": ctypes.alignment(ctypes.c_wchar),
}  # fmt: skip


@functools.cache
def _scalar(code: str) -> _Dtype:
    """A type code (``'i'``) or type string (``'i4'``), with its itemsize and alignment."""
    kind, digits = code[0], code[1:]
    if not digits:
        return _Dtype(code, _CODE_SIZES[kind], _C_ALIGNMENT[kind])
    size = int(digits)
    if kind in "SUV":
        return _Dtype(code, size * (4 if kind == "U" else 1), _C_ALIGNMENT[kind])
    if kind == "c":  # complex of two floats
        return _Dtype(code, size, min(size // 2, _C_ALIGNMENT["g"]))
    return _Dtype(code, size, min(size, _C_ALIGNMENT["g"]))


_CODE_SIZES = {
    "?": ctypes.sizeof(ctypes.c_bool), "b": 1, "B": 1, "c": 1, "S": 1,
    "h": ctypes.sizeof(ctypes.c_short), "H": ctypes.sizeof(ctypes.c_short),
    "i": ctypes.sizeof(ctypes.c_int), "I": ctypes.sizeof(ctypes.c_int),
    "l": ctypes.sizeof(ctypes.c_long), "L": ctypes.sizeof(ctypes.c_long),
    "q": ctypes.sizeof(ctypes.c_longlong), "Q": ctypes.sizeof(ctypes.c_longlong),
    "p": ctypes.sizeof(ctypes.c_ssize_t), "P": ctypes.sizeof(ctypes.c_size_t),
    "e": 2,
    "f": ctypes.sizeof(ctypes.c_float), "F": 2 * ctypes.sizeof(ctypes.c_float),
    "d": ctypes.sizeof(ctypes.c_double), "D": 2 * ctypes.sizeof(ctypes.c_double),
    "g": ctypes.sizeof(ctypes.c_longdouble), "G": 2 * ctypes.sizeof(ctypes.c_longdouble),
    "U": ctypes.sizeof(ctypes.c_wchar),
}  # fmt: skip
