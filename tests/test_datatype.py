"""Predefined datatypes: sizes, extents, names, handle semantics and type codes."""

from __future__ import annotations

import ctypes
import pickle

import numpy as np
import pytest

from ipympi.core.constants import COMBINER_DUP, COMBINER_NAMED, MAX_OBJECT_NAME
from ipympi.core.errors import ERR_TYPE
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi import datatype as D
from ipympi.mpi.datatype import Datatype, datatype_for_format

NAMES = [n for n in D.__all__ if n.isupper()]
LIVE = [n for n in NAMES if n != "DATATYPE_NULL"]


def err_class(excinfo: pytest.ExceptionInfo) -> int:
    return excinfo.value.Get_error_class()


# --- sizes and extents ---------------------------------------------------------------------

C_SIZES = {
    "CHAR": ctypes.c_char, "SIGNED_CHAR": ctypes.c_byte, "UNSIGNED_CHAR": ctypes.c_ubyte,
    "SHORT": ctypes.c_short, "UNSIGNED_SHORT": ctypes.c_ushort, "INT": ctypes.c_int,
    "UNSIGNED": ctypes.c_uint, "LONG": ctypes.c_long, "UNSIGNED_LONG": ctypes.c_ulong,
    "LONG_LONG": ctypes.c_longlong, "UNSIGNED_LONG_LONG": ctypes.c_ulonglong,
    "FLOAT": ctypes.c_float, "DOUBLE": ctypes.c_double, "LONG_DOUBLE": ctypes.c_longdouble,
    "C_BOOL": ctypes.c_bool, "WCHAR": ctypes.c_wchar, "INT8_T": ctypes.c_int8,
    "INT16_T": ctypes.c_int16, "INT32_T": ctypes.c_int32, "INT64_T": ctypes.c_int64,
    "UINT8_T": ctypes.c_uint8, "UINT16_T": ctypes.c_uint16, "UINT32_T": ctypes.c_uint32,
    "UINT64_T": ctypes.c_uint64, "AINT": ctypes.c_ssize_t,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(C_SIZES))
def test_sizes_match_c(name: str) -> None:
    datatype = getattr(D, name)
    assert datatype.Get_size() == ctypes.sizeof(C_SIZES[name])
    assert datatype.Get_extent() == (0, datatype.size)
    assert datatype.Get_true_extent() == (0, datatype.size)


STANDARD_SIZES = {
    "BYTE": 1, "PACKED": 1, "OFFSET": 8, "COUNT": 8, "CHARACTER": 1, "LOGICAL": 4,
    "INTEGER": 4, "REAL": 4, "DOUBLE_PRECISION": 8, "COMPLEX": 8, "DOUBLE_COMPLEX": 16,
    "INTEGER1": 1, "INTEGER2": 2, "INTEGER4": 4, "INTEGER8": 8, "INTEGER16": 16,
    "REAL2": 2, "REAL4": 4, "REAL8": 8, "REAL16": 16, "COMPLEX4": 4, "COMPLEX8": 8,
    "COMPLEX16": 16, "COMPLEX32": 32, "LOGICAL1": 1, "LOGICAL2": 2, "LOGICAL4": 4,
    "LOGICAL8": 8, "LOGICAL16": 16, "C_COMPLEX": 8, "C_DOUBLE_COMPLEX": 16,
    "C_LONG_DOUBLE_COMPLEX": 32, "CXX_BOOL": 1, "CXX_FLOAT_COMPLEX": 8,
    "CXX_DOUBLE_COMPLEX": 16, "CXX_LONG_DOUBLE_COMPLEX": 32, "FLOAT16_T": 2,
    "BFLOAT16_T": 2, "LB": 0, "UB": 0,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(STANDARD_SIZES))
def test_sizes_of_other_types(name: str) -> None:
    assert getattr(D, name).Get_size() == STANDARD_SIZES[name]


@pytest.mark.parametrize("name", LIVE)
def test_numpy_dtype_matches_extent(name: str) -> None:
    impl = getattr(D, name)._impl
    assert impl.predefined and impl.committed
    if impl.np_dtype is not None:
        assert impl.np_dtype.itemsize == impl.extent
    else:
        assert name in {"PACKED", "INTEGER16", "LOGICAL16", "COMPLEX4", "BFLOAT16_T", "LB", "UB"}


PAIRS = {
    # name: (size, extent, true extent)
    "SHORT_INT": (6, 8, 8),
    "INT_INT": (8, 8, 8),
    "LONG_INT": (12, 16, 12),
    "FLOAT_INT": (8, 8, 8),
    "DOUBLE_INT": (12, 16, 12),
    "LONG_DOUBLE_INT": (20, 32, 20),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_pair_types_have_c_struct_layout(name: str) -> None:
    datatype = getattr(D, name)
    size, extent, true_extent = PAIRS[name]
    assert datatype.size == size
    assert datatype.Get_extent() == (0, extent)
    assert datatype.Get_true_extent() == (0, true_extent)
    assert (datatype.lb, datatype.ub, datatype.extent) == (0, extent, extent)
    (true_lb, true_ub) = (datatype.true_lb, datatype.true_ub)
    assert (true_lb, true_ub, datatype.true_extent) == (0, true_extent, true_extent)
    dtype = datatype._impl.np_dtype
    assert dtype.names == ("value", "index")
    assert dtype.isalignedstruct and dtype.itemsize == extent
    assert dtype.fields["index"][0] == np.dtype(np.int32)


# --- names, aliases, handles ---------------------------------------------------------------


def test_names() -> None:
    assert D.INT.Get_name() == "MPI_INT"
    assert D.INT.name == "MPI_INT"
    assert D.INT_INT.name == "MPI_2INT"
    assert D.LONG_LONG.name == "MPI_LONG_LONG_INT"
    assert D.DATATYPE_NULL.Get_name() == "MPI_DATATYPE_NULL"
    for name in LIVE:
        assert getattr(D, name).Get_name().startswith("MPI")


ALIASES = [
    ("LONG_LONG_INT", "LONG_LONG"), ("TWOINT", "INT_INT"), ("UNSIGNED_INT", "UNSIGNED"),
    ("C_FLOAT_COMPLEX", "C_COMPLEX"), ("BOOL", "C_BOOL"), ("SIGNED_INT", "INT"),
    ("SIGNED_SHORT", "SHORT"), ("SIGNED_LONG", "LONG"), ("SIGNED_LONG_LONG", "LONG_LONG"),
    ("SINT32_T", "INT32_T"), ("FLOAT32_T", "FLOAT"), ("FLOAT64_T", "DOUBLE"),
    ("F_INT", "INTEGER"), ("F_BOOL", "LOGICAL"), ("F_FLOAT", "REAL"),
    ("F_DOUBLE", "DOUBLE_PRECISION"), ("F_COMPLEX", "COMPLEX"),
    ("F_FLOAT_COMPLEX", "COMPLEX"), ("F_DOUBLE_COMPLEX", "DOUBLE_COMPLEX"),
]  # fmt: skip


@pytest.mark.parametrize(("alias", "name"), ALIASES)
def test_aliases_are_the_same_object(alias: str, name: str) -> None:
    assert getattr(D, alias) is getattr(D, name)


def test_distinct_types_are_unequal() -> None:
    assert D.INT != D.INT32_T
    assert D.INTEGER != D.INT
    assert D.BYTE != D.UNSIGNED_CHAR
    assert D.CXX_BOOL != D.C_BOOL
    distinct = {id(getattr(D, n)) for n in NAMES}
    assert len({id(getattr(D, n)._impl) for n in NAMES}) == len(distinct)


def test_handle_copies_compare_equal() -> None:
    copy = Datatype(D.DOUBLE)
    assert copy == D.DOUBLE and copy is not D.DOUBLE
    with pytest.raises(TypeError):
        hash(copy)  # handles are unhashable, as in mpi4py: Free() changes what they are
    assert Datatype() == D.DATATYPE_NULL
    assert (D.INT == 4) is False
    with pytest.raises(TypeError):
        Datatype("i")  # type: ignore[arg-type]


def test_bool() -> None:
    assert not D.DATATYPE_NULL
    assert all(getattr(D, n) for n in LIVE)


def test_set_name_on_predefined_is_seen_by_every_handle() -> None:
    copy = Datatype(D.SHORT)
    try:
        D.SHORT.Set_name("my short")
        assert copy.Get_name() == "my short"
        D.SHORT.name = "x" * (MAX_OBJECT_NAME + 10)
        assert D.SHORT.name == "x" * (MAX_OBJECT_NAME - 1)
    finally:
        D.SHORT.Set_name("MPI_SHORT")
    with pytest.raises(TypeError):
        D.SHORT.Set_name(5)  # type: ignore[arg-type]


def test_null_handle_operations_raise_err_type() -> None:
    null = D.DATATYPE_NULL
    for call in (null.Get_size, null.Get_extent, null.Commit, null.Free, null.Dup,
                 null.Get_envelope, lambda: null.Set_name("x"), lambda: null.extent):  # fmt: skip
        with pytest.raises(MPIException) as info:
            call()
        assert err_class(info) == ERR_TYPE


def test_predefined_cannot_be_freed() -> None:
    for datatype in (D.INT, Datatype(D.INT), D.DOUBLE_INT, D.PACKED):
        with pytest.raises(MPIException) as info:
            datatype.Free()
        assert err_class(info) == ERR_TYPE
    assert D.INT
    D.INT.free()  # lenient form does nothing
    assert D.INT


def test_commit_returns_self() -> None:
    assert D.INT.Commit() is D.INT


def test_envelope_of_named_types() -> None:
    for name in LIVE:
        datatype = getattr(D, name)
        assert datatype.Get_envelope() == (0, 0, 0, 0, COMBINER_NAMED)
        assert datatype.combiner == COMBINER_NAMED
        assert datatype.is_named and datatype.is_predefined


def test_dup() -> None:
    dup = D.DOUBLE_INT.Dup()
    assert dup != D.DOUBLE_INT
    assert dup.Get_name() == ""
    assert dup.Get_size() == D.DOUBLE_INT.size
    assert dup.Get_extent() == D.DOUBLE_INT.Get_extent()
    assert dup.Get_true_extent() == D.DOUBLE_INT.Get_true_extent()
    assert dup.Get_envelope() == (0, 0, 0, 1, COMBINER_DUP)
    assert not dup.is_named and not dup.is_predefined
    assert dup._impl.committed
    other = Datatype(dup)
    dup.Free()
    assert dup == D.DATATYPE_NULL
    assert other.Get_size() == 12  # freeing one handle leaves the others usable
    other.free()
    assert not other


def test_repr() -> None:
    assert repr(D.INT) == "MPI.INT"
    assert repr(D.TWOINT) == "MPI.INT_INT"
    assert repr(D.DATATYPE_NULL) == "MPI.DATATYPE_NULL"
    assert "size=4" in repr(D.INT.Dup())


@pytest.mark.parametrize("name", NAMES)
def test_predefined_types_pickle_to_themselves(name: str) -> None:
    datatype = getattr(D, name)
    assert pickle.loads(pickle.dumps(datatype)) == datatype


def test_derived_types_pickle_by_their_constructor() -> None:
    vector = D.INT.Create_vector(3, 2, 4).Commit()
    copy = pickle.loads(pickle.dumps(vector))
    assert copy != vector and copy.decode()[1:] == vector.decode()[1:]
    assert copy.Get_extent() == vector.Get_extent() and copy.decode()[0] is D.INT
    dup = pickle.loads(pickle.dumps(D.DOUBLE.Dup()))
    assert dup.combiner == COMBINER_DUP and dup.decode()[0] is D.DOUBLE


# --- type codes ----------------------------------------------------------------------------

TOCODE = {
    "INT": "i", "DOUBLE": "d", "CHAR": "c", "WCHAR": "U", "SIGNED_CHAR": "b",
    "UNSIGNED_CHAR": "B", "BYTE": "B", "PACKED": "B", "C_BOOL": "b1", "CXX_BOOL": "?",
    "INT32_T": "i4", "UINT8_T": "u1", "LONG_DOUBLE": "g", "C_COMPLEX": "F",
    "C_DOUBLE_COMPLEX": "D", "AINT": "p", "COUNT": "p", "OFFSET": "p", "LOGICAL": "i",
    "REAL16": "f16", "COMPLEX16": "c16", "FLOAT16_T": "e",
    "INTEGER16": "i16", "LOGICAL16": "i16", "COMPLEX4": "c4",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TOCODE))
def test_tocode(name: str) -> None:
    assert getattr(D, name).tocode() == TOCODE[name]


@pytest.mark.parametrize("name", ["DOUBLE_INT", "INT_INT", "DATATYPE_NULL", "BFLOAT16_T", "LB"])
def test_tocode_without_code(name: str) -> None:
    with pytest.raises(ValueError):
        getattr(D, name).tocode()


def test_tocode_of_dup_is_the_code_of_its_base() -> None:
    assert D.INT.Dup().tocode() == "i"


FROMCODE = {
    "i": "INT", "d": "DOUBLE", "f": "FLOAT", "?": "C_BOOL", "b1": "C_BOOL", "c": "CHAR",
    "S1": "CHAR", "B": "UNSIGNED_CHAR", "b": "SIGNED_CHAR", "h": "SHORT", "l": "LONG",
    "q": "LONG_LONG", "Q": "UNSIGNED_LONG_LONG", "g": "LONG_DOUBLE", "F": "C_COMPLEX",
    "Zd": "C_DOUBLE_COMPLEX", "G": "C_LONG_DOUBLE_COMPLEX", "i1": "INT8_T", "u8": "UINT64_T",
    "f8": "DOUBLE", "c16": "C_DOUBLE_COMPLEX", "U": "WCHAR", "p": "AINT", "n": "COUNT",
    "e": "FLOAT16_T", "int32": "INT32_T", "float64": "DOUBLE", "complex64": "C_COMPLEX",
    "uint16": "UINT16_T", "bool": "C_BOOL", "int8": "INT8_T",
    "i16": "INTEGER16", "c4": "COMPLEX4",
}  # fmt: skip


@pytest.mark.parametrize("code", sorted(FROMCODE))
def test_fromcode(code: str) -> None:
    assert Datatype.fromcode(code) is getattr(D, FROMCODE[code])


@pytest.mark.parametrize("code", ["zz", "", "O", "object", "M8[s]", "float128x"])
def test_fromcode_unknown(code: str) -> None:
    with pytest.raises(ValueError):
        Datatype.fromcode(code)


def test_tocode_fromcode_round_trip() -> None:
    for name in LIVE:
        datatype = getattr(D, name)
        try:
            code = datatype.tocode()
        except ValueError:
            continue
        back = Datatype.fromcode(code)
        assert back.size == datatype.size, name


# --- buffer formats ------------------------------------------------------------------------

NUMPY_DTYPES = {
    "bool": "C_BOOL", "int8": "SIGNED_CHAR", "uint8": "UNSIGNED_CHAR", "int16": "SHORT",
    "uint16": "UNSIGNED_SHORT", "int32": "INT", "uint32": "UNSIGNED", "int64": "LONG",
    "uint64": "UNSIGNED_LONG", "longlong": "LONG_LONG", "ulonglong": "UNSIGNED_LONG_LONG",
    "float16": "FLOAT16_T", "float32": "FLOAT", "float64": "DOUBLE",
    "longdouble": "LONG_DOUBLE", "complex64": "C_COMPLEX", "complex128": "C_DOUBLE_COMPLEX",
    "clongdouble": "C_LONG_DOUBLE_COMPLEX", "S1": "CHAR", "S4": "CHAR", "U1": "WCHAR",
    "U3": "WCHAR", "V8": "BYTE", "<i4": "INT", "=f8": "DOUBLE",
}  # fmt: skip


@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPES))
def test_format_of_every_numpy_dtype(dtype: str) -> None:
    view = memoryview(np.zeros(3, dtype=dtype))
    assert datatype_for_format(view.format, view.itemsize) is getattr(D, NUMPY_DTYPES[dtype])


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_format_of_aligned_pair_arrays(name: str) -> None:
    value = {"SHORT_INT": "h", "INT_INT": "i", "LONG_INT": "l", "FLOAT_INT": "f",
             "DOUBLE_INT": "d", "LONG_DOUBLE_INT": "g"}[name]  # fmt: skip
    dtype = np.dtype([("val", value), ("loc", "i4")], align=True)
    view = memoryview(np.zeros(2, dtype=dtype))
    assert datatype_for_format(view.format, view.itemsize) is getattr(D, name)


def test_unaligned_or_foreign_structs_are_refused() -> None:
    for dtype in (
        np.dtype([("v", "d"), ("i", "i4")]),  # packed, itemsize 12
        np.dtype([("a", "d"), ("b", "d")], align=True),
        np.dtype([("v", "d"), ("i", "i4"), ("j", "i4")], align=True),
    ):
        view = memoryview(np.zeros(2, dtype=dtype))
        with pytest.raises(MPIException) as info:
            datatype_for_format(view.format, view.itemsize)
        assert err_class(info) == ERR_TYPE


CTYPES = {
    ctypes.c_int: "INT", ctypes.c_long: "LONG_LONG",  # ctypes exports c_long as '<q'
    ctypes.c_double: "DOUBLE",
    ctypes.c_float: "FLOAT", ctypes.c_byte: "SIGNED_CHAR", ctypes.c_ubyte: "UNSIGNED_CHAR",
    ctypes.c_longlong: "LONG_LONG", ctypes.c_uint16: "UNSIGNED_SHORT", ctypes.c_bool: "C_BOOL",
}  # fmt: skip


@pytest.mark.parametrize("ctype", list(CTYPES), ids=lambda c: c.__name__)
def test_format_of_ctypes_arrays(ctype: type) -> None:
    view = memoryview((ctype * 3)())
    found = datatype_for_format(view.format, view.itemsize)
    assert found.size == ctypes.sizeof(ctype)
    assert found is getattr(D, CTYPES[ctype])


def test_explicit_standard_sizes() -> None:
    assert datatype_for_format("<l") is D.INT32_T  # standard size of 'l' is 4
    assert datatype_for_format("<i") is D.INT
    assert datatype_for_format("=q") is D.LONG_LONG
    assert datatype_for_format("@d") is D.DOUBLE
    assert datatype_for_format("<l", 8) is D.LONG


@pytest.mark.parametrize("fmt", [">i", "!d", "O", "zz", "T{d:a:d:b:}", "P3", "x"])
def test_formats_without_datatype_raise_err_type(fmt: str) -> None:
    with pytest.raises(MPIException) as info:
        datatype_for_format(fmt)
    assert err_class(info) == ERR_TYPE
    assert repr(fmt) in str(info.value) or "Python objects" in str(info.value)


def test_byte_swapped_message_is_helpful() -> None:
    view = memoryview(np.zeros(2, dtype=">f8"))
    with pytest.raises(MPIException, match="byte order"):
        datatype_for_format(view.format, view.itemsize)


# --- differential checks against mpi4py ----------------------------------------------------


def test_datatype_names_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    theirs = {n for n in dir(mpi) if isinstance(getattr(mpi, n), mpi.Datatype)}
    assert theirs - set(NAMES) == set()


def test_sizes_extents_names_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for name in NAMES:
        theirs = getattr(mpi, name, None)
        if theirs is None or not theirs:
            continue  # absent from mpi4py, or null on MPICH (no such type there)
        ours = getattr(D, name)
        assert ours.Get_size() == theirs.Get_size(), name
        assert ours.Get_extent() == theirs.Get_extent(), name
        assert ours.Get_true_extent() == theirs.Get_true_extent(), name
        assert ours.Get_name() == theirs.Get_name(), name


def test_type_codes_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for name in NAMES:
        theirs = getattr(mpi, name, None)
        if theirs is None or not theirs:
            continue
        try:
            expected = theirs.tocode()
        except ValueError:
            with pytest.raises(ValueError):
                getattr(D, name).tocode()
            continue
        assert getattr(D, name).tocode() == expected, name
    for code, theirs in mpi._typedict.items():
        assert Datatype.fromcode(code).Get_name() == theirs.Get_name(), code
