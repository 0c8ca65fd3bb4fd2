"""``mpi4py.util.dtlib``: numpy dtypes to MPI datatypes and back (no processes needed)."""

from __future__ import annotations

import numpy as np
import pytest

from ipympi import MPI
from ipympi.mpi4py.util import dtlib
from ipympi.mpi4py.util.dtlib import from_numpy_dtype, to_numpy_dtype


def _round_trip(spec: object, align: bool = False) -> np.dtype:
    """dtype -> datatype -> dtype, checking the datatype's extent on the way."""
    dt = np.dtype(spec, align=align)
    datatype = from_numpy_dtype(dt)
    try:
        assert datatype.lb == 0 and datatype.extent == dt.itemsize
        return to_numpy_dtype(datatype)
    finally:
        datatype.Free()


@pytest.mark.parametrize("code", [*"?bhilqBHILQfdgFD", "i1", "u8", "f8", "c16", "S1"])
def test_scalars_round_trip(code: str) -> None:
    assert _round_trip(code) == np.dtype(code)


def test_a_scalar_is_a_new_datatype_the_caller_frees() -> None:
    datatype = from_numpy_dtype("i")
    assert not datatype.is_predefined and datatype.Get_size() == 4
    datatype.Free()


@pytest.mark.parametrize("spec", ["(3,)i", "(2,3)d", "(1,)f", "(2,3,4)b"])
def test_subarrays_round_trip(spec: str) -> None:
    assert _round_trip(spec) == np.dtype(spec)


@pytest.mark.parametrize("spec", ["i,d", "b,h,q", "c,(3,)i,(2,2)d,c", "f,g"])
@pytest.mark.parametrize("align", [False, True])
def test_structs_round_trip_with_their_layout(spec: str, align: bool) -> None:
    dt = np.dtype(spec, align=align)
    back = _round_trip(spec, align)
    assert back == dt
    assert [back.fields[n][1] for n in back.names] == [dt.fields[n][1] for n in dt.names]
    assert back.itemsize == dt.itemsize


def test_nested_aligned_structs_stay_aligned() -> None:
    inner = np.dtype("c,i,d,c", align=True)
    outer = np.dtype([("", inner)] * 2, align=True)
    back = _round_trip(outer, True)
    assert back == outer and back.isalignedstruct


def test_contiguous_and_fortran_subarray_are_subarrays() -> None:
    contiguous = MPI.INT.Create_contiguous(5)
    fortran = MPI.DOUBLE.Create_subarray([2, 3], [2, 3], [0, 0], MPI.ORDER_FORTRAN)
    assert to_numpy_dtype(contiguous) == np.dtype(("i", (5,)))
    assert to_numpy_dtype(fortran) == np.dtype(("d", (3, 2)))  # the same memory, C order
    contiguous.Free()
    fortran.Free()


def test_vector_and_hvector_are_the_same_struct_of_blocks() -> None:
    vector = MPI.INT.Create_vector(3, 4, 6)
    hvector = MPI.INT.Create_hvector(3, 4, 6 * 4)
    dt = to_numpy_dtype(vector)
    assert dt == to_numpy_dtype(hvector)
    assert [dt.fields[n][1] for n in dt.names] == [0, 24, 48]
    assert all(dt.fields[n][0] == np.dtype(("i", (4,))) for n in dt.names)
    assert dt.itemsize == vector.extent == 64 and dt.isalignedstruct
    vector.Free()
    hvector.Free()


def test_indexed_blocks_keep_their_offsets_and_reach() -> None:
    indexed = MPI.INT.Create_indexed([4, 4, 4], [1, 6, 12])
    dt = to_numpy_dtype(indexed)
    assert [dt.fields[n][1] for n in dt.names] == [4, 24, 48]
    assert dt.itemsize == 64  # the last block ends there, past the extent (60)
    indexed.Free()


def test_unaligned_struct_is_packed() -> None:
    struct = MPI.Datatype.Create_struct([1, 2, 3], [1, 27, 71], [MPI.INT, MPI.DOUBLE, MPI.INT])
    dt = to_numpy_dtype(struct)
    assert not dt.isalignedstruct
    assert [dt.fields[n][1] for n in dt.names] == [1, 27, 71]
    assert dt.fields["f1"][0] == np.dtype(("d", (2,)))
    assert dt.itemsize == struct.extent
    struct.Free()


def test_value_index_pairs_are_aligned_structs() -> None:
    dt = to_numpy_dtype(MPI.SHORT_INT)
    assert dt == np.dtype("h,i", align=True) and dt.isalignedstruct
    assert dt.itemsize == MPI.SHORT_INT.extent
    assert to_numpy_dtype(MPI.DOUBLE_INT) == np.dtype("d,i", align=True)


def test_resized_struct_changes_the_itemsize() -> None:
    struct = from_numpy_dtype(np.dtype("B,i,B", align=True))
    resized = struct.Create_resized(0, 3 * struct.extent)
    dt = to_numpy_dtype(resized)
    assert dt.itemsize == 3 * struct.extent and dt.isalignedstruct
    struct.Free()
    resized.Free()


def test_failures() -> None:
    other = ">" if np.dtype("<i").isnative else "<"
    with pytest.raises(ValueError):
        from_numpy_dtype(np.dtype(other + "i"))  # not native byte order
    with pytest.raises(ValueError):
        from_numpy_dtype(np.dtype("O"))
    with pytest.raises(ValueError):
        from_numpy_dtype(np.dtype("V"))
    with pytest.raises(ValueError):
        to_numpy_dtype(MPI.DATATYPE_NULL)
    for bad in (MPI.INT.Create_resized(0, 32), MPI.INT.Create_subarray([2], [1], [0])):
        with pytest.raises(ValueError):
            to_numpy_dtype(bad)
        bad.Free()


def test_without_numpy_the_dtype_specification(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dtlib, "_np_dtype", None)
    assert to_numpy_dtype(MPI.DOUBLE) == "d"
    contiguous = MPI.DOUBLE.Create_contiguous(7)
    assert to_numpy_dtype(contiguous) == ("d", (7,))
    struct = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.DOUBLE])
    spec = to_numpy_dtype(struct)
    assert spec["formats"] == ["d", "d"] and spec["offsets"] == [0, 8]
    assert spec["itemsize"] == 16 and spec["aligned"]
    with pytest.raises(RuntimeError):
        from_numpy_dtype("d")
    contiguous.Free()
    struct.Free()
