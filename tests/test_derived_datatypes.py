"""Derived datatypes: every constructor's typemap, bounds, envelope and contents.

Each case gives a datatype as a small spec (see :func:`build`) with hand-computed
expectations: size, bounds, the typemap as (byte offset, byte size) entries in order,
and the classic (MPI-3.1) envelope. The same specs run under mpi4py on MPICH in a
subprocess (:func:`reference`), when mpi4py is installed, and the results are compared;
MPICH reports envelopes in large-count form, so envelopes compare by their totals.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ipympi.core import constants as C
from ipympi.core.errors import ERR_ARG, ERR_COUNT, ERR_RANK, ERR_TYPE
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi import datatype as D
from ipympi.mpi.buffers import recv_buffer, send_buffer

ROOT = Path(__file__).resolve().parent.parent
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None

# --- Specs ---------------------------------------------------------------------------------

Spec = Any
_METHODS = {
    "contiguous": "Create_contiguous", "vector": "Create_vector", "hvector": "Create_hvector",
    "indexed": "Create_indexed", "hindexed": "Create_hindexed",
    "indexed_block": "Create_indexed_block", "hindexed_block": "Create_hindexed_block",
    "resized": "Create_resized", "dup": "Dup",
}  # fmt: skip


def build(mpi: Any, spec: Spec) -> Any:
    """The datatype a spec describes, built with module ``mpi`` (ipympi's or mpi4py's).

    A spec is a predefined name (``"DOUBLE"``) or a list ``[kind, base, *args]``;
    ``["struct", blocklengths, displacements, [specs]]`` has no base. Orders are ``"C"``
    or ``"F"``, distributions ``"BLOCK"``/``"CYCLIC"``/``"NONE"``, ``"DFLT"`` the default
    distribution argument.
    """
    if isinstance(spec, str):
        return getattr(mpi, spec)
    kind, *args = spec
    if kind == "struct":
        blocklengths, displacements, types = args
        return mpi.Datatype.Create_struct(
            blocklengths, displacements, [build(mpi, t) for t in types]
        )
    base, rest = build(mpi, args[0]), args[1:]
    if kind == "subarray":
        sizes, subsizes, starts, order = rest
        return base.Create_subarray(sizes, subsizes, starts, order=_order(mpi, order))
    if kind == "darray":
        size, rank, gsizes, distribs, dargs, psizes, order = rest
        distribs = [getattr(mpi, f"DISTRIBUTE_{d}") for d in distribs]
        dargs = [mpi.DISTRIBUTE_DFLT_DARG if a == "DFLT" else a for a in dargs]
        order = _order(mpi, order)
        return base.Create_darray(size, rank, gsizes, distribs, dargs, psizes, order=order)
    return getattr(base, _METHODS[kind])(*rest)


def _order(mpi: Any, order: str) -> int:
    return int(mpi.ORDER_C if order == "C" else mpi.ORDER_F)


def describe(mpi: Any, datatype: Any) -> dict[str, Any]:
    """The facts compared between implementations."""
    _base, combiner, params = datatype.decode()
    names = {
        key: [t.Get_name() if t.is_named else "derived" for t in value]
        if key == "datatypes"
        else value
        for key, value in params.items()
    }
    ni, na, nc, nd, comb = datatype.Get_envelope()
    return {
        "size": datatype.Get_size(),
        "extent": list(datatype.Get_extent()),
        "true_extent": list(datatype.Get_true_extent()),
        "combiner": combiner,
        "params": names,
        "envelope": [ni + na + nc, nd, comb],
    }


def pack_layout(datatype: Any, count: int) -> tuple[int, int, int]:
    """(displacement in extents, origin byte, buffer length) for packing ``count``
    elements from a buffer that holds all their data."""
    _lb, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    spread = (count - 1) * extent
    low = true_lb + min(spread, 0)
    high = true_lb + true_extent + max(spread, 0)
    displ = -(-max(0, -low) // extent)
    origin = displ * extent
    return displ, origin, origin + max(high, count * extent) + 8


def pattern(nbytes: int) -> np.ndarray:
    """Deterministic bytes to pack."""
    return (np.arange(nbytes, dtype=np.int64) * 7 % 251).astype(np.uint8)


# (id, spec, size, (lb, extent), (true_lb, true_extent), [(offset, size), ...], envelope)
CASES: list[tuple[str, Spec, int, tuple[int, int], tuple[int, int], list[tuple[int, int]], tuple[int, ...]]] = [  # noqa: E501
    ("contiguous", ["contiguous", "DOUBLE", 3], 24, (0, 24), (0, 24),
     [(0, 8), (8, 8), (16, 8)], (1, 0, 0, 1, C.COMBINER_CONTIGUOUS)),
    ("vector", ["vector", "DOUBLE", 3, 1, 2], 24, (0, 40), (0, 40),
     [(0, 8), (16, 8), (32, 8)], (3, 0, 0, 1, C.COMBINER_VECTOR)),
    ("vector_negative_stride", ["vector", "INT", 3, 2, -3], 24, (-24, 32), (-24, 32),
     [(0, 4), (4, 4), (-12, 4), (-8, 4), (-24, 4), (-20, 4)], (3, 0, 0, 1, C.COMBINER_VECTOR)),
    ("hvector", ["hvector", "DOUBLE", 3, 2, 20], 48, (0, 56), (0, 56),
     [(0, 8), (8, 8), (20, 8), (28, 8), (40, 8), (48, 8)], (2, 1, 0, 1, C.COMBINER_HVECTOR)),
    ("hvector_overlapping", ["hvector", "INT", 4, 1, -4], 16, (-12, 16), (-12, 16),
     [(0, 4), (-4, 4), (-8, 4), (-12, 4)], (2, 1, 0, 1, C.COMBINER_HVECTOR)),
    ("indexed", ["indexed", "INT", [2, 0, 3], [5, 1, 0]], 20, (0, 28), (0, 28),
     [(20, 4), (24, 4), (0, 4), (4, 4), (8, 4)], (7, 0, 0, 1, C.COMBINER_INDEXED)),
    ("hindexed", ["hindexed", "SHORT", [1, 2], [7, -4]], 6, (-4, 13), (-4, 13),
     [(7, 2), (-4, 2), (-2, 2)], (3, 2, 0, 1, C.COMBINER_HINDEXED)),
    ("indexed_block", ["indexed_block", "FLOAT", 2, [4, 0, 9]], 24, (0, 44), (0, 44),
     [(16, 4), (20, 4), (0, 4), (4, 4), (36, 4), (40, 4)],
     (5, 0, 0, 1, C.COMBINER_INDEXED_BLOCK)),
    ("hindexed_block", ["hindexed_block", "DOUBLE", 1, [16, 0, 40]], 24, (0, 48), (0, 48),
     [(16, 8), (0, 8), (40, 8)], (2, 3, 0, 1, C.COMBINER_HINDEXED_BLOCK)),
    ("struct", ["struct", [1, 2, 1], [0, 8, 24], ["DOUBLE", "INT", "CHAR"]], 17, (0, 32),
     (0, 25), [(0, 8), (8, 4), (12, 4), (24, 1)], (4, 3, 0, 3, C.COMBINER_STRUCT)),
    ("struct_of_vector",
     ["struct", [2, 1], [0, 48], [["vector", "DOUBLE", 2, 1, 2], "SHORT"]], 34, (0, 56),
     (0, 50), [(0, 8), (16, 8), (24, 8), (40, 8), (48, 2)], (3, 2, 0, 2, C.COMBINER_STRUCT)),
    ("struct_padding", ["struct", [1, 1], [0, 8], ["DOUBLE", "CHAR"]], 9, (0, 16), (0, 9),
     [(0, 8), (8, 1)], (3, 2, 0, 2, C.COMBINER_STRUCT)),
    ("struct_one_type_no_padding", ["struct", [1, 1], [0, 9], ["DOUBLE", "DOUBLE"]], 16,
     (0, 17), (0, 17), [(0, 8), (9, 8)], (3, 2, 0, 2, C.COMBINER_STRUCT)),
    ("subarray_c", ["subarray", "DOUBLE", [4, 5], [2, 3], [1, 1], "C"], 48, (0, 160),
     (48, 64), [(8 * i, 8) for i in (6, 7, 8, 11, 12, 13)], (8, 0, 0, 1, C.COMBINER_SUBARRAY)),
    ("subarray_fortran", ["subarray", "DOUBLE", [4, 5], [2, 3], [1, 1], "F"], 48, (0, 160),
     (40, 80), [(8 * i, 8) for i in (5, 6, 9, 10, 13, 14)], (8, 0, 0, 1, C.COMBINER_SUBARRAY)),
    ("subarray_3d", ["subarray", "INT", [3, 4, 5], [2, 2, 3], [1, 0, 2], "C"], 48, (0, 240),
     (88, 112), [(4 * i, 4) for i in (22, 23, 24, 27, 28, 29, 42, 43, 44, 47, 48, 49)],
     (11, 0, 0, 1, C.COMBINER_SUBARRAY)),
    ("darray_block_cyclic",
     ["darray", "DOUBLE", 4, 1, [8, 8], ["BLOCK", "CYCLIC"], ["DFLT", 2], [2, 2], "C"], 128,
     (0, 512), (16, 240), [(8 * (r * 8 + c), 8) for r in range(4) for c in (2, 3, 6, 7)],
     (12, 0, 0, 1, C.COMBINER_DARRAY)),
    ("darray_fortran",
     ["darray", "INT", 6, 4, [7, 9], ["CYCLIC", "BLOCK"], [2, "DFLT"], [3, 2], "F"], 40,
     (0, 252), (16, 120), [(4 * (i + 7 * j), 4) for j in range(5) for i in (4, 5)],
     (12, 0, 0, 1, C.COMBINER_DARRAY)),
    ("darray_none",
     ["darray", "INT", 2, 1, [3, 4], ["NONE", "BLOCK"], ["DFLT", "DFLT"], [1, 2], "C"], 24,
     (0, 48), (8, 40), [(4 * (r * 4 + c), 4) for r in range(3) for c in (2, 3)],
     (12, 0, 0, 1, C.COMBINER_DARRAY)),
    ("resized", ["resized", ["vector", "DOUBLE", 2, 1, 3], -8, 48], 16, (-8, 48), (0, 32),
     [(0, 8), (24, 8)], (0, 2, 0, 1, C.COMBINER_RESIZED)),
    ("contiguous_of_resized", ["contiguous", ["resized", "DOUBLE", -8, 24], 3], 24, (-8, 72),
     (0, 56), [(0, 8), (24, 8), (48, 8)], (1, 0, 0, 1, C.COMBINER_CONTIGUOUS)),
    ("vector_of_struct",
     ["vector", ["struct", [1, 1], [0, 8], ["DOUBLE", "CHAR"]], 3, 1, 2], 27, (0, 80),
     (0, 73), [(0, 8), (8, 1), (32, 8), (40, 1), (64, 8), (72, 1)],
     (3, 0, 0, 1, C.COMBINER_VECTOR)),
    ("dup", ["dup", ["vector", "DOUBLE", 2, 1, 3]], 16, (0, 32), (0, 32), [(0, 8), (24, 8)],
     (0, 0, 0, 1, C.COMBINER_DUP)),
    ("pairs", ["contiguous", "DOUBLE_INT", 2], 24, (0, 32), (0, 28),
     [(0, 8), (8, 4), (16, 8), (24, 4)], (1, 0, 0, 1, C.COMBINER_CONTIGUOUS)),
    ("empty", ["contiguous", "DOUBLE", 0], 0, (0, 0), (0, 0), [],
     (1, 0, 0, 1, C.COMBINER_CONTIGUOUS)),
]  # fmt: skip
CASE_IDS = [case[0] for case in CASES]
SPECS = {case[0]: case[1] for case in CASES}


def committed(spec: Spec) -> D.Datatype:
    return build(IPYMPI, spec).Commit()


def gathered(datatype: D.Datatype, count: int = 2) -> tuple[bytes, bytes]:
    """(bytes gathered by a send spec, bytes expected from the typemap)."""
    displ, _origin, nbytes = pack_layout(datatype, count)
    data = pattern(nbytes)
    spec = send_buffer([data, (count, displ), datatype])
    return bytes(spec.mem), data.tobytes()


# --- Typemaps ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "spec", "size", "extent", "true", "typemap", "env"), CASES,
                         ids=CASE_IDS)  # fmt: skip
def test_bounds_and_envelope(
    name: str, spec: Spec, size: int, extent: tuple, true: tuple, typemap: list, env: tuple
) -> None:
    datatype = build(IPYMPI, spec)
    assert datatype.Get_size() == datatype.size == size
    assert datatype.Get_extent() == extent
    assert (datatype.lb, datatype.extent, datatype.ub) == (extent[0], extent[1], sum(extent))
    assert datatype.Get_true_extent() == true
    assert (datatype.true_lb, datatype.true_extent) == true
    assert datatype.true_ub == sum(true)
    assert datatype.Get_envelope() == datatype.envelope == env
    assert datatype.combiner == env[-1]
    assert not datatype.is_named and not datatype.is_predefined
    assert datatype.Get_name() == "" and not datatype._impl.committed
    ints, addrs, counts, types = datatype.Get_contents()
    assert (len(ints), len(addrs), len(counts), len(types)) == env[:4]


@pytest.mark.parametrize(("name", "spec", "size", "extent", "true", "typemap", "env"), CASES,
                         ids=CASE_IDS)  # fmt: skip
def test_typemap_order_in_packed_form(
    name: str, spec: Spec, size: int, extent: tuple, true: tuple, typemap: list, env: tuple
) -> None:
    datatype = committed(spec)
    if not typemap:
        assert datatype._packed_size == 0
        return
    count = 2
    displ, origin, nbytes = pack_layout(datatype, count)
    data = pattern(nbytes)
    packed = bytes(send_buffer([data, (count, displ), datatype]).mem)
    expected = b""
    for element in range(count):
        start = origin + element * extent[1]
        for offset, length in typemap:
            expected += data[start + offset : start + offset + length].tobytes()
    if name == "pairs":
        # Pair types travel as their C structs: the padding after each int comes along.
        assert datatype._impl.layout.raw
        expected = data[origin : origin + count * extent[1]].tobytes()
    assert packed == expected


def test_packed_size_is_size_except_pair_padding() -> None:
    for name, spec, size, *_ in CASES:
        datatype = build(IPYMPI, spec)
        expected = size + (8 if name == "pairs" else 0)
        assert datatype._packed_size == expected, name
    assert D.DOUBLE_INT._packed_size == 16 and D.INT._packed_size == 4


# Create_struct pads the extent to the largest alignment unless all parts are of one type
# (MPICH counts all integers of a size as one type, and a Dup as its original).
R9 = ["resized", "DOUBLE", 0, 9]
PADDING = [
    ("resized_then_char", ["struct", [1, 1], [0, 9], [R9, "CHAR"]], (0, 16)),
    ("resized_alone", ["struct", [1], [0], [["resized", "DOUBLE", 0, 4]]], (0, 4)),
    ("int_and_pair", ["struct", [1, 1], [0, 5], ["INT", "INT_INT"]], (0, 16)),
    ("two_pairs", ["struct", [1, 1], [0, 20], ["DOUBLE_INT", "DOUBLE_INT"]], (0, 36)),
    ("int_unsigned", ["struct", [1, 1], [0, 5], ["INT", "UNSIGNED"]], (0, 9)),
    ("int_float", ["struct", [1, 1], [0, 5], ["INT", "FLOAT"]], (0, 12)),
    ("wchar_int", ["struct", [1, 1], [0, 5], ["WCHAR", "INT"]], (0, 9)),
    ("double_dup", ["struct", [1, 1], [0, 9], ["DOUBLE", ["dup", "DOUBLE"]]], (0, 17)),
    ("int_int_vector", ["struct", [1, 1], [0, 5], ["INT", ["vector", "INT", 2, 1, 2]]], (0, 20)),
    ("zero_size_part", ["struct", [1, 1], [0, 100], ["DOUBLE", ["contiguous", "DOUBLE", 0]]],
     (0, 104)),
    ("empty_block", ["struct", [0, 1], [0, 3], ["DOUBLE", "CHAR"]], (3, 1)),
    ("long_double", ["struct", [1, 1], [0, 16], ["LONG_DOUBLE", "CHAR"]], (0, 32)),
    ("short_int_pair", ["struct", [1, 1], [0, 8], ["SHORT_INT", "CHAR"]], (0, 12)),
    ("negative", ["struct", [1, 1], [0, -3], [["resized", "DOUBLE", 2, 9], "CHAR"]], (-3, 16)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "spec", "extent"), PADDING, ids=[p[0] for p in PADDING])
def test_struct_padding(name: str, spec: Spec, extent: tuple[int, int]) -> None:
    assert build(IPYMPI, spec).Get_extent() == extent


# --- Rules of MPI-1.1 §3.12 ----------------------------------------------------------------


def same_layout(a: D.Datatype, b: D.Datatype) -> bool:
    a.Commit()
    b.Commit()
    facts = lambda t: (t.size, t.Get_extent(), t.Get_true_extent())  # noqa: E731
    return facts(a) == facts(b) and gathered(a) == gathered(b)


def test_d4_equivalent_constructors() -> None:
    t = D.DOUBLE
    assert same_layout(t.Create_contiguous(4), t.Create_vector(4, 1, 1))
    assert same_layout(t.Create_contiguous(4), t.Create_vector(1, 4, 7))
    assert same_layout(t.Create_vector(3, 2, 5), t.Create_indexed([2] * 3, [0, 5, 10]))
    assert same_layout(t.Create_hvector(3, 2, 44), t.Create_hindexed([2] * 3, [0, 44, 88]))
    assert same_layout(
        t.Create_hindexed([1, 3], [8, 40]), D.Datatype.Create_struct([1, 3], [8, 40], [t, t])
    )
    assert same_layout(t.Create_indexed_block(2, [3, 0]), t.Create_indexed([2, 2], [3, 0]))


def test_d2_struct_extent_is_padded_to_alignment() -> None:
    t = D.Datatype.Create_struct([1, 1], [0, 8], [D.DOUBLE, D.CHAR])
    assert t.Get_extent() == (0, 16) and t.size == 9


def test_d5_size_counts_repeated_entries() -> None:
    overlapping = D.DOUBLE.Create_vector(2, 2, 1)
    assert overlapping.size == 32 and overlapping.extent == 24
    for _, spec, *_ in CASES:
        datatype = build(IPYMPI, spec)
        if name_has_no_overlap(spec):
            assert datatype.size <= max(datatype.extent, datatype.true_extent)


def name_has_no_overlap(spec: Spec) -> bool:
    return "hvector" not in json.dumps(spec)


def test_d6_lb_ub_markers() -> None:
    marked = D.Datatype.Create_struct([1, 1, 1], [-3, 0, 6], [D.LB, D.INT, D.UB])
    assert marked.Get_extent() == (-3, 9) and marked.size == 4
    assert marked.Get_true_extent() == (0, 4)
    twice = marked.Create_contiguous(2).Commit()
    assert twice.Get_extent() == (-3, 18) and twice.size == 8
    packed, data = gathered(twice, 1)
    origin = pack_layout(twice, 1)[1]
    assert packed == data[origin : origin + 4] + data[origin + 9 : origin + 13]
    with pytest.raises(MPIException) as info:
        D.LB.Create_contiguous(2)
    assert info.value.Get_error_class() == ERR_TYPE


def test_d7_commit_is_needed_for_communication_not_construction() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 2)
    nested = vector.Create_contiguous(2)  # built from an uncommitted type
    for datatype in (vector, nested):
        with pytest.raises(MPIException, match="Commit") as info:
            send_buffer([np.zeros(8), 1, datatype])
        assert info.value.Get_error_class() == ERR_TYPE
    assert nested.Commit() is nested
    assert send_buffer([np.arange(8.0), 1, nested]).count == 1


def test_d8_free_leaves_built_types_alone() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 2)
    outer = vector.Create_contiguous(2).Commit()
    vector.Free()
    assert vector == D.DATATYPE_NULL
    assert outer.size == 32 and gathered(outer)[0]
    inner = outer.Get_contents()[3][0]
    assert inner.size == 16 and inner.combiner == C.COMBINER_VECTOR
    with pytest.raises(MPIException):
        vector.Free()
    outer.Free()
    assert not outer


def test_d9_signatures_match_not_layouts() -> None:
    pair = D.REAL.Create_contiguous(2).Commit()
    a = np.arange(4, dtype=np.float32)
    assert bytes(send_buffer([a, 2, pair]).mem) == bytes(send_buffer([a, 4, D.REAL]).mem)


def test_d10_overlapping_send_type() -> None:
    overlapping = D.INT.Create_vector(3, 2, 1).Commit()
    a = np.arange(4, dtype=np.int32)
    packed = np.frombuffer(send_buffer([a, 1, overlapping]).mem, dtype=np.int32)
    assert packed.tolist() == [0, 1, 1, 2, 2, 3]


def test_d11_get_elements_and_count() -> None:
    type2 = D.REAL.Create_contiguous(2).Commit()
    size = type2._packed_size
    assert size == 8
    assert (8 // size, type2._elements_in(8)) == (1, 2)
    assert 12 % size and type2._elements_in(12) == 3
    assert type2._elements_in(10) == C.UNDEFINED
    mixed = D.Datatype.Create_struct([1, 2], [0, 8], [D.DOUBLE, D.SHORT]).Commit()
    assert [mixed._elements_in(n) for n in (0, 8, 10, 12, 20, 24)] == [0, 1, 2, 3, 4, 6]
    assert mixed._elements_in(9) == mixed._elements_in(26) == C.UNDEFINED
    assert [mixed._bytes_of_elements(n) for n in (0, 1, 2, 3, 4)] == [0, 8, 10, 12, 20]
    assert D.DOUBLE_INT._elements_in(16) == 2 and D.DOUBLE_INT._elements_in(8) == 1
    assert D.DOUBLE_INT._elements_in(12) == 2 and D.DOUBLE_INT._elements_in(4) == C.UNDEFINED
    assert D.DOUBLE_INT._bytes_of_elements(3) == 24
    empty = D.INT.Create_contiguous(0)
    assert empty._elements_in(0) == 0 and empty._elements_in(4) == C.UNDEFINED


def test_d12_receive_leaves_padding_untouched() -> None:
    struct = D.Datatype.Create_struct([1, 1], [0, 8], [D.DOUBLE, D.CHAR]).Commit()
    target = np.full(32, 0xAA, dtype=np.uint8)
    spec = recv_buffer([target, 2, struct])
    spec.mem[:] = bytes(range(18))
    spec.unpack(spec.nbytes)
    assert target[:9].tolist() == list(range(9))
    assert target[16:25].tolist() == list(range(9, 18))
    assert (target[9:16] == 0xAA).all() and (target[25:] == 0xAA).all()


def test_d17_pair_types_behave_as_structs() -> None:
    built = D.Datatype.Create_struct([1, 1], [0, 8], [D.DOUBLE, D.INT])
    assert (built.size, built.Get_extent()) == (D.DOUBLE_INT.size, D.DOUBLE_INT.Get_extent())
    assert D.INT_INT.size == D.INT.Create_contiguous(2).size


# --- Decoding ------------------------------------------------------------------------------


def test_contents_and_decode_of_every_constructor() -> None:
    t = D.DOUBLE
    cases = [
        (t.Create_contiguous(3), ([3], [], [t]), {"count": 3}),
        (t.Create_vector(2, 1, 3), ([2, 1, 3], [], [t]),
         {"count": 2, "blocklength": 1, "stride": 3}),
        (t.Create_hvector(2, 1, 24), ([2, 1], [24], [t]),
         {"count": 2, "blocklength": 1, "stride": 24}),
        (t.Create_indexed([1, 2], [0, 4]), ([2, 1, 2, 0, 4], [], [t]),
         {"blocklengths": [1, 2], "displacements": [0, 4]}),
        (t.Create_hindexed([1, 2], [0, 32]), ([2, 1, 2], [0, 32], [t]),
         {"blocklengths": [1, 2], "displacements": [0, 32]}),
        (t.Create_indexed_block(2, [0, 5]), ([2, 2, 0, 5], [], [t]),
         {"blocklength": 2, "displacements": [0, 5]}),
        (t.Create_hindexed_block(1, [0, 32]), ([2, 1], [0, 32], [t]),
         {"blocklength": 1, "displacements": [0, 32]}),
        (t.Create_subarray([4, 5], [2, 3], [1, 1]), ([2, 4, 5, 2, 3, 1, 1, C.ORDER_C], [], [t]),
         {"sizes": [4, 5], "subsizes": [2, 3], "starts": [1, 1], "order": C.ORDER_C}),
        (t.Create_darray(4, 1, [8, 8], [C.DISTRIBUTE_BLOCK, C.DISTRIBUTE_CYCLIC],
                         [C.DISTRIBUTE_DFLT_DARG, 2], [2, 2]),
         ([4, 1, 2, 8, 8, C.DISTRIBUTE_BLOCK, C.DISTRIBUTE_CYCLIC, C.DISTRIBUTE_DFLT_DARG, 2,
           2, 2, C.ORDER_C], [], [t]),
         {"size": 4, "rank": 1, "gsizes": [8, 8],
          "distribs": [C.DISTRIBUTE_BLOCK, C.DISTRIBUTE_CYCLIC],
          "dargs": [C.DISTRIBUTE_DFLT_DARG, 2], "psizes": [2, 2], "order": C.ORDER_C}),
        (t.Create_resized(-8, 48), ([], [-8, 48], [t]), {"lb": -8, "extent": 48}),
        (t.Dup(), ([], [], [t]), {}),
    ]  # fmt: skip
    for datatype, (ints, addrs, types), params in cases:
        assert datatype.Get_contents() == (ints, addrs, [], types)
        assert datatype.contents == (ints, addrs, [], types)
        assert datatype.Get_contents()[3][0] is t  # predefined types come back as themselves
        base, combiner, decoded = datatype.decode()
        assert base is t and decoded == params
        assert (
            combiner
            == {v: k[9:] for k, v in vars(C).items() if k.startswith("COMBINER_")}[
                datatype.combiner
            ]
        )


def test_decode_struct_and_nested_and_named() -> None:
    inner = D.INT.Create_vector(2, 1, 2)
    struct = D.Datatype.Create_struct([1, 2], [0, 8], [D.DOUBLE, inner])
    base, combiner, params = struct.decode()
    assert combiner == "STRUCT" and base == D.DATATYPE_NULL and base is not D.DATATYPE_NULL
    assert params["blocklengths"] == [1, 2] and params["displacements"] == [0, 8]
    assert params["datatypes"][0] is D.DOUBLE and params["datatypes"][1] == inner
    outer = inner.Create_contiguous(2)
    assert outer.decode()[0] == inner
    assert D.DOUBLE.decode() == (D.DOUBLE, "NAMED", {})
    assert D.DOUBLE.Get_envelope() == (0, 0, 0, 0, C.COMBINER_NAMED)
    with pytest.raises(MPIException) as info:
        D.DOUBLE.Get_contents()
    assert info.value.Get_error_class() == ERR_TYPE


def test_dup_of_derived_and_names() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 2).Commit()
    vector.Set_name("my vector")
    dup = vector.Dup()
    assert dup.Get_name() == "" and vector.name == "my vector"
    assert dup._impl.committed and dup.size == 16 and dup != vector
    assert dup.decode() == (vector, "DUP", {})
    assert "size=16" in repr(dup)


# --- Errors --------------------------------------------------------------------------------


class _Namespace:
    """ipympi's MPI names for the error cases, without initializing ``ipympi.MPI``."""

    Exception = MPIException
    COMM_SELF = None  # Pack ignores its communicator

    def __getattr__(self, name: str) -> Any:
        for module in (D, C):
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(name)


IPYMPI = _Namespace()

# (id, call taking an MPI module, error class); also checked against MPICH.
ERRORS = [
    ("contiguous_negative", lambda M: M.DOUBLE.Create_contiguous(-1), ERR_COUNT),
    ("vector_negative", lambda M: M.DOUBLE.Create_vector(-1, 1, 1), ERR_COUNT),
    ("vector_negative_block", lambda M: M.DOUBLE.Create_vector(2, -1, 1), ERR_COUNT),
    ("hvector_negative_block", lambda M: M.DOUBLE.Create_hvector(2, -1, 1), ERR_COUNT),
    ("indexed_negative_block", lambda M: M.DOUBLE.Create_indexed([1, -1], [0, 2]), ERR_COUNT),
    ("indexed_block_negative", lambda M: M.DOUBLE.Create_indexed_block(-1, [0]), ERR_COUNT),
    ("hindexed_block_negative", lambda M: M.DOUBLE.Create_hindexed_block(-1, [0]), ERR_COUNT),
    ("struct_negative", lambda M: M.Datatype.Create_struct([-1], [0], [M.DOUBLE]), ERR_COUNT),
    ("struct_null", lambda M: M.Datatype.Create_struct([1], [0], [M.DATATYPE_NULL]), ERR_TYPE),
    ("null_base", lambda M: M.DATATYPE_NULL.Create_contiguous(1), ERR_TYPE),
    ("free_predefined", lambda M: M.DOUBLE.Free(), ERR_TYPE),
    ("contents_of_named", lambda M: M.DOUBLE.Get_contents(), ERR_TYPE),
    ("subarray_order", lambda M: M.DOUBLE.Create_subarray([4], [2], [0], order=3), ERR_ARG),
    ("darray_rank", lambda M: M.DOUBLE.Create_darray(
        4, 4, [8], [M.DISTRIBUTE_BLOCK], [M.DISTRIBUTE_DFLT_DARG], [4]), ERR_RANK),
    ("darray_small_blocks", lambda M: M.DOUBLE.Create_darray(
        4, 0, [8], [M.DISTRIBUTE_BLOCK], [1], [4]), ERR_ARG),
    ("pack_size_negative", lambda M: M.DOUBLE.Pack_size(-1, M.COMM_SELF), ERR_COUNT),
    ("pack_size_uncommitted", lambda M: M.DOUBLE.Create_vector(2, 1, 2).Pack_size(
        1, M.COMM_SELF), ERR_TYPE),
    ("pack_uncommitted", lambda M: M.DOUBLE.Create_contiguous(2).Pack(
        np.zeros(2), bytearray(16), 0, M.COMM_SELF), ERR_TYPE),
]  # fmt: skip
# Errors MPICH does not check (or not this way): the standard makes them erroneous.
ERRORS_LOCAL = [
    ("struct_not_a_type", lambda M: M.Datatype.Create_struct([1], [0], ["i"]), ERR_TYPE),
    ("count_not_int", lambda M: M.DOUBLE.Create_contiguous(2.5), ERR_ARG),
    ("displacements_not_ints", lambda M: M.DOUBLE.Create_indexed([1], "a"), ERR_ARG),
    ("subarray_too_big", lambda M: M.DOUBLE.Create_subarray([4], [5], [0]), ERR_ARG),
    ("subarray_start", lambda M: M.DOUBLE.Create_subarray([4], [2], [3]), ERR_ARG),
    ("subarray_negative_start", lambda M: M.DOUBLE.Create_subarray([4], [2], [-1]), ERR_ARG),
    ("subarray_no_dims", lambda M: M.DOUBLE.Create_subarray([], [], []), ERR_ARG),
    ("darray_psizes", lambda M: M.DOUBLE.Create_darray(
        4, 0, [8], [M.DISTRIBUTE_BLOCK], [M.DISTRIBUTE_DFLT_DARG], [3]), ERR_ARG),
    ("darray_none_psize", lambda M: M.DOUBLE.Create_darray(
        2, 0, [8], [M.DISTRIBUTE_NONE], [M.DISTRIBUTE_DFLT_DARG], [2]), ERR_ARG),
    ("darray_distrib", lambda M: M.DOUBLE.Create_darray(
        1, 0, [8], [7], [M.DISTRIBUTE_DFLT_DARG], [1]), ERR_ARG),
    ("darray_cyclic_darg", lambda M: M.DOUBLE.Create_darray(
        2, 0, [8], [M.DISTRIBUTE_CYCLIC], [-3], [2]), ERR_ARG),
    ("lb_outside_struct", lambda M: M.LB.Create_contiguous(2), ERR_TYPE),
]  # fmt: skip


def error_of(call: Any, mpi: Any) -> int | None:
    """The error class ``call(mpi)`` raises, or None."""
    try:
        call(mpi)
    except mpi.Exception as exc:
        return int(exc.Get_error_class())
    return None


@pytest.mark.parametrize(("name", "call", "error"), ERRORS + ERRORS_LOCAL,
                         ids=[e[0] for e in ERRORS + ERRORS_LOCAL])  # fmt: skip
def test_error_classes(name: str, call: Any, error: int) -> None:
    assert error_of(call, IPYMPI) == error


@pytest.mark.parametrize(
    "call",
    [
        lambda M: M.DOUBLE.Create_indexed([1, 1], [0]),
        lambda M: M.Datatype.Create_struct([1, 1], [0], [M.INT, M.INT]),
        lambda M: M.Datatype.Create_struct([1], [0], [M.INT, M.FLOAT]),
        lambda M: M.DOUBLE.Create_subarray([4, 4], [2], [0, 0]),
    ],
)
def test_sequences_of_different_lengths_are_value_errors(call: Any) -> None:
    """As in mpi4py, which checks the lengths before calling MPI."""
    with pytest.raises(ValueError, match="differ in length"):
        call(IPYMPI)


def test_degenerate_types() -> None:
    assert D.DOUBLE.Create_vector(3, 0, 2).Get_extent() == (0, 32)  # as MPICH
    assert D.Datatype.Create_struct([], [], []).Get_extent() == (0, 0)
    assert D.DOUBLE.Create_hindexed([0, 1], [100, 8]).Get_extent() == (8, 8)
    zero = D.DOUBLE.Create_subarray([4], [0], [1])
    assert (zero.size, zero.Get_extent(), zero.Get_true_extent()) == (0, (0, 32), (0, 0))
    assert D.DOUBLE.Create_resized(0, -8).Create_contiguous(3).Get_extent() == (-16, 8)


# --- Against mpi4py on MPICH ---------------------------------------------------------------

DIFFERENTIAL = [c[0] for c in CASES if "LB" not in json.dumps(c[1])]
NO_PACK = {"pairs"}  # ipympi packs pair types with their C padding (see _typemap)
EXTERNAL = {"contiguous", "vector", "hvector", "indexed", "indexed_block", "hindexed_block",
            "subarray_c", "subarray_fortran", "resized", "contiguous_of_resized"}  # fmt: skip


def reference(mpi: Any) -> dict[str, Any]:
    """Facts about every differential case and error, computed with module ``mpi``."""
    results: dict[str, Any] = {name: facts_of(mpi, name) for name in DIFFERENTIAL}
    results["padding"] = {name: list(build(mpi, spec).Get_extent()) for name, spec, _ in PADDING}
    results["errors"] = {name: error_of(call, mpi) for name, call, _ in ERRORS}
    return results


def facts_of(mpi: Any, name: str) -> dict[str, Any]:
    """:func:`describe` plus packed and external32 bytes of two elements."""
    datatype = build(mpi, SPECS[name]).Commit()
    facts = json.loads(json.dumps(describe(mpi, datatype)))
    if name in NO_PACK or not datatype.Get_size():
        return facts  # type: ignore[no-any-return]
    count = 2
    displ, origin, nbytes = pack_layout(datatype, count)
    data = pattern(nbytes)
    # The view starts at the first element's origin; data below it stay readable.
    view = data[origin : origin + count * datatype.Get_extent()[1]]
    if mpi is IPYMPI:
        facts["packed"] = bytes(send_buffer([data, (count, displ), datatype]).mem).hex()
    else:
        out = bytearray(datatype.Pack_size(count, mpi.COMM_SELF))
        datatype.Pack(view, out, 0, mpi.COMM_SELF)
        facts["packed"] = out.hex()
    if name in EXTERNAL:
        ext = bytearray(datatype.Pack_external_size("external32", count))
        datatype.Pack_external("external32", view, ext, 0)
        facts["external32"] = ext.hex()
    return facts  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def mpich() -> dict[str, Any]:
    """:func:`reference` run with mpi4py in a subprocess (MPICH stays out of pytest)."""
    if not HAVE_MPI4PY:
        pytest.skip("mpi4py is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    code = "import json, test_derived_datatypes as t; from mpi4py import MPI; "
    code += "print(json.dumps(t.reference(MPI)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, env=env
    )
    if proc.returncode:
        pytest.skip(f"mpi4py reference run failed: {proc.stderr[-500:]}")
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", DIFFERENTIAL)
def test_same_as_mpich(name: str, mpich: dict[str, Any]) -> None:
    assert facts_of(IPYMPI, name) == mpich[name]


def test_struct_padding_as_mpich(mpich: dict[str, Any]) -> None:
    mine = {name: list(build(IPYMPI, spec).Get_extent()) for name, spec, _ in PADDING}
    assert mine == mpich["padding"]


def test_error_classes_as_mpich(mpich: dict[str, Any]) -> None:
    mine = {name: error_of(call, IPYMPI) for name, call, _ in ERRORS}
    assert mine == mpich["errors"]
