"""How each buffer form is read: mpi4py's rules for items, pairs, counts and displacements.

Pure parsing, without processes: the items a form yields, the blocks of the vector and
Alltoallw forms (by their bytes), and the errors of malformed forms. The same forms run
through real calls under both implementations in ``differential/bufspecs.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ipympi.core.constants import PROC_NULL
from ipympi.mpi import datatype as D
from ipympi.mpi.buffers import recv_buffer, send_buffer, split_items
from ipympi.mpi.coll.bufforms import blocks, exchange, vector, wvector

A = np.arange(12, dtype="i")


def elements(views: list[memoryview]) -> list[list[int]]:
    """The int32 elements of each block."""
    return [np.frombuffer(v, dtype="i").tolist() for v in views]


# --- the items of a form ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "items"),
    [
        (A, (A, None, None, None)),
        ([A, D.INT], (A, None, None, D.INT)),
        ([A, "i"], (A, None, None, "i")),
        ([A, 3], (A, 3, None, None)),
        ([A, None], (A, None, None, None)),
        ([A, (3, 1)], (A, 3, 1, None)),
        ([A, [3, 1]], (A, 3, 1, None)),
        ([A, 3, D.INT], (A, 3, None, D.INT)),
        ([A, (3, 1), D.INT], (A, 3, 1, D.INT)),
        ([A, [3, 1], D.INT], (A, 3, 1, D.INT)),
        ([A, 3, 1, D.INT], (A, 3, 1, D.INT)),
        ([A, (1, 2), (0, 1), D.INT], (A, (1, 2), (0, 1), D.INT)),  # 4 items: as they stand
    ],
    ids=repr,
)
def test_items_of_a_message(spec: Any, items: tuple[Any, ...]) -> None:
    assert split_items(spec) == items


def test_vector_forms_read_only_a_tuple_as_the_pair() -> None:
    assert split_items([A, [1, 2]], (tuple,)) == (A, [1, 2], None, None)
    assert split_items([A, (1, 2)], (tuple,)) == (A, 1, 2, None)
    assert split_items([A, [1, 2], D.INT], (tuple,)) == (A, [1, 2], None, D.INT)
    assert split_items([A, ([1], [0]), D.INT], (tuple,)) == (A, [1], [0], D.INT)
    assert split_items([A, (1, 1, 9), (0, 1, 2), D.INT], (tuple,))[1:3] == ((1, 1, 9), (0, 1, 2))


@pytest.mark.parametrize(("spec", "expected"), [([A], "2 to 4"), ([A, 1, 2, 3, 4], "2 to 4")])
def test_item_count_errors(spec: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        split_items(spec)


# --- one message ------------------------------------------------------------------------


def test_count_and_displacement_forms_select_the_same_elements() -> None:
    for spec in ([A, (3, 2), D.INT], [A, [3, 2], D.INT], [A, 3, 2, D.INT], [A, (3, 2)]):
        assert np.frombuffer(send_buffer(spec).mem, "i").tolist() == [2, 3, 4]


def test_a_pair_in_the_four_item_form_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="tuple"):
        send_buffer([A, (3, 2), 0, D.INT])


def test_proc_null_takes_anything() -> None:
    for junk in (object(), [object(), 1, 2, 3, 4, 5], None, b"read-only"):
        assert send_buffer(junk, PROC_NULL).count == 0
        assert recv_buffer(junk, PROC_NULL).nbytes == 0
    with pytest.raises(TypeError):
        send_buffer(object(), 0)


def test_none_needs_a_datatype_and_no_count() -> None:
    with pytest.raises(TypeError):
        send_buffer(None)
    with pytest.raises(KeyError, match="cannot map None to MPI datatype"):
        send_buffer([None, None])
    with pytest.raises(ValueError, match="buffer is None but count is 3"):
        send_buffer([None, 3, D.INT])


def test_error_texts_are_mpi4pys() -> None:
    with pytest.raises(ValueError, match=r"displacement 13 out of bounds, number of datatype"):
        send_buffer([A, (0, 13), D.INT])
    with pytest.raises(ValueError, match=r"length 3 is not a multiple of datatype extent 4 \("):
        send_buffer([np.zeros(3, "b"), D.INT])
    with pytest.raises(KeyError, match="cannot map 'zz' to MPI datatype"):
        send_buffer([A, "zz"])


# --- vector forms ---------------------------------------------------------------------------

COUNTS, DISPLS = (1, 1, 9), (0, 1, 2)
V_BLOCKS = [[0], [1], [2, 3, 4, 5, 6, 7, 8, 9, 10]]


@pytest.mark.parametrize(
    "spec",
    [
        [A, COUNTS, DISPLS, D.INT],  # the form: tuples in the four-item form
        [A, list(COUNTS), list(DISPLS), D.INT],
        [A, (COUNTS, DISPLS), D.INT],
        [A, (list(COUNTS), list(DISPLS)), "i"],
        [A, (COUNTS, DISPLS)],
        [A, np.array(COUNTS), np.array(DISPLS), D.INT],
        [A, list(COUNTS), None, D.INT],
        [A, list(COUNTS), D.INT],
        [A, list(COUNTS)],
    ],
    ids=repr,
)
def test_vector_forms(spec: Any) -> None:
    for writable in (False, True):
        views, _ = vector(spec, 3, writable)
        assert elements(views) == V_BLOCKS


def test_vector_counts_left_out_are_dealt_out_unevenly() -> None:
    for spec in (A[:11], [A[:11], D.INT], [A[:11], None, None, D.INT]):
        views, _ = vector(spec, 3, False)
        assert elements(views) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    views, _ = vector([None, D.INT], 3, True)
    assert [v.nbytes for v in views] == [0, 0, 0]


def test_vector_scalar_counts_and_strides() -> None:
    assert elements(vector([A, 2], 3, False)[0]) == [[0, 1], [2, 3], [4, 5]]
    assert elements(vector([A, 2, 3, D.INT], 3, False)[0]) == [[0, 1], [3, 4], [6, 7]]
    assert elements(vector([A, (2, 4)], 3, False)[0]) == [[0, 1], [4, 5], [8, 9]]
    assert elements(vector([A, np.int64(1), np.int32(5), D.INT], 2, False)[0]) == [[0], [5]]


@pytest.mark.parametrize(
    ("spec", "error", "text"),
    [
        ([A, [1, 1], D.INT], ValueError, "expecting 3 items, got 2"),
        ([A, (COUNTS, DISPLS, 0), D.INT], ValueError, "too many values"),
        ([A, [1.0, 1, 1], D.INT], TypeError, "float"),
        ([A], ValueError, "expecting 2 to 4 items"),
        ([None, [0, 0, 0]], KeyError, "cannot map None to MPI datatype"),
        ([A, 13, D.INT], ValueError, "need bytes"),
    ],
    ids=repr,
)
def test_vector_errors(spec: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        vector(spec, 3, False)


def test_blocks_read_pairs_like_one_message() -> None:
    _, views, _ = blocks([A, (2, 1), D.INT], 3, False)
    assert elements(views) == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError):
        blocks([A, (2, 1), 0, D.INT], 3, False)


# --- Alltoallw --------------------------------------------------------------------------------


def test_alltoallw_forms() -> None:
    types = [D.INT, D.INT, D.INT]
    counts, displs = [1, 2, 1], [0, 4, 16]
    for spec in (
        [A, counts, displs, types],
        [A, (counts, displs), types],
        [A, tuple(counts), tuple(displs), tuple(types)],
    ):
        assert elements(wvector(spec, 3, False)[0]) == [[0], [1, 2], [4]]
    # [buf, datatypes]: one element of each, every one at byte 0
    assert elements(wvector([A, types], 3, False)[0]) == [[0], [0], [0]]


@pytest.mark.parametrize(
    ("spec", "error", "text"),
    [
        ([None, [D.INT] * 3], ValueError, "BOTTOM requires counts"),
        ([None, [1] * 3, None, [D.INT] * 3], ValueError, "BOTTOM requires displs"),
        ([A, [D.INT] * 4], ValueError, "expecting 3 items, got 4"),
        ([A, ["i"] * 3], TypeError, "Datatype"),
        ([A, D.INT], TypeError, "len"),
        ([A, [1] * 3, [0] * 2, [D.INT] * 3], ValueError, "expecting 3 items, got 2"),
        ([A], ValueError, "expecting 2 to 4 items"),
        (A, ValueError, "expecting 2 to 4 items"),  # a bare buffer is a sequence of items
    ],
    ids=repr,
)
def test_alltoallw_errors(spec: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        wvector(spec, 3, False)


# --- the three alltoall kinds through one parser ------------------------------------------------


def test_exchange_kinds() -> None:
    out = np.zeros(12, "i")
    sends, recvs, _ = exchange("Alltoall", "Alltoall", A, out, 3, 3, True)
    assert elements(sends) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [v.nbytes for v in recvs] == [16] * 3
    sends, _, _ = exchange("Alltoallv", "Alltoallv", [A, COUNTS, DISPLS, D.INT], out, 3, 3, True)
    assert elements(sends) == V_BLOCKS
    sends, _, _ = exchange("X", "Alltoallv", None, [A, COUNTS, DISPLS, D.INT], 3, 3, True)
    assert elements(sends) == V_BLOCKS  # in place: a copy of the receive blocks
    sends, recvs, _ = exchange("N", "Alltoall", A[:4], out[:8], 2, 4, False)  # neighbourhood sizes
    assert (len(sends), len(recvs)) == (2, 4) and sends[0].nbytes == recvs[0].nbytes
    with pytest.raises(Exception, match="blocks of 8 bytes are sent"):
        exchange("Alltoall", "Alltoall", A[:6], out, 3, 3, True)


def test_exchange_across_an_intercommunicator_takes_blocks_of_two_sizes() -> None:
    out = np.zeros(6, "i")
    sends, recvs, _ = exchange("Alltoall", "Alltoall", A[:4], out, 2, 2, False, inter=True)
    assert [v.nbytes for v in sends] == [8, 8] and [v.nbytes for v in recvs] == [12, 12]


def test_none_is_no_collective_buffer() -> None:
    for parse in (lambda: blocks(None, 2, True), lambda: vector(None, 2, False)):
        with pytest.raises(TypeError, match="NoneType"):
            parse()
