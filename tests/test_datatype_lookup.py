"""Finding predefined datatypes (``Create_f90_*``, ``Match_size``, ``Get_value_index``) and
the numpy type characters of datatypes (``typechar``, ``typestr``)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from ipympi import MPI

U = MPI.UNDEFINED


@pytest.mark.parametrize(
    ("r", "size"), [(0, 1), (2, 1), (3, 2), (4, 2), (5, 4), (9, 4), (10, 8), (18, 8)]
)
def test_f90_integer_sizes_as_fortran_selected_int_kind(r: int, size: int) -> None:
    datatype = MPI.Datatype.Create_f90_integer(r)
    assert datatype.size == size and datatype.typestr == f"i{size}"


@pytest.mark.parametrize(
    ("p", "r", "real", "complex_"),
    [
        (3, 4, "f2", "c8"),  # half precision has no numpy complex: the next kind up
        (6, 30, "f4", "c8"),
        (U, 37, "f4", "c8"),
        (7, 30, "f8", "c16"),
        (15, 300, "f8", "c16"),
        (6, U, "f4", "c8"),
        (16, 300, np.dtype(np.longdouble).str[1:], np.dtype(np.clongdouble).str[1:]),
    ],
)
def test_f90_real_and_complex(p: int, r: int, real: str, complex_: str) -> None:
    assert MPI.Datatype.Create_f90_real(p, r).typestr == real
    assert MPI.Datatype.Create_f90_complex(p, r).typestr == complex_


def test_f90_types_are_predefined_unnamed_and_shared() -> None:
    datatype = MPI.Datatype.Create_f90_real(6, 30)
    assert datatype == MPI.Datatype.Create_f90_real(6, 30) != MPI.REAL4
    assert datatype.is_predefined and not datatype.is_named and datatype.name == ""
    assert datatype.Get_envelope() == (2, 0, 0, 0, MPI.COMBINER_F90_REAL)
    assert datatype.Get_contents() == ([6, 30], [], [], [])
    assert datatype.decode()[1:] == ("F90_REAL", {"p": 6, "r": 30})
    assert pickle.loads(pickle.dumps(datatype)) == datatype
    assert datatype.tocode() == "f4" and datatype.Dup().Dup().tocode() == "f4"
    with pytest.raises(MPI.Exception) as info:
        datatype.Free()
    assert info.value.Get_error_class() == MPI.ERR_TYPE
    total = np.zeros(1, np.float32)
    MPI.COMM_SELF.Allreduce([np.ones(1, np.float32), datatype], [total, datatype], MPI.SUM)
    assert total[0] == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda: MPI.Datatype.Create_f90_integer(40),
        lambda: MPI.Datatype.Create_f90_real(40, 30),
        lambda: MPI.Datatype.Create_f90_complex(6, 10**6),
        lambda: MPI.Datatype.Match_size(MPI.TYPECLASS_REAL, 3),
        lambda: MPI.Datatype.Match_size(99, 4),
    ],
)
def test_nothing_matches(call: Any) -> None:
    with pytest.raises(MPI.Exception) as info:
        call()
    assert info.value.Get_error_class() == MPI.ERR_ARG


def test_match_size() -> None:
    classes = {
        MPI.TYPECLASS_INTEGER: [MPI.INTEGER1, MPI.INTEGER2, MPI.INTEGER4, MPI.INTEGER8],
        MPI.TYPECLASS_REAL: [MPI.REAL2, MPI.REAL4, MPI.REAL8, MPI.REAL16],
        MPI.TYPECLASS_COMPLEX: [MPI.COMPLEX8, MPI.COMPLEX16, MPI.COMPLEX32],
        MPI.TYPECLASS_LOGICAL: [MPI.LOGICAL1, MPI.LOGICAL2, MPI.LOGICAL4, MPI.LOGICAL8],
    }
    for typeclass, datatypes in classes.items():
        for datatype in datatypes:
            found = MPI.Datatype.Match_size(typeclass, datatype.size)
            assert found == datatype and found is not datatype


def test_get_value_index() -> None:
    pairs = [
        (MPI.SHORT, MPI.SHORT_INT), (MPI.INT, MPI.INT_INT), (MPI.LONG, MPI.LONG_INT),
        (MPI.FLOAT, MPI.FLOAT_INT), (MPI.DOUBLE, MPI.DOUBLE_INT),
        (MPI.LONG_DOUBLE, MPI.LONG_DOUBLE_INT),
    ]  # fmt: skip
    for value, pair in pairs:
        assert MPI.Datatype.Get_value_index(value, MPI.INT) == pair
        assert MPI.Datatype.Get_value_index(value, MPI.FLOAT) == MPI.DATATYPE_NULL
    assert MPI.Datatype.Get_value_index(MPI.INT32_T, MPI.INT) == MPI.DATATYPE_NULL
    for args in ((MPI.DATATYPE_NULL, MPI.INT), (MPI.INT, MPI.DATATYPE_NULL)):
        with pytest.raises(MPI.Exception) as info:
            MPI.Datatype.Get_value_index(*args)
        assert info.value.Get_error_class() == MPI.ERR_TYPE


@pytest.mark.parametrize(
    ("datatype", "char", "string"),
    [
        (MPI.INT, "i", "i4"),
        (MPI.DOUBLE, "d", "f8"),
        (MPI.CHAR, "c", "S1"),
        (MPI.WCHAR, "U", "U1"),
        (MPI.C_BOOL, "?", "b1"),
        (MPI.BYTE, "B", "u1"),
        (MPI.PACKED, "B", "u1"),
        (MPI.AINT, "p", "i8"),
        (MPI.OFFSET, "p", "i8"),
        (MPI.UINT64_T, "L", "u8"),
        (MPI.INT8_T, "b", "i1"),
        (MPI.FLOAT16_T, "e", "f2"),
        (MPI.LOGICAL, "i", "i4"),
        (MPI.C_DOUBLE_COMPLEX, "D", "c16"),
        (MPI.INT_INT, "V", "V8"),
        (MPI.DATATYPE_NULL, "", ""),
        # sizes numpy lacks keep the type string of their kind and size
        (MPI.INTEGER16, "V", "i16"),
        (MPI.LOGICAL16, "V", "i16"),
        (MPI.COMPLEX4, "E", "c4"),
    ],
)
def test_type_characters_as_mpi4py(datatype: Any, char: str, string: str) -> None:
    assert (datatype.typechar, datatype.typestr) == (char, string)


def test_type_characters_of_derived_types() -> None:
    assert MPI.INT.Dup().Dup().typechar == "i"
    vector = MPI.INT.Create_vector(2, 1, 2)
    assert (vector.typechar, vector.typestr) == ("V", "V12")


@pytest.mark.parametrize("name", ["INTEGER16", "LOGICAL16", "COMPLEX4"])
def test_codes_numpy_lacks_round_trip_and_numpy_rejects_them(name: str) -> None:
    datatype = getattr(MPI, name)
    back = MPI.Datatype.fromcode(datatype.tocode())
    assert (back.typechar, back.typestr) == (datatype.typechar, datatype.typestr)
    dup = datatype.Dup()
    assert (dup.tocode(), dup.typestr, dup.typechar) == (
        datatype.tocode(),
        datatype.typestr,
        datatype.typechar,
    )
    dup.Free()
    with pytest.raises(TypeError):
        np.dtype(datatype.typestr)


# --- MPI._typealign --------------------------------------------------------------------------


@pytest.mark.parametrize("code", [*"?cbhilqpBHILQPefdgFDG", "i4", "u8", "c8", "c16"])
def test_typealign_of_typed_datatypes_is_numpys(code: str) -> None:
    datatype = MPI.Datatype.fromcode(code)
    assert MPI._typealign(datatype) == np.dtype(code).alignment
    dup = datatype.Dup()
    assert MPI._typealign(dup) == np.dtype(code).alignment
    dup.Free()


@pytest.mark.parametrize(
    ("name", "value"),
    [("SHORT_INT", "h"), ("INT_INT", "i"), ("LONG_INT", "l"), ("FLOAT_INT", "f"),
     ("DOUBLE_INT", "d"), ("LONG_DOUBLE_INT", "g")],
)  # fmt: skip
def test_typealign_of_pairs_is_their_c_struct(name: str, value: str) -> None:
    pair = getattr(MPI, name)
    assert MPI._typealign(pair) == np.dtype(f"{value},i", align=True).alignment
    dup = pair.Dup()
    assert MPI._typealign(dup) is None  # as mpi4py: a duplicate of a pair has no type code
    dup.Free()


def test_typealign_of_other_types_is_none() -> None:
    struct = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.INT, MPI.DOUBLE])
    contiguous = MPI.DOUBLE.Create_contiguous(2)
    resized = MPI.DOUBLE.Create_resized(0, 8)
    for datatype in (struct, contiguous, resized, MPI.DATATYPE_NULL, MPI.LB):
        assert MPI._typealign(datatype) is None
    for datatype in (struct, contiguous, resized):
        datatype.Free()
    assert MPI._typealign(MPI.Datatype.Create_f90_integer(9)) == 4
    assert MPI._typealign(MPI.INTEGER16) == 16 and MPI._typealign(MPI.COMPLEX4) == 2
