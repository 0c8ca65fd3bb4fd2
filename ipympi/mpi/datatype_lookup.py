"""Finding predefined datatypes, and the numpy-style type characters of a datatype.

* ``Create_f90_integer``/``_real``/``_complex`` (MPI-3.1 §17.1.9) return the
  datatype of Fortran's ``SELECTED_INT_KIND(r)``/``SELECTED_REAL_KIND(p, r)``:
  the smallest sized type (``INTEGER1``..``INTEGER8``, ``REAL2``..``REAL16``,
  ``COMPLEX8``..``COMPLEX32``) with at least ``r`` decimal digits of exponent
  range and ``p`` of precision (``UNDEFINED``: no requirement), measured with
  numpy's ``iinfo``/``finfo`` on this platform. The result is predefined but
  not named (combiner ``COMBINER_F90_*``, arguments in ``Get_contents``), and
  the same arguments give the same datatype, so handles compare equal.
* ``Match_size`` finds the sized type of a type class with a given size.
* ``Get_value_index`` finds the predefined (value, index) pair type of MINLOC
  and MAXLOC, or ``DATATYPE_NULL`` when there is none (MPI-4.1 §6.9.4).
* ``typechar`` and ``typestr`` describe a datatype as numpy does (``'i'``,
  ``'i4'``); types without a numpy equivalent are ``'V'`` and ``'V<extent>'``,
  except the sized Fortran types of sizes numpy lacks, which keep the type string
  of their kind and size (``'i16'``, ``'c4'``): numpy rejects it with a
  ``TypeError``, as it rejects those types.
* :func:`typealign` is mpi4py's private ``MPI._typealign``: the alignment of the
  elements of a predefined type.
* :func:`itemsize` and :func:`pair_sizes` give the sizes of the predefined types from
  their numpy type characters without importing numpy (``import ipympi.MPI`` does not).
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import TYPE_CHECKING, Any

from ..core.constants import (
    COMBINER_DUP,
    COMBINER_F90_COMPLEX,
    COMBINER_F90_INTEGER,
    COMBINER_F90_REAL,
    TYPECLASS_COMPLEX,
    TYPECLASS_INTEGER,
    TYPECLASS_LOGICAL,
    TYPECLASS_REAL,
    UNDEFINED,
)
from ..core.errors import ERR_ARG
from ..core.errors import Exception as MPIException
from ..core.handle import constant as _constant
from ..core.lazynumpy import np
from .handles import DatatypeMixin

if TYPE_CHECKING:
    from .datatype import Datatype, _TypeImpl

__all__ = ["LookupMixin", "itemsize", "original", "pair_sizes", "typealign"]

# The C types of the values of MINLOC/MAXLOC pairs, by numpy type character.
_CTYPES: dict[str, Any] = {
    "h": ctypes.c_short, "i": ctypes.c_int, "l": ctypes.c_long,
    "f": ctypes.c_float, "d": ctypes.c_double, "g": ctypes.c_longdouble,
}  # fmt: skip


def itemsize(dtype: str) -> int:
    """The bytes of numpy's dtype ``dtype`` (a type character, or a kind and a size in
    bytes: ``'i4'``), known without importing numpy."""
    if dtype[1:].isdigit():
        return int(dtype[1:]) * (4 if dtype[0] == "U" else 1)
    if dtype in "gG":
        return ctypes.sizeof(ctypes.c_longdouble) * (2 if dtype == "G" else 1)
    if dtype in "FD":
        return 2 * struct.calcsize(dtype.lower())
    return struct.calcsize("n" if dtype == "p" else dtype)


def pair_sizes(value: str) -> tuple[int, int, int]:
    """Size, extent and true extent of the C struct ``{value; int index;}`` of MINLOC and
    MAXLOC, for the type character ``value``."""

    class Pair(ctypes.Structure):
        _fields_ = (("value", _CTYPES[value]), ("index", ctypes.c_int))

    return itemsize(value) + 4, ctypes.sizeof(Pair), Pair.index.offset + 4


# Fortran sized types of each type class, smallest first (names in the MPI module).
_SIZED = {
    TYPECLASS_INTEGER: ("INTEGER1", "INTEGER2", "INTEGER4", "INTEGER8", "INTEGER16"),
    TYPECLASS_REAL: ("REAL2", "REAL4", "REAL8", "REAL16"),
    TYPECLASS_COMPLEX: ("COMPLEX4", "COMPLEX8", "COMPLEX16", "COMPLEX32"),
    TYPECLASS_LOGICAL: ("LOGICAL1", "LOGICAL2", "LOGICAL4", "LOGICAL8", "LOGICAL16"),
}

# (Fortran type, name of the numpy type whose range and precision it has), smallest first.
_F90_INTEGERS = (("INTEGER1", "int8"), ("INTEGER2", "int16"), ("INTEGER4", "int32"),
                 ("INTEGER8", "int64"))  # fmt: skip
_F90_REALS = (
    ("REAL2", "COMPLEX4", "float16"), ("REAL4", "COMPLEX8", "float32"),
    ("REAL8", "COMPLEX16", "float64"), ("REAL16", "COMPLEX32", "longdouble"),
)  # fmt: skip

# value datatype name -> the MINLOC/MAXLOC pair with an INT index
_VALUE_INT_PAIRS = {
    "SHORT": "SHORT_INT", "INT": "INT_INT", "LONG": "LONG_INT", "FLOAT": "FLOAT_INT",
    "DOUBLE": "DOUBLE_INT", "LONG_DOUBLE": "LONG_DOUBLE_INT",
}  # fmt: skip

# typechar of the type codes numpy has no dtype for: no C integer is 16 bytes long, and
# a complex of two half floats takes the upper case of the half float's 'e'.
_CHAR_WITHOUT_NUMPY = {"i16": "V", "c4": "E"}

_f90_lock = threading.Lock()
_f90_types: dict[tuple[int, tuple[int, ...]], _TypeImpl] = {}  # (combiner, args) -> datatype


def _int_arg(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    return int(value)


def _decimal_range(info: Any) -> int:
    """Fortran's ``RANGE``: decimal exponent range of an integer or real type."""
    if isinstance(info, np.iinfo):
        return len(str(info.max)) - 1
    return int(min(np.log10(info.max), -np.log10(info.tiny)))  # numpy: long double too


def _f90(combiner: int, args: tuple[int, ...], base: Datatype) -> _TypeImpl:
    """The (cached) F90 datatype of ``combiner`` and ``args``, laid out as ``base``."""
    key = (combiner, args)
    with _f90_lock:
        impl = _f90_types.get(key)
        if impl is None:
            impl = base._impl.duplicate()
            impl.code = base._impl.code
            impl.combiner = combiner
            impl.predefined = True
            impl.contents = (list(args), [], [])
            _f90_types[key] = impl
    return impl


def original(impl: _TypeImpl) -> _TypeImpl:
    """The datatype ``impl`` duplicates (through any chain of ``Dup``), or ``impl``."""
    while impl.combiner == COMBINER_DUP and impl.parent is not None:
        impl = impl.parent
    return impl


def typealign(datatype: Datatype) -> int | None:
    """The alignment in bytes of the elements of a predefined datatype (``MPI._typealign``).

    Defined, as in mpi4py, for the types with a type code and their duplicates, and for
    the (value, index) pair types themselves (the alignment of their C struct); ``None``
    for every other datatype: derived types, duplicates of pairs, the bound markers and
    ``DATATYPE_NULL``. mpi4py keeps this helper private (``mpi4py.util.dtlib`` uses it);
    so does ipympi.
    """
    impl = datatype._impl
    base = original(impl)
    if base.code is not None or (base is impl and impl.predefined and impl.layout.nelem):
        return impl.layout.align
    return None


def _no_f90_type(call: str, what: str) -> MPIException:
    return MPIException(ERR_ARG, f"{call}: no Fortran {what} type is available")


def _real_for(call: str, p: int, r: int) -> tuple[str, str]:
    """``(REALn, COMPLEXn)`` of the smallest real kind with precision ``p`` and range ``r``."""
    for real, cplx, nptype in _F90_REALS:
        info = np.finfo(getattr(np, nptype))
        precise = p == UNDEFINED or p <= info.precision
        if precise and (r == UNDEFINED or r <= _decimal_range(info)):
            return real, cplx
    raise _no_f90_type(call, f"real with {p} digits of precision and exponent range {r}")


class LookupMixin(DatatypeMixin):
    """The lookup constructors and type characters of ``MPI.Datatype``."""

    __slots__ = ()

    # -- Fortran 90 parameterized types ---------------------------------------------------
    @classmethod
    def Create_f90_integer(cls, r: int) -> Datatype:
        """The datatype of Fortran ``INTEGER(SELECTED_INT_KIND(r))``."""
        r = _int_arg(r, "r")
        for name, nptype in _F90_INTEGERS:
            if r <= _decimal_range(np.iinfo(getattr(np, nptype))):
                return cls._from_impl(_f90(COMBINER_F90_INTEGER, (r,), _constant(name)))
        raise _no_f90_type("Create_f90_integer", f"integer with exponent range {r}")

    @classmethod
    def Create_f90_real(cls, p: int, r: int) -> Datatype:
        """The datatype of Fortran ``REAL(SELECTED_REAL_KIND(p, r))``."""
        p, r = _int_arg(p, "p"), _int_arg(r, "r")
        real, _ = _real_for("Create_f90_real", p, r)
        return cls._from_impl(_f90(COMBINER_F90_REAL, (p, r), _constant(real)))

    @classmethod
    def Create_f90_complex(cls, p: int, r: int) -> Datatype:
        """The datatype of Fortran ``COMPLEX(SELECTED_REAL_KIND(p, r))``.

        Complex numbers of half-precision parts have no numpy type; the next kind up
        is used for them.
        """
        p, r = _int_arg(p, "p"), _int_arg(r, "r")
        real, cplx = _real_for("Create_f90_complex", p, r)
        if real == "REAL2":
            cplx = "COMPLEX8"
        return cls._from_impl(_f90(COMBINER_F90_COMPLEX, (p, r), _constant(cplx)))

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> Datatype:
        """A datatype of type class ``typeclass`` (``TYPECLASS_INTEGER``, ``_REAL``,
        ``_COMPLEX``, ``_LOGICAL``) whose elements take ``size`` bytes.

        ``ERR_ARG`` for an unknown type class or a size no type of the class has.
        """
        names = _SIZED.get(_int_arg(typeclass, "typeclass"))
        if names is None:
            raise MPIException(ERR_ARG, f"Match_size: {typeclass} is not a TYPECLASS_ value")
        size = _int_arg(size, "size")
        for name in names:
            found = _constant(name)
            if found and found._impl.size == size:
                return cls._from_impl(found._impl)
        raise MPIException(ERR_ARG, f"Match_size: no type of this class takes {size} bytes")

    # -- MINLOC/MAXLOC pairs ----------------------------------------------------------------
    @classmethod
    def Get_value_index(cls, value: Datatype, index: Datatype) -> Datatype:
        """The predefined pair datatype of (``value``, ``index``) for MINLOC and MAXLOC,
        or ``DATATYPE_NULL`` when the standard has none (``ERR_TYPE`` for null types)."""
        value_impl, index_impl = value._live(), index._live()
        found = _constant("DATATYPE_NULL")
        if index_impl is _constant("INT")._impl:
            for name, pair in _VALUE_INT_PAIRS.items():
                if value_impl is _constant(name)._impl:
                    found = _constant(pair)
        return cls._from_impl(found._impl)

    # -- type characters ------------------------------------------------------------------
    def _numpy_code(self) -> tuple[str, str]:
        """``(typechar, typestr)``; see the module's docstring."""
        impl = self._impl
        if impl.key == "DATATYPE_NULL":
            return "", ""
        impl = original(impl)
        code = impl.code
        if code is None:
            return "V", f"V{self._live().extent}"
        if impl.np_dtype is None and code in _CHAR_WITHOUT_NUMPY:
            return _CHAR_WITHOUT_NUMPY[code], code
        dtype = impl.np_dtype if impl.np_dtype is not None else np.dtype(code)
        char = code if len(code) == 1 else dtype.char
        return char, dtype.str[1:]

    @property
    def typechar(self) -> str:
        """The numpy character code of the datatype (``'i'``, ``'d'``; ``'V'`` for types
        numpy has no equivalent of; ``''`` for ``DATATYPE_NULL``)."""
        return self._numpy_code()[0]

    @property
    def typestr(self) -> str:
        """The numpy type string of the datatype (``'i4'``, ``'f8'``; ``'V<extent>'`` for
        types numpy has no equivalent of, but ``'i16'``/``'c4'`` for the sized Fortran
        types; ``''`` for ``DATATYPE_NULL``)."""
        return self._numpy_code()[1]
