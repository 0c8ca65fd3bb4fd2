"""``MPI.Datatype`` handles and the predefined datatypes.

A datatype says how to interpret the bytes of a message buffer. Each predefined datatype
corresponds to a C or Fortran type and, when one exists, to a numpy dtype of the same
size; the numpy dtype lets reductions work on typed views of the raw memory. Every
datatype also has a typemap (:class:`ipympi.core.typemap.Layout`); the constructors of
derived datatypes, their decoding and Pack/Unpack live in :mod:`ipympi.mpi.datatype_derived`.

Handles are small objects referring to a shared :class:`_TypeImpl`, so that two handles of
the same datatype compare equal and ``Free()`` can turn one handle into ``DATATYPE_NULL``
without disturbing operations that still use the type (MPI-3.0 §1.5.1).

The module also maps type codes (``'i'``, ``'d'``, ``'i4'``, ``memoryview.format``
strings) to datatypes, which is how a buffer given without a datatype gets one.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from ..core import typemap as tm
from ..core.constants import COMBINER_DUP, COMBINER_NAMED, MAX_OBJECT_NAME
from ..core.errors import ERR_TYPE
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from ..core.lazynumpy import np
from .attributes import TypeAttributes, delete_attributes
from .datatype_derived import (
    Aint_add,
    Aint_diff,
    DerivedMixin,
    Get_address,
    defer_leaves,
    make_leaves,
)
from .datatype_lookup import LookupMixin, itemsize, original, pair_sizes

__all__ = [
    "AINT", "BFLOAT16_T", "BOOL", "BYTE", "CHAR", "CHARACTER", "COMPLEX", "COMPLEX4",
    "COMPLEX8", "COMPLEX16", "COMPLEX32", "COUNT", "CXX_BOOL", "CXX_DOUBLE_COMPLEX",
    "CXX_FLOAT_COMPLEX", "CXX_LONG_DOUBLE_COMPLEX", "C_BOOL", "C_COMPLEX", "C_DOUBLE_COMPLEX",
    "C_FLOAT_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "DATATYPE_NULL", "DOUBLE", "DOUBLE_COMPLEX",
    "DOUBLE_INT", "DOUBLE_PRECISION", "FLOAT", "FLOAT16_T", "FLOAT32_T", "FLOAT64_T",
    "FLOAT_INT", "F_BOOL", "F_COMPLEX", "F_DOUBLE", "F_DOUBLE_COMPLEX", "F_FLOAT",
    "F_FLOAT_COMPLEX", "F_INT", "INT", "INT8_T", "INT16_T", "INT32_T", "INT64_T", "INTEGER",
    "INTEGER1", "INTEGER2", "INTEGER4", "INTEGER8", "INTEGER16", "INT_INT", "LB", "LOGICAL",
    "LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8", "LOGICAL16", "LONG", "LONG_DOUBLE",
    "LONG_DOUBLE_INT", "LONG_INT", "LONG_LONG", "LONG_LONG_INT", "OFFSET", "PACKED", "REAL",
    "REAL2", "REAL4", "REAL8", "REAL16", "SHORT", "SHORT_INT", "SIGNED_CHAR", "SIGNED_INT",
    "SIGNED_LONG", "SIGNED_LONG_LONG", "SIGNED_SHORT", "SINT8_T", "SINT16_T", "SINT32_T",
    "SINT64_T", "TWOINT", "UB", "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T", "UNSIGNED",
    "UNSIGNED_CHAR", "UNSIGNED_INT", "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "UNSIGNED_SHORT",
    "WCHAR", "Aint_add", "Aint_diff", "Datatype", "Get_address", ]  # fmt: skip


class _TypeImpl:
    """The datatype object that :class:`Datatype` handles refer to.

    ``size`` is the number of data bytes of one element; ``lb``/``extent`` give its
    memory span, padding included, which is the stride between consecutive elements;
    ``true_lb``/``true_extent`` span the data bytes only. ``np_dtype`` is the numpy dtype
    with itemsize ``extent`` used for typed views, or ``None`` when numpy has no
    equivalent. ``msg_ok`` tells whether the type may describe message data. ``layout``
    is the typemap and ``contents`` the constructor's arguments (integers, addresses,
    datatype objects) for ``Get_contents``.
    """

    __slots__ = (
        "__weakref__",
        "_dtype_spec",
        "_layout",
        "_np_dtype",
        "attrs",
        "code",
        "combiner",
        "committed",
        "contents",
        "extent",
        "key",
        "lb",
        "msg_ok",
        "name",
        "parent",
        "predefined",
        "size",
        "true_extent",
        "true_lb",
    )

    def __init__(
        self,
        key: str | None,
        name: str,
        size: int,
        extent: int,
        np_dtype: np.dtype[Any] | None,
        code: str | None,
        *,
        dtype_spec: Any = None,
        true_extent: int | None = None,
        msg_ok: bool = True,
        predefined: bool = True,
        combiner: int = COMBINER_NAMED,
        parent: _TypeImpl | None = None,
    ) -> None:
        self.key = key
        self.name = name
        self.size = size
        self.extent = extent
        self.lb = 0
        self.true_lb = 0
        self.true_extent = extent if true_extent is None else true_extent
        self._np_dtype = np_dtype
        self._dtype_spec = dtype_spec  # what np_dtype is made of, when first asked
        self.code = code
        self.msg_ok = msg_ok
        self.predefined = predefined
        self.committed = True
        self.combiner = combiner
        self.parent = parent
        self._layout: tm.Layout | None = None  # a predefined type's leaf, when first asked
        self.contents: tuple[list[int], list[int], list[_TypeImpl]] = ([], [], [])
        self.attrs: dict[int, tuple[Any, Any]] = {}  # keyval -> (Keyval, value), set order

    @property
    def np_dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype (a predefined type's is made on first use: numpy's import waits
        until a buffer needs it)."""
        dtype = self._np_dtype
        if dtype is None and self._dtype_spec is not None:
            dtype = self._np_dtype = np.dtype(self._dtype_spec, align=True)
        return dtype

    @property
    def layout(self) -> tm.Layout:
        """The typemap (every predefined type's is made, in one go, on first use)."""
        layout = self._layout
        if layout is None:
            make_leaves()
            layout = self._layout
            if layout is None:  # no leaf of its own (DATATYPE_NULL)
                layout = self._layout = _ZERO_LAYOUT
        return layout

    @layout.setter
    def layout(self, layout: tm.Layout) -> None:
        self._layout = layout

    @classmethod
    def derived(
        cls, layout: tm.Layout, combiner: int, contents: tuple[list[int], list[int], list[Any]]
    ) -> _TypeImpl:
        """A new, uncommitted derived datatype with the given typemap."""
        impl = cls(
            None,
            "",
            layout.size,
            layout.extent,
            None,
            None,
            true_extent=layout.true_ub - layout.true_lb,
            msg_ok=layout.msg_ok,
            predefined=False,
            combiner=combiner,
        )
        impl.lb, impl.true_lb = layout.lb, layout.true_lb
        impl.committed = False
        impl.layout = layout
        impl.contents = contents
        return impl

    def duplicate(self) -> _TypeImpl:
        """Return an unnamed, non-predefined copy with combiner ``COMBINER_DUP``."""
        dup = _TypeImpl(
            None,
            "",
            self.size,
            self.extent,
            self._np_dtype,
            None,
            dtype_spec=self._dtype_spec,
            true_extent=self.true_extent,
            msg_ok=self.msg_ok,
            predefined=False,
            combiner=COMBINER_DUP,
            parent=self,
        )
        dup.lb, dup.true_lb = self.lb, self.true_lb
        dup.committed = self.committed
        dup.layout = self.layout
        dup.contents = ([], [], [self])
        return dup


_ZERO_LAYOUT = tm.zerolen()
_NULL_IMPL = _TypeImpl("DATATYPE_NULL", "MPI_DATATYPE_NULL", 0, 0, None, None, msg_ok=False)


def _type_error(message: str) -> MPIException:
    return MPIException(ERR_TYPE, message)


class Datatype(TypeAttributes, DerivedMixin, LookupMixin, Handle):
    """A handle to an MPI datatype.

    ``Datatype(dt)`` makes a new handle to the same datatype as ``dt`` (equal to it);
    ``Datatype()`` is a null handle, equal to ``DATATYPE_NULL``.
    """

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Datatype", 3, ERR_TYPE, _NULL_IMPL)
    _impl: _TypeImpl

    @classmethod
    def _from_impl(cls, impl: _TypeImpl) -> Datatype:
        handle = object.__new__(cls)
        handle._impl = impl
        return handle

    def _is_predefined(self) -> bool:
        return self._impl.predefined

    @classmethod
    def _derive(
        cls, layout: tm.Layout, combiner: int, contents: tuple[list[int], list[int], list[Any]]
    ) -> Datatype:
        """A handle to a new derived datatype."""
        return cls._from_impl(_TypeImpl.derived(layout, combiner, contents))

    @classmethod
    def _handle(cls, impl: _TypeImpl) -> Datatype:
        """The predefined handle of a predefined datatype, else a new handle to it."""
        if impl.key is not None:
            return _NAMED[impl.key]
        return cls._from_impl(impl)

    def _live(self) -> _TypeImpl:
        """Return the datatype object, or raise ``ERR_TYPE`` for a null handle."""
        impl = self._impl
        if impl is _NULL_IMPL:
            raise _type_error("invalid datatype: DATATYPE_NULL")
        return impl

    # -- size and extent ----------------------------------------------------------------
    def Get_size(self) -> int:
        """Return the number of data bytes in one element (padding excluded)."""
        return self._live().size

    def Get_extent(self) -> tuple[int, int]:
        """Return ``(lb, extent)``: the memory span of one element, padding included."""
        impl = self._live()
        return impl.lb, impl.extent

    def Get_true_extent(self) -> tuple[int, int]:
        """Return ``(true_lb, true_extent)``: the span of the data bytes only."""
        impl = self._live()
        return impl.true_lb, impl.true_extent

    @property
    def size(self) -> int:
        """Number of data bytes in one element."""
        return self.Get_size()

    @property
    def extent(self) -> int:
        """Stride in bytes between consecutive elements."""
        return self._live().extent

    @property
    def lb(self) -> int:
        """Lower bound of one element."""
        return self._live().lb

    @property
    def ub(self) -> int:
        """Upper bound of one element (``lb + extent``)."""
        impl = self._live()
        return impl.lb + impl.extent

    @property
    def true_lb(self) -> int:
        """Offset of the first data byte."""
        return self._live().true_lb

    @property
    def true_ub(self) -> int:
        """Offset just past the last data byte."""
        impl = self._live()
        return impl.true_lb + impl.true_extent

    @property
    def true_extent(self) -> int:
        """Span of the data bytes of one element."""
        return self._live().true_extent

    # -- naming -------------------------------------------------------------------------
    def Get_name(self) -> str:
        """Return the name of the datatype (``""`` for unnamed derived types)."""
        return self._impl.name

    def Set_name(self, name: str) -> None:
        """Set the name; longer names are cut to ``MAX_OBJECT_NAME - 1`` characters.

        Predefined datatypes may be renamed too (MPI-3.0 §6.8); the name belongs to the
        datatype, so every handle of it sees the new name.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        self._live().name = name[: MAX_OBJECT_NAME - 1]

    @property
    def name(self) -> str:
        """The name of the datatype."""
        return self.Get_name()

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    # -- life cycle ---------------------------------------------------------------------
    def Commit(self) -> Datatype:
        """Make the datatype usable in communication; return ``self``."""
        self._live().committed = True
        return self

    def Free(self) -> None:
        """Release this handle, which becomes ``DATATYPE_NULL``.

        Predefined datatypes cannot be freed (``ERR_TYPE``). Other handles of the same
        datatype, and operations still using it, are not affected.
        """
        impl = self._live()
        if impl.predefined:
            raise _type_error(f"predefined datatype {impl.name} cannot be freed")
        delete_attributes(self, impl, "Free")  # its attributes' delete callbacks
        self._impl = _NULL_IMPL

    # -- type codes ---------------------------------------------------------------------
    def tocode(self) -> str:
        """Return the type code of a predefined datatype, e.g. ``'i'`` or ``'i4'``.

        Raises ``ValueError`` for types without a code (pair types, null, derived).
        """
        impl = original(self._impl)
        if impl.code is None:
            raise ValueError(f"cannot map {impl.name or 'derived datatype'} to a type code")
        return impl.code

    @classmethod
    def fromcode(cls, code: str) -> Datatype:
        """Return the predefined datatype for a type code or numpy type string.

        Accepts the codes of :meth:`tocode`, ``memoryview.format`` strings and numpy
        dtype names such as ``'int32'``. Raises ``ValueError`` for unknown codes.
        """
        try:
            return datatype_for_format(code)
        except MPIException:
            pass
        try:  # numpy reads some control characters ('\0') as type codes: not a name
            dtype: np.dtype | None = np.dtype(code) if code.isprintable() else None
        except (TypeError, ValueError, AttributeError):
            dtype = None
        if dtype is not None and dtype.kind in "biufc":
            found = _FORMATS.get(f"{dtype.kind}{dtype.itemsize}")
            if found is not None:
                return found
        raise ValueError(f"cannot map code {code!r} to an MPI datatype")

    # -- handle semantics ---------------------------------------------------------------
    def __repr__(self) -> str:
        impl = self._impl
        if impl.key is not None:
            return f"MPI.{impl.key}"
        kind = impl.name or ("Fortran 90" if impl.predefined else "derived")  # Create_f90_*
        return f"<MPI.Datatype {kind}: size={impl.size} extent={impl.extent}>"

    def _reduce_created(self) -> Any:
        """Pickle a datatype by its constructor and arguments (``decode()``)."""
        base, combiner, params = self.decode()
        return (_rebuild, (type(self), base, combiner, params, self._impl.committed))


def _rebuild(
    cls: type[Datatype], base: Datatype, combiner: str, params: dict[str, Any], committed: bool
) -> Datatype:
    """Make the datatype ``decode()`` described, as a ``cls`` handle (unpickling)."""
    if combiner == "DUP":
        made = base.Dup()
    elif combiner == "STRUCT" or combiner.startswith("F90_"):
        made = getattr(Datatype, f"Create_{combiner.lower()}")(**params)
    else:
        made = getattr(base, f"Create_{combiner.lower()}")(**params)
    if committed:
        made.Commit()
    return cls._from_impl(made._impl)


# --- The predefined datatypes ------------------------------------------------------------

_NAMED: dict[str, Datatype] = {}


def _basic(key: str, name: str, dtype: str | None, code: str | None, size: int = 0) -> Datatype:
    """Define a predefined datatype; ``size`` is used only when ``dtype`` is None."""
    nbytes = size if dtype is None else itemsize(dtype)
    impl = _TypeImpl(key, name, nbytes, nbytes, None, code, dtype_spec=dtype)
    handle = Datatype._from_impl(impl)
    _NAMED[key] = handle
    return handle


def _opaque(key: str, name: str, size: int, *, msg_ok: bool, code: str | None = None) -> Datatype:
    """Define a predefined datatype without a numpy equivalent (``code``: its type code,
    if it has one)."""
    impl = _TypeImpl(key, name, size, size, None, code, msg_ok=msg_ok)
    handle = Datatype._from_impl(impl)
    _NAMED[key] = handle
    return handle


def _pair(key: str, name: str, value: str) -> Datatype:
    """Define a (value, int index) pair type with C struct layout, for MINLOC/MAXLOC."""
    spec = [("value", value), ("index", "i")]  # numpy's dtype of the C struct, aligned
    size, extent, true_extent = pair_sizes(value)
    impl = _TypeImpl(key, name, size, extent, None, None, dtype_spec=spec, true_extent=true_extent)
    handle = Datatype._from_impl(impl)
    _NAMED[key] = handle
    return handle


def _alias(key: str, handle: Datatype) -> Datatype:
    _NAMED[key] = handle
    return handle


DATATYPE_NULL: Datatype = Datatype._from_impl(_NULL_IMPL)
_NAMED["DATATYPE_NULL"] = DATATYPE_NULL

# C character and integer types
CHAR = _basic("CHAR", "MPI_CHAR", "S1", "c")
WCHAR = _basic("WCHAR", "MPI_WCHAR", "U1", "U")
SIGNED_CHAR = _basic("SIGNED_CHAR", "MPI_SIGNED_CHAR", "b", "b")
SHORT = _basic("SHORT", "MPI_SHORT", "h", "h")
INT = _basic("INT", "MPI_INT", "i", "i")
LONG = _basic("LONG", "MPI_LONG", "l", "l")
LONG_LONG = _basic("LONG_LONG", "MPI_LONG_LONG_INT", "q", "q")
UNSIGNED_CHAR = _basic("UNSIGNED_CHAR", "MPI_UNSIGNED_CHAR", "B", "B")
UNSIGNED_SHORT = _basic("UNSIGNED_SHORT", "MPI_UNSIGNED_SHORT", "H", "H")
UNSIGNED = _basic("UNSIGNED", "MPI_UNSIGNED", "I", "I")
UNSIGNED_LONG = _basic("UNSIGNED_LONG", "MPI_UNSIGNED_LONG", "L", "L")
UNSIGNED_LONG_LONG = _basic("UNSIGNED_LONG_LONG", "MPI_UNSIGNED_LONG_LONG", "Q", "Q")
SIGNED_SHORT = _alias("SIGNED_SHORT", SHORT)
SIGNED_INT = _alias("SIGNED_INT", INT)
SIGNED_LONG = _alias("SIGNED_LONG", LONG)
SIGNED_LONG_LONG = _alias("SIGNED_LONG_LONG", LONG_LONG)
LONG_LONG_INT = _alias("LONG_LONG_INT", LONG_LONG)
UNSIGNED_INT = _alias("UNSIGNED_INT", UNSIGNED)

# C floating-point, boolean and complex types
FLOAT = _basic("FLOAT", "MPI_FLOAT", "f", "f")
DOUBLE = _basic("DOUBLE", "MPI_DOUBLE", "d", "d")
LONG_DOUBLE = _basic("LONG_DOUBLE", "MPI_LONG_DOUBLE", "g", "g")
FLOAT16_T = _basic("FLOAT16_T", "MPIX_C_FLOAT16", "e", "e")
BFLOAT16_T = _opaque("BFLOAT16_T", "MPIX_BFLOAT16", 2, msg_ok=False)
FLOAT32_T = _alias("FLOAT32_T", FLOAT)
FLOAT64_T = _alias("FLOAT64_T", DOUBLE)
C_BOOL = _basic("C_BOOL", "MPI_C_BOOL", "?", "b1")
BOOL = _alias("BOOL", C_BOOL)
C_COMPLEX = _basic("C_COMPLEX", "MPI_C_COMPLEX", "F", "F")
C_FLOAT_COMPLEX = _alias("C_FLOAT_COMPLEX", C_COMPLEX)
C_DOUBLE_COMPLEX = _basic("C_DOUBLE_COMPLEX", "MPI_C_DOUBLE_COMPLEX", "D", "D")
C_LONG_DOUBLE_COMPLEX = _basic("C_LONG_DOUBLE_COMPLEX", "MPI_C_LONG_DOUBLE_COMPLEX", "G", "G")

# C fixed-width integer types
INT8_T = _basic("INT8_T", "MPI_INT8_T", "i1", "i1")
INT16_T = _basic("INT16_T", "MPI_INT16_T", "i2", "i2")
INT32_T = _basic("INT32_T", "MPI_INT32_T", "i4", "i4")
INT64_T = _basic("INT64_T", "MPI_INT64_T", "i8", "i8")
UINT8_T = _basic("UINT8_T", "MPI_UINT8_T", "u1", "u1")
UINT16_T = _basic("UINT16_T", "MPI_UINT16_T", "u2", "u2")
UINT32_T = _basic("UINT32_T", "MPI_UINT32_T", "u4", "u4")
UINT64_T = _basic("UINT64_T", "MPI_UINT64_T", "u8", "u8")
SINT8_T = _alias("SINT8_T", INT8_T)
SINT16_T = _alias("SINT16_T", INT16_T)
SINT32_T = _alias("SINT32_T", INT32_T)
SINT64_T = _alias("SINT64_T", INT64_T)

# C++ types
CXX_BOOL = _basic("CXX_BOOL", "MPI_CXX_BOOL", "?", "?")
CXX_FLOAT_COMPLEX = _basic("CXX_FLOAT_COMPLEX", "MPI_CXX_FLOAT_COMPLEX", "F", "F")
CXX_DOUBLE_COMPLEX = _basic("CXX_DOUBLE_COMPLEX", "MPI_CXX_DOUBLE_COMPLEX", "D", "D")
CXX_LONG_DOUBLE_COMPLEX = _basic("CXX_LONG_DOUBLE_COMPLEX", "MPI_CXX_LONG_DOUBLE_COMPLEX", "G", "G")

# Untyped bytes and address-sized integers
BYTE = _basic("BYTE", "MPI_BYTE", "B", "B")
PACKED = _opaque("PACKED", "MPI_PACKED", 1, msg_ok=True, code="B")
AINT = _basic("AINT", "MPI_AINT", "p", "p")
OFFSET = _basic("OFFSET", "MPI_OFFSET", "q", "p")
COUNT = _basic("COUNT", "MPI_COUNT", "q", "p")

# Fortran types (LOGICAL is a 4-byte integer holding Fortran's true/false)
CHARACTER = _basic("CHARACTER", "MPI_CHARACTER", "S1", "c")
LOGICAL = _basic("LOGICAL", "MPI_LOGICAL", "i4", "i")
INTEGER = _basic("INTEGER", "MPI_INTEGER", "i4", "i")
REAL = _basic("REAL", "MPI_REAL", "f4", "f")
DOUBLE_PRECISION = _basic("DOUBLE_PRECISION", "MPI_DOUBLE_PRECISION", "f8", "d")
COMPLEX = _basic("COMPLEX", "MPI_COMPLEX", "c8", "F")
DOUBLE_COMPLEX = _basic("DOUBLE_COMPLEX", "MPI_DOUBLE_COMPLEX", "c16", "D")
F_BOOL = _alias("F_BOOL", LOGICAL)
F_INT = _alias("F_INT", INTEGER)
F_FLOAT = _alias("F_FLOAT", REAL)
F_DOUBLE = _alias("F_DOUBLE", DOUBLE_PRECISION)
F_COMPLEX = _alias("F_COMPLEX", COMPLEX)
F_FLOAT_COMPLEX = _alias("F_FLOAT_COMPLEX", COMPLEX)
F_DOUBLE_COMPLEX = _alias("F_DOUBLE_COMPLEX", DOUBLE_COMPLEX)

# Optional Fortran sized types; those numpy cannot represent carry no dtype, and the
# codes of their kind and size (a logical of more than one byte is an integer of its size)
INTEGER1 = _basic("INTEGER1", "MPI_INTEGER1", "i1", "i1")
INTEGER2 = _basic("INTEGER2", "MPI_INTEGER2", "i2", "i2")
INTEGER4 = _basic("INTEGER4", "MPI_INTEGER4", "i4", "i4")
INTEGER8 = _basic("INTEGER8", "MPI_INTEGER8", "i8", "i8")
INTEGER16 = _opaque("INTEGER16", "MPI_INTEGER16", 16, msg_ok=False, code="i16")
REAL2 = _basic("REAL2", "MPI_REAL2", "f2", "f2")
REAL4 = _basic("REAL4", "MPI_REAL4", "f4", "f4")
REAL8 = _basic("REAL8", "MPI_REAL8", "f8", "f8")
REAL16 = _basic("REAL16", "MPI_REAL16", "g", "f16")
COMPLEX4 = _opaque("COMPLEX4", "MPI_COMPLEX4", 4, msg_ok=False, code="c4")
COMPLEX8 = _basic("COMPLEX8", "MPI_COMPLEX8", "c8", "c8")
COMPLEX16 = _basic("COMPLEX16", "MPI_COMPLEX16", "c16", "c16")
COMPLEX32 = _basic("COMPLEX32", "MPI_COMPLEX32", "G", "c32")
LOGICAL1 = _basic("LOGICAL1", "MPI_LOGICAL1", "i1", "i1")
LOGICAL2 = _basic("LOGICAL2", "MPI_LOGICAL2", "i2", "i2")
LOGICAL4 = _basic("LOGICAL4", "MPI_LOGICAL4", "i4", "i4")
LOGICAL8 = _basic("LOGICAL8", "MPI_LOGICAL8", "i8", "i8")
LOGICAL16 = _opaque("LOGICAL16", "MPI_LOGICAL16", 16, msg_ok=False, code="i16")

# (value, index) pairs for MINLOC and MAXLOC
SHORT_INT = _pair("SHORT_INT", "MPI_SHORT_INT", "h")
INT_INT = _pair("INT_INT", "MPI_2INT", "i")
TWOINT = _alias("TWOINT", INT_INT)
LONG_INT = _pair("LONG_INT", "MPI_LONG_INT", "l")
FLOAT_INT = _pair("FLOAT_INT", "MPI_FLOAT_INT", "f")
DOUBLE_INT = _pair("DOUBLE_INT", "MPI_DOUBLE_INT", "d")
LONG_DOUBLE_INT = _pair("LONG_DOUBLE_INT", "MPI_LONG_DOUBLE_INT", "g")

# Deprecated bound markers (removed in MPI-3): zero-size, never valid in a message
LB = _opaque("LB", "MPI_LB", 0, msg_ok=False)
UB = _opaque("UB", "MPI_UB", 0, msg_ok=False)

register(_NAMED, _NAMED)  # the module's constants (see core.handle)

# Each predefined datatype is a leaf of typemaps, made when the first typemap is needed.
defer_leaves({id(h._impl): h._impl for h in _NAMED.values() if h}.values())


# --- Type codes and buffer formats -------------------------------------------------------

# Type code (tocode strings, struct/memoryview formats, numpy kind+size) -> datatype.
_FORMATS: dict[str, Datatype] = {
    "?": C_BOOL, "b1": C_BOOL,
    "c": CHAR, "a": CHAR, "s": CHAR, "S": CHAR, "1s": CHAR, "S1": CHAR, "1c": CHAR,
    "U": WCHAR, "U1": WCHAR, "w": WCHAR, "1w": WCHAR,
    "u": UINT16_T, "1u": UINT16_T,
    "b": SIGNED_CHAR, "h": SHORT, "i": INT, "l": LONG, "q": LONG_LONG,
    "B": UNSIGNED_CHAR, "H": UNSIGNED_SHORT, "I": UNSIGNED, "L": UNSIGNED_LONG,
    "Q": UNSIGNED_LONG_LONG,
    "n": COUNT, "N": UNSIGNED_LONG, "p": AINT, "P": UNSIGNED_LONG,
    "e": FLOAT16_T, "f": FLOAT, "d": DOUBLE, "g": LONG_DOUBLE,
    "F": C_COMPLEX, "D": C_DOUBLE_COMPLEX, "G": C_LONG_DOUBLE_COMPLEX,
    "Zf": C_COMPLEX, "Zd": C_DOUBLE_COMPLEX, "Zg": C_LONG_DOUBLE_COMPLEX,
    "i1": INT8_T, "i2": INT16_T, "i4": INT32_T, "i8": INT64_T,
    "u1": UINT8_T, "u2": UINT16_T, "u4": UINT32_T, "u8": UINT64_T,
    "f2": FLOAT16_T, "f4": FLOAT, "f8": DOUBLE, "f16": LONG_DOUBLE,
    "c8": C_COMPLEX, "c16": C_DOUBLE_COMPLEX, "c32": C_LONG_DOUBLE_COMPLEX,
    "i16": INTEGER16, "c4": COMPLEX4,  # sizes numpy lacks
    "M": INT64_T, "M8": INT64_T, "m": INT64_T, "m8": INT64_T,
    # numpy structured arrays with align=True, field names removed
    "T{hxxi}": SHORT_INT, "T{ii}": INT_INT, "T{li}": LONG_INT,
    "T{fi}": FLOAT_INT, "T{di}": DOUBLE_INT, "T{gi}": LONG_DOUBLE_INT,
}  # fmt: skip

# Size-based choices for explicitly sized formats ('<i', '=l', ...), by kind.
_SIGNED = {1: INT8_T, 2: INT16_T, 4: INT32_T, 8: INT64_T}
_UNSIGNED = {1: UINT8_T, 2: UINT16_T, 4: UINT32_T, 8: UINT64_T}
_FLOATS = {2: FLOAT16_T, 4: FLOAT, 8: DOUBLE, 16: LONG_DOUBLE}
_COMPLEXES = {8: C_COMPLEX, 16: C_DOUBLE_COMPLEX, 32: C_LONG_DOUBLE_COMPLEX}
_BY_KIND: dict[str, dict[int, Datatype]] = {
    **dict.fromkeys("bhilqn", _SIGNED),
    **dict.fromkeys("BHILQNP", _UNSIGNED),
    **dict.fromkeys("efdg", _FLOATS),
    **dict.fromkeys(("Zf", "Zd", "Zg"), _COMPLEXES),
    "?": {1: C_BOOL},
    "c": {1: CHAR},
}

# Item sizes of the struct module's "standard" sizes (formats starting with '<', '=', ...).
_STANDARD_SIZE = {
    "b": 1, "h": 2, "i": 4, "l": 4, "q": 8, "n": 8,
    "B": 1, "H": 2, "I": 4, "L": 4, "Q": 8, "N": 8, "P": 8,
    "e": 2, "f": 4, "d": 8, "g": 16, "Zf": 8, "Zd": 16, "Zg": 32, "?": 1, "c": 1,
}  # fmt: skip

_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"
_REPEATED = re.compile(r"(\d+)([scwx])")
_FIELD_NAME = re.compile(r":[^:]*:")


def _sized(kind: str, size: int, fmt: str) -> Datatype:
    """Return the datatype of kind ``kind`` with ``size`` bytes, preferring C types."""
    native = _FORMATS.get(kind)
    if native is not None and native._impl.size == size:
        return native
    found = _BY_KIND.get(kind, {}).get(size)
    if found is None:
        raise _type_error(f"no MPI datatype for buffer format {fmt!r} ({size}-byte items)")
    return found


def datatype_for_format(fmt: str, itemsize: int | None = None) -> Datatype:
    """Return the predefined datatype for a type code or ``memoryview.format`` string.

    ``itemsize`` is the item size reported by the buffer; it disambiguates explicitly
    sized formats such as ``'<l'`` (ctypes' ``c_long``) and is checked for structured
    (pair) formats. Raises ``Exception(ERR_TYPE)`` with an explanation when the format
    has no MPI equivalent.
    """
    found = _FORMATS.get(fmt)
    if found is not None and (itemsize is None or found._impl.extent == itemsize):
        return found
    if not isinstance(fmt, str):
        raise _type_error(f"a type code must be a str, not {type(fmt).__name__}")
    if found is not None:
        raise _type_error(
            f"buffer format {fmt!r} has {itemsize}-byte items but {found._impl.name} needs "
            f"{found._impl.extent}"
        )
    if fmt.startswith("@"):
        return datatype_for_format(fmt[1:], itemsize)
    if fmt[:1] in "<>=!" and len(fmt) > 1:
        order = _NATIVE_ORDER if fmt[0] == "=" else ">" if fmt[0] == "!" else fmt[0]
        kind = fmt[1:]
        if order != _NATIVE_ORDER:
            raise _type_error(
                f"buffer format {fmt!r} has non-native byte order; convert the array "
                "with .astype(dtype.newbyteorder('='))"
            )
        if kind not in _BY_KIND:
            raise _type_error(f"no MPI datatype for buffer format {fmt!r}")
        return _sized(kind, _STANDARD_SIZE[kind] if itemsize is None else itemsize, fmt)
    repeated = _REPEATED.fullmatch(fmt)
    if repeated is not None:
        letter = repeated.group(2)
        return {"s": CHAR, "c": CHAR, "w": WCHAR, "x": BYTE}[letter]
    if fmt.startswith("T{"):
        pair = _FORMATS.get(_FIELD_NAME.sub("", fmt))
        if pair is not None and (itemsize is None or pair._impl.extent == itemsize):
            return pair
        raise _type_error(
            f"no MPI datatype for structured buffer format {fmt!r}: only (value, int32) "
            "pairs created with align=True map to the MPI pair types"
        )
    if fmt == "O":
        raise _type_error(
            "arrays of Python objects cannot be sent with the buffer (upper-case) methods; "
            "use the lower-case methods such as send() and recv()"
        )
    raise _type_error(f"no MPI datatype for type code or buffer format {fmt!r}")
