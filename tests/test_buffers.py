"""Buffer specifications: every accepted form, every error class, and Alloc_mem."""

from __future__ import annotations

import array
import ctypes
import pickle
import re
from typing import Any

import numpy as np
import pytest

from ipympi.core.constants import PROC_NULL
from ipympi.core.errors import ERR_ARG, ERR_BASE, ERR_BUFFER, ERR_INFO, ERR_TYPE
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi import datatype as D
from ipympi.mpi.buffers import BufferSpec, as_ndarray, recv_buffer, send_buffer, send_memory
from ipympi.mpi.coll.bufforms import vector, wvector
from ipympi.mpi.datatype_derived import Get_address
from ipympi.mpi.info import INFO_ENV, INFO_NULL
from ipympi.mpi.memory import Alloc_mem, Free_mem, buffer
from ipympi.mpi.rawmem import BOTTOM, BUFFER_AUTOMATIC, IN_PLACE, BottomType, InPlaceType


def error_of(spec: Any, parse: Any = send_buffer) -> Any:
    """The exception type (or, for ``MPI.Exception``, the error class) ``parse`` raises."""
    with pytest.raises((MPIException, TypeError, ValueError, KeyError, BufferError)) as info:
        parse(spec)
    if isinstance(info.value, MPIException):
        return info.value.Get_error_class()
    return type(info.value)


def check_view(spec: BufferSpec) -> None:
    """The invariants every BufferSpec satisfies."""
    mem = spec.mem
    assert isinstance(mem, memoryview)
    assert mem.format == "B" and mem.ndim == 1 and mem.c_contiguous
    assert spec.nbytes == mem.nbytes == spec.count * spec.datatype.extent


# --- accepted forms ------------------------------------------------------------------------


def test_plain_numpy_array() -> None:
    a = np.arange(10, dtype="d")
    spec = send_buffer(a)
    check_view(spec)
    assert (spec.count, spec.datatype) == (10, D.DOUBLE)
    assert spec.address == a.ctypes.data


def test_memory_is_shared_not_copied() -> None:
    a = np.zeros(4, dtype="i4")
    spec = recv_buffer(a)
    spec.mem[0:4] = np.int32(7).tobytes()
    assert a[0] == 7
    assert spec.mem.obj is a


@pytest.mark.parametrize(
    ("spec", "count", "datatype"),
    [
        (b"abcd", 4, D.UNSIGNED_CHAR),
        (bytearray(8), 8, D.UNSIGNED_CHAR),
        (array.array("i", [1, 2, 3]), 3, D.INT),
        (array.array("d", [1.0]), 1, D.DOUBLE),
        (memoryview(bytearray(6)), 6, D.UNSIGNED_CHAR),
        (memoryview(np.zeros(3, "f")), 3, D.FLOAT),
        ((ctypes.c_int * 5)(), 5, D.INT),
        (np.float64(2.5), 1, D.DOUBLE),
        (np.array(7, dtype="i8"), 1, D.LONG),
        (np.zeros((3, 4), dtype="f"), 12, D.FLOAT),
        (np.zeros((3, 4), dtype="f", order="F"), 12, D.FLOAT),
        (np.zeros(0, dtype="d"), 0, D.DOUBLE),
    ],
    ids=lambda v: type(v).__name__,
)
def test_buffer_objects(spec: Any, count: int, datatype: D.Datatype) -> None:
    parsed = send_buffer(spec)
    check_view(parsed)
    assert parsed.count == count
    assert parsed.datatype is datatype


NUMPY_DTYPES = [
    ("?", D.C_BOOL), ("i1", D.SIGNED_CHAR), ("u1", D.UNSIGNED_CHAR), ("i2", D.SHORT),
    ("u2", D.UNSIGNED_SHORT), ("i4", D.INT), ("u4", D.UNSIGNED), ("i8", D.LONG),
    ("u8", D.UNSIGNED_LONG), ("q", D.LONG_LONG), ("Q", D.UNSIGNED_LONG_LONG),
    ("e", D.FLOAT16_T), ("f4", D.FLOAT), ("f8", D.DOUBLE), ("g", D.LONG_DOUBLE),
    ("c8", D.C_COMPLEX), ("c16", D.C_DOUBLE_COMPLEX), ("G", D.C_LONG_DOUBLE_COMPLEX),
    ("S1", D.CHAR), ("U1", D.WCHAR),
]  # fmt: skip


@pytest.mark.parametrize(("dtype", "datatype"), NUMPY_DTYPES, ids=[d for d, _ in NUMPY_DTYPES])
def test_datatype_inferred_from_every_numpy_dtype(dtype: str, datatype: D.Datatype) -> None:
    spec = send_buffer(np.zeros(5, dtype=dtype))
    assert spec.datatype is datatype
    assert spec.count == 5


def test_multi_character_strings_count_characters() -> None:
    spec = send_buffer(np.zeros(3, dtype="S4"))
    assert (spec.count, spec.datatype) == (12, D.CHAR)


def test_aligned_pair_array_is_a_pair_type() -> None:
    a = np.zeros(3, dtype=np.dtype([("v", "d"), ("i", "i4")], align=True))
    spec = send_buffer(a)
    check_view(spec)
    assert (spec.count, spec.datatype, spec.nbytes) == (3, D.DOUBLE_INT, 48)


def test_list_and_tuple_forms() -> None:
    a = np.arange(10, dtype="d")
    base = a.ctypes.data
    forms: list[tuple[Any, int, D.Datatype, int]] = [
        ([a, D.DOUBLE], 10, D.DOUBLE, 0),
        ((a, D.DOUBLE), 10, D.DOUBLE, 0),
        ([a, "d"], 10, D.DOUBLE, 0),
        ([a, "f8"], 10, D.DOUBLE, 0),
        ([a, None], 10, D.DOUBLE, 0),
        ([a, 4], 4, D.DOUBLE, 0),
        ([a, np.int64(4)], 4, D.DOUBLE, 0),
        ([a, 4, D.DOUBLE], 4, D.DOUBLE, 0),
        ((a, 4, D.DOUBLE), 4, D.DOUBLE, 0),
        ([a, None, D.DOUBLE], 10, D.DOUBLE, 0),
        ([a, 3, "d"], 3, D.DOUBLE, 0),
        ([a, (3, 2), D.DOUBLE], 3, D.DOUBLE, 16),
        ([a, [3, 2], D.DOUBLE], 3, D.DOUBLE, 16),
        ([a, 3, 2, D.DOUBLE], 3, D.DOUBLE, 16),
        ([a, (3, 2)], 3, D.DOUBLE, 16),
        ([a, None, 2, D.DOUBLE], 8, D.DOUBLE, 16),
        ([a, D.BYTE], 80, D.BYTE, 0),
        ([a, 5, D.INT], 5, D.INT, 0),
        ([a, D.DOUBLE_INT], 5, D.DOUBLE_INT, 0),
        ([a, D.PACKED], 80, D.PACKED, 0),
    ]
    for spec, count, datatype, offset in forms:
        parsed = send_buffer(spec)
        check_view(parsed)
        assert (parsed.count, parsed.datatype) == (count, datatype), spec[1:]
        assert parsed.address == base + offset, spec[1:]


def test_explicit_datatype_overrides_the_format() -> None:
    spec = send_buffer([np.zeros(4, dtype="i4"), D.FLOAT])
    assert (spec.count, spec.datatype) == (4, D.FLOAT)


@pytest.mark.parametrize(
    "spec",
    [[None, 0, D.INT], [None, D.INT], [None, None, D.INT], [BOTTOM, 0, D.INT],
     (None, 0, D.DOUBLE), [None, (0, 0), D.DOUBLE], [None, 0, 0, D.INT]],
    ids=repr,
)  # fmt: skip
def test_empty_specs(spec: Any) -> None:
    for parse in (send_buffer, recv_buffer):
        parsed = parse(spec)
        check_view(parsed)
        assert parsed.count == 0 and parsed.nbytes == 0 and parsed.address == 0
    if isinstance(spec, list) and len(spec) == 3:
        assert send_buffer(spec).datatype is spec[2]


class CPUTensor:
    """A minimal DLPack producer without the buffer protocol."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self._array = array
        self._device = device

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        # A device producer is asked for stream -1; the memory here is numpy's anyway.
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def test_dlpack_cpu_tensor() -> None:
    a = np.arange(6, dtype="i4")
    spec = recv_buffer(CPUTensor(a))
    assert (spec.count, spec.datatype) == (6, D.INT)
    assert spec.address == a.ctypes.data
    spec = send_buffer([CPUTensor(a), 2, D.INT])
    assert spec.count == 2


def test_dlpack_device_memory_is_taken_by_address() -> None:
    # As mpi4py: the pointer is passed on whatever memory it names (here host memory).
    a = np.arange(2.0)
    spec = send_buffer(CPUTensor(a, device=(2, 0)))  # kDLCUDA
    assert spec.count == 2 and spec.address == a.ctypes.data


def test_cuda_array_interface_errors_are_python_errors() -> None:
    class GPUArray:
        __cuda_array_interface__: dict = {}

    with pytest.raises(KeyError):
        send_buffer(GPUArray())


# --- writability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [b"abcd", np.float64(1.0), memoryview(b"ab"), [b"abcd", 2, D.BYTE]],
    ids=lambda v: type(v).__name__,
)
def test_read_only_memory_is_fine_for_sending_not_receiving(spec: Any) -> None:
    send_buffer(spec)
    assert error_of(spec, recv_buffer) is BufferError


def test_read_only_numpy_array() -> None:
    a = np.zeros(3)
    a.flags.writeable = False
    assert send_buffer(a).mem.readonly
    with pytest.raises(BufferError, match="not writable"):
        recv_buffer(a)


# --- errors --------------------------------------------------------------------------------

A = np.arange(10, dtype="d")


# As mpi4py: forms and memory are checked in Python (TypeError, ValueError, KeyError,
# BufferError); only what MPI itself rejects is an MPI.Exception.
def _stable_id(text: str) -> str:
    """A test id without object addresses, the same in every process that collects it."""
    return re.sub(r" at 0x[0-9a-f]+", "", text)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ([A, -1, D.DOUBLE], ValueError),
        ([A, 2.0, D.DOUBLE], TypeError),
        ([A, "3", "d"], TypeError),
        ([A, (1, 2, 3), D.DOUBLE], ValueError),
        ([A, 11, D.DOUBLE], ValueError),
        ([A, (9, 2), D.DOUBLE], ValueError),
        ([A, 2, -1, D.DOUBLE], ValueError),
        ([A, 2, 1.5, D.DOUBLE], TypeError),
        ([A, None, 11, D.DOUBLE], ValueError),
        ([np.zeros(5, "i1"), D.INT], ValueError),
        ([A, D.LONG_DOUBLE_INT], ValueError),
        (A[::2], BufferError),
        (np.zeros((4, 4))[:, 1], BufferError),
        (np.zeros((2, 3, 4)).transpose(1, 0, 2), BufferError),
        (memoryview(bytearray(8))[::2], BufferError),
        ([A, D.DATATYPE_NULL], ValueError),
        ([A, 1, D.DATATYPE_NULL], ERR_TYPE),
        ([A, D.INTEGER16], ERR_TYPE),
        ([A, D.COMPLEX4], ERR_TYPE),
        ([A, D.BFLOAT16_T], ERR_TYPE),
        ([A, D.LB], ValueError),
        ([A, 1, D.UB], ERR_TYPE),
        ([A, "zz"], KeyError),
        ([A, 2, 5], KeyError),
        ([A, 2, object()], KeyError),
        (np.zeros(2, dtype=">i4"), BufferError),
        (np.zeros(2, dtype=object), KeyError),
        (np.zeros(2, dtype=[("a", "d"), ("b", "i4")]), KeyError),
        ([None, 3, D.INT], ValueError),
        ([None, (0, 2), D.INT], ValueError),
        ([BOTTOM, 2, D.INT], ERR_BUFFER),
        ([None, 0], KeyError),
        ([1, 2, 3], TypeError),  # 1 is not a buffer: found before the datatype 3
        ([[1, 2, 3], "i"], TypeError),
        ([1.0, 2.0], TypeError),
        ([1, 2, 3, 4, 5], ValueError),
        ((1, 2), TypeError),
        ([], ValueError),
        ([A], ValueError),
        ([A, 1, 2, 3, D.DOUBLE], ValueError),
        ("abc", TypeError),
        (["abc", D.CHAR], TypeError),
        (5, TypeError),
        ({}, TypeError),
        (object(), TypeError),
        (BOTTOM, KeyError),
        (None, TypeError),
        ([None, None], KeyError),
        ([A, (1, 2), 0, D.DOUBLE], TypeError),  # a pair only in the 2- and 3-item forms
        ([A, (1,)], ValueError),
        (BUFFER_AUTOMATIC, TypeError),
    ],
    ids=lambda v: _stable_id(repr(v)[:40]) if not isinstance(v, int) else str(v),
)
def test_errors(spec: Any, expected: Any) -> None:
    assert error_of(spec, send_buffer) == expected
    assert error_of(spec, send_memory) == expected
    if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], np.ndarray):
        spec = [spec[0].copy() if spec[0].flags.c_contiguous else spec[0], *spec[1:]]
    assert error_of(spec, recv_buffer) == expected


def test_uncommitted_datatype_is_refused() -> None:
    dup = D.DOUBLE.Dup()
    dup._impl.committed = False
    with pytest.raises(MPIException, match="Commit") as info:
        send_buffer([A, dup])
    assert info.value.Get_error_class() == ERR_TYPE
    dup.Commit()
    assert send_buffer([A, dup]).count == 10


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ([[1, 2, 3], "i"], "not list"),
        ([[1, 2, 3], "i"], "lower-case"),
        (A[::2], "not contiguous"),
        ([A, 11, D.DOUBLE], "need bytes 0 to 88 of a buffer of 80"),
        ([np.zeros(5, "i1"), D.INT], "5 is not a multiple of datatype extent 4"),
        ([A, -1, D.DOUBLE], "negative"),
        ([A, D.INTEGER16], "MPI_INTEGER16"),
        (np.zeros(2, dtype=object), "cannot map 'O'"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_error_messages_name_the_problem(spec: Any, fragment: str) -> None:
    with pytest.raises((MPIException, TypeError, ValueError, KeyError, BufferError)) as info:
        send_buffer(spec)
    assert fragment in str(info.value)


def test_none_and_in_place_are_empty_messages() -> None:
    for spec in ([None, D.INT], [None, 0, D.INT]):
        assert send_buffer(spec).count == 0 and recv_buffer(spec).nbytes == 0
    for spec in (IN_PLACE, [IN_PLACE, 0, D.INT]):
        assert send_buffer(spec).count == 0
        assert error_of(spec, recv_buffer) == ERR_BUFFER


# --- typed views ---------------------------------------------------------------------------


def test_as_ndarray_views_the_memory() -> None:
    a = np.arange(6, dtype="i4")
    view = as_ndarray(recv_buffer([a, (3, 2), D.INT]))
    assert view.dtype == np.int32 and list(view) == [2, 3, 4]
    view[0] = 99
    assert a[2] == 99
    assert not as_ndarray(send_buffer(b"\x01\x02")).flags.writeable


def test_as_ndarray_of_pairs_packed_and_empty() -> None:
    a = np.zeros(2, dtype=np.dtype([("v", "d"), ("i", "i4")], align=True))
    a["v"], a["i"] = [1.5, 2.5], [7, 8]
    pairs = as_ndarray(send_buffer([a.view("u1"), D.DOUBLE_INT]))
    assert list(pairs["value"]) == [1.5, 2.5] and list(pairs["index"]) == [7, 8]
    packed = as_ndarray(send_buffer([bytearray(b"xyz"), D.PACKED]))
    assert packed.dtype == np.uint8 and packed.tobytes() == b"xyz"
    empty = as_ndarray(send_buffer([None, 0, D.DOUBLE]))
    assert empty.shape == (0,) and empty.dtype == np.float64


# --- blocks of the v and w collectives -----------------------------------------------------


def test_zero_count_blocks_ignore_their_displacement() -> None:
    """A block of no data is empty wherever its displacement points, as in C, where the
    displacement of an empty block is never used: with MPI.BOTTOM programs leave it 0
    (far below the absolute addresses of the others), with a buffer it may lie outside."""
    mine = np.array([5], dtype=np.intc)
    address = Get_address(mine)
    blocks, _ = wvector([BOTTOM, [0, 1], [0, address], [D.INT, D.INT]], 2, False)
    assert [bytes(b) for b in blocks] == [b"", mine.tobytes()]
    blocks, _ = wvector([BOTTOM, [1, 0], [address, 0], [D.INT, D.INT]], 2, True)
    assert [b.nbytes for b in blocks] == [4, 0]
    two = np.zeros(2, dtype="i")
    blocks, _ = wvector([two, [0, 1], [10**6, 4], [D.INT, D.INT]], 2, False)
    assert [b.nbytes for b in blocks] == [0, 4]
    blocks, _ = vector([two, [0, 2], [99, 0], D.INT], 2, False)
    assert [b.nbytes for b in blocks] == [0, 8]
    blocks, _ = vector([BOTTOM, [0, 1], [0, address // 4], D.INT], 2, False)
    assert [b.nbytes for b in blocks] == [0, 4]
    with pytest.raises(ValueError, match="displacement 1000000 out of bounds"):
        wvector([two, [1, 1], [10**6, 4], [D.INT, D.INT]], 2, False)


# --- sentinels -----------------------------------------------------------------------------


def test_sentinels() -> None:
    assert repr(BOTTOM) == "MPI.BOTTOM" and repr(IN_PLACE) == "MPI.IN_PLACE"
    assert BottomType() is BOTTOM and InPlaceType() is IN_PLACE
    assert BOTTOM is not IN_PLACE and IN_PLACE is not BUFFER_AUTOMATIC
    assert not BOTTOM and IN_PLACE and BUFFER_AUTOMATIC
    for sentinel in (BOTTOM, IN_PLACE, BUFFER_AUTOMATIC):
        assert pickle.loads(pickle.dumps(sentinel)) is sentinel


# --- Alloc_mem / Free_mem ------------------------------------------------------------------


def test_alloc_mem_gives_writable_zeroed_memory() -> None:
    mem = Alloc_mem(16)
    assert isinstance(mem, buffer) and not mem.readonly
    assert len(mem) == 16 and mem.tobytes() == bytes(16)
    mem[3] = 9
    spec = recv_buffer([mem, 4, D.INT])  # usable as a message buffer
    assert spec.count == 4
    Free_mem(mem)
    assert (mem.address, mem.nbytes, mem.obj) == (0, 0, None)  # released
    with pytest.raises(IndexError):
        mem[0]


def test_alloc_mem_zero_and_info() -> None:
    mem = Alloc_mem(0, INFO_ENV)
    assert len(mem) == 0
    Free_mem(mem)
    Free_mem(Alloc_mem(4, info=INFO_NULL))
    with pytest.raises(MPIException) as info:
        Alloc_mem(4, info="hints")  # type: ignore[arg-type]
    assert info.value.Get_error_class() == ERR_INFO


def test_alloc_mem_errors() -> None:
    with pytest.raises(MPIException) as info:
        Alloc_mem(-1)
    assert info.value.Get_error_class() == ERR_ARG
    with pytest.raises(TypeError):
        Alloc_mem(1.5)  # type: ignore[arg-type]


def test_free_mem_of_foreign_or_freed_memory_is_err_base() -> None:
    mem = Alloc_mem(8)
    for foreign in (bytearray(8), memoryview(bytearray(8)), np.zeros(8), None):
        with pytest.raises(MPIException) as info:
            Free_mem(foreign)
        assert info.value.Get_error_class() == ERR_BASE
    with pytest.raises(MPIException):
        Free_mem(mem[2:])  # not the base of the block
    Free_mem(mem)
    with pytest.raises(MPIException) as info:
        Free_mem(mem)
    assert info.value.Get_error_class() == ERR_BASE


# --- the short paths ------------------------------------------------------------------


def test_common_forms_take_the_short_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole array and ``[array, datatype]`` never reach the general parser (its speed is
    in ``benchmarks/``; here, that the short path is the one taken, and what it gives)."""
    from ipympi.mpi import buffers

    def general(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the general parser was used")

    monkeypatch.setattr(buffers, "message", general)
    monkeypatch.setattr(buffers, "split_items", general)
    a = np.arange(1000.0)
    for parse in (send_buffer, recv_buffer):
        for spec in (a, [a, D.DOUBLE]):
            parsed = parse(spec)
            assert parsed.count == 1000 and parsed.datatype is D.DOUBLE
            assert as_ndarray(parsed).ctypes.data == a.ctypes.data


@pytest.mark.parametrize(
    "spec",
    [
        np.arange(12.0).reshape(3, 4),
        np.arange(5, dtype="i1"),
        np.array(2.5),  # 0-d: the general parser's
        np.ones(3, dtype=bool),
        np.zeros(0),
        [np.arange(6, dtype="i4"), D.INT],
        bytearray(b"abc"),
        b"xyz",
    ],
    ids=lambda v: _stable_id(repr(v)[:40]),
)
def test_send_memory_is_the_memory_of_the_send_spec(spec: Any) -> None:
    mem = send_memory(spec)
    assert mem.format == "B" and mem.ndim == 1
    assert bytes(mem) == bytes(send_buffer(spec).mem)
    if isinstance(spec, np.ndarray) and spec.nbytes:  # no copy
        assert np.frombuffer(mem, dtype=np.uint8).ctypes.data == spec.ctypes.data


def test_send_memory_to_proc_null_looks_at_nothing() -> None:
    assert send_memory(object(), PROC_NULL).nbytes == 0 == send_memory(None, PROC_NULL).nbytes
