"""``MPI.Status``: fields, MPICH's C layout (``tomemory``, ``py2f``), copies and pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

from ipympi import MPI


def test_empty_status() -> None:
    status = MPI.Status()
    assert (status.source, status.tag, status.error) == (MPI.ANY_SOURCE, MPI.ANY_TAG, 0)
    assert status.count == 0 and status.cancelled is False
    assert status.Get_count() == status.Get_count(MPI.BYTE) == status.Get_elements(MPI.BYTE) == 0
    assert status.py2f() == [0, 0, MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS]


def test_fields_and_accessors() -> None:
    status = MPI.Status()
    status.Set_source(3)
    status.tag = 7
    status.error = MPI.ERR_ARG
    status.Set_elements(MPI.INT, 5)
    status.Set_cancelled(True)
    assert (status.Get_source(), status.Get_tag(), status.Get_error()) == (3, 7, MPI.ERR_ARG)
    assert status.count == 20 and status.Get_count(MPI.INT) == 5 and status.Is_cancelled()
    assert status.Get_count(MPI.DOUBLE) == MPI.UNDEFINED  # 20 bytes are not whole doubles
    with pytest.raises(TypeError):
        status.source = "3"  # type: ignore[assignment]
    with pytest.raises(MPI.Exception) as info:
        status.count = -1
    assert info.value.Get_error_class() == MPI.ERR_COUNT
    with pytest.raises(MPI.Exception) as info:
        status.Get_count(MPI.DATATYPE_NULL)
    assert info.value.Get_error_class() == MPI.ERR_TYPE


@pytest.mark.parametrize("count", [0, 7, 2**31 - 1, 2**31, 2**32 + 5, 2**40])
@pytest.mark.parametrize("cancelled", [False, True])
def test_count_layout_as_mpich(count: int, cancelled: bool) -> None:
    """count_lo holds the low 32 bits (as a C int), count_hi_and_cancelled the rest
    shifted above the cancelled bit, as MPICH's MPI_Status does."""
    status = MPI.Status()
    status.count, status.cancelled = count, cancelled
    lo, hi = status.py2f()[:2]
    assert lo & 0xFFFFFFFF == count & 0xFFFFFFFF and -(2**31) <= lo < 2**31
    assert hi == (count >> 32) << 1 | cancelled
    assert status.count == count and status.cancelled is cancelled


def test_tomemory_is_the_status() -> None:
    status = MPI.Status()
    status.source, status.tag, status.error = 11, 22, 33
    memory = status.tomemory()
    assert memory.format == "i" and memory.nbytes == MPI._sizeof(status) == 20
    memory[MPI.F_SOURCE], memory[MPI.F_TAG], memory[MPI.F_ERROR] = 111, 222, 333
    assert (status.source, status.tag, status.error) == (111, 222, 333)
    assert status.py2f() == list(memory) and len(memory) == MPI.F_STATUS_SIZE


def test_copies_f2py_and_pickling() -> None:
    status = MPI.Status()
    status.source, status.tag, status.count, status.cancelled = 1, 2, 3, True
    for dup in (
        MPI.Status(status),
        MPI.Status.f2py(status.py2f()),
        pickle.loads(pickle.dumps(status)),
        copy.deepcopy(status),
    ):
        assert dup == status and dup is not status and (dup != status) is False
        assert dup.tomemory().tobytes() == status.tomemory().tobytes()
    other = MPI.Status(status)
    other.tag = 9
    assert other != status and status.tag == 2
    with pytest.raises(TypeError):
        MPI.Status(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(status)
    with pytest.raises(IndexError):
        MPI.Status.f2py([1, 2])


def test_subclass_pickles_as_itself() -> None:
    global MyStatus

    class MyStatus(MPI.Status):  # type: ignore[no-redef]
        pass

    mine = MyStatus()
    mine.tag = 4
    again = pickle.loads(pickle.dumps(mine))
    assert type(again) is MyStatus and again.tag == 4
