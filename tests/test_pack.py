"""Pack/Unpack (MPI-1.1 §3.13), external32, message buffers of derived datatypes, addresses.

Round trips are checked against a reference typemap computed here the slow way, one
entry at a time from the definitions of the constructors (MPI-1.1 §3.12.1, MPI-2 §4.1).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from ipympi.core import constants as C
from ipympi.core.errors import ERR_ARG, ERR_BUFFER, ERR_COUNT, ERR_TRUNCATE, ERR_TYPE
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi import datatype as D
from ipympi.mpi.buffers import as_ndarray, recv_buffer, send_buffer
from ipympi.mpi.rawmem import BOTTOM

Entry = tuple[int, int, int]  # (byte offset, byte size, packed padding after) of an element


def err_class(call: Any) -> int:
    with pytest.raises(MPIException) as info:
        call()
    return info.value.Get_error_class()


# --- A reference typemap, entry by entry ---------------------------------------------------


def expand(spec: Any) -> tuple[D.Datatype, list[Entry]]:
    """Build a datatype from a spec and compute its typemap from the definitions.

    Specs: a predefined name, ``[kind, base, *args]`` or ``["struct", bls, disps, specs]``;
    kinds are those of the ``Create_*`` methods (``"subarray"`` takes ``order`` as the
    last argument, ``"darray"`` too).
    """
    if isinstance(spec, str):
        datatype = getattr(D, spec)
        if datatype._impl.np_dtype is not None and datatype._impl.np_dtype.names:
            value = datatype._impl.np_dtype.fields["value"][0].itemsize
            index_at = datatype._impl.np_dtype.fields["index"][1]
            padding = datatype.extent - index_at - 4  # pairs travel as C structs
            return datatype, [(0, value, 0), (index_at, 4, padding)]
        return datatype, [(0, datatype.size, 0)]
    kind, *args = spec
    if kind == "struct":
        lengths, disps, specs = args
        children = [expand(s) for s in specs]
        datatype = D.Datatype.Create_struct(lengths, disps, [c[0] for c in children])
        entries = [
            (disp + k * child.extent + off, size, pad)
            for (child, typemap), n, disp in zip(children, lengths, disps)
            for k in range(n)
            for off, size, pad in typemap
        ]
        return datatype, entries
    (base, typemap), rest = expand(args[0]), args[1:]
    ext = base.extent

    def copies(starts: list[int]) -> list[Entry]:
        return [(s + off, size, pad) for s in starts for off, size, pad in typemap]

    if kind == "contiguous":
        starts = [i * ext for i in range(rest[0])]
        datatype = base.Create_contiguous(*rest)
    elif kind in ("vector", "hvector"):
        count, length, stride = rest
        step = stride * ext if kind == "vector" else stride
        starts = [j * step + i * ext for j in range(count) for i in range(length)]
        datatype = getattr(base, f"Create_{kind}")(*rest)
    elif kind in ("indexed", "hindexed"):
        lengths, disps = rest
        scale = ext if kind == "indexed" else 1
        starts = [d * scale + i * ext for n, d in zip(lengths, disps) for i in range(n)]
        datatype = getattr(base, f"Create_{kind}")(*rest)
    elif kind in ("indexed_block", "hindexed_block"):
        length, disps = rest
        scale = ext if kind == "indexed_block" else 1
        starts = [d * scale + i * ext for d in disps for i in range(length)]
        datatype = getattr(base, f"Create_{kind}")(*rest)
    elif kind == "subarray":
        sizes, subsizes, starts_, order = rest
        ranges = [range(s, s + n) for s, n in zip(starts_, subsizes)]
        starts = [linear(index, sizes, order) * ext for index in grid(ranges, order)]
        datatype = base.Create_subarray(sizes, subsizes, starts_, order)
    elif kind == "darray":
        _size, rank, gsizes, distribs, dargs, psizes, order = rest
        coords = np.unravel_index(rank, psizes)
        ranges = [owned(*dim) for dim in zip(gsizes, distribs, dargs, psizes, coords)]
        starts = [linear(index, gsizes, order) * ext for index in grid(ranges, order)]
        datatype = base.Create_darray(*rest)
    elif kind == "resized":
        starts = [0]
        datatype = base.Create_resized(*rest)
    else:
        raise ValueError(kind)
    return datatype, copies(starts)


def grid(ranges: list[Any], order: int) -> list[tuple[int, ...]]:
    """Index tuples in storage order (last index fastest in C order)."""
    if order == C.ORDER_C:
        return list(itertools.product(*ranges))
    return [t[::-1] for t in itertools.product(*ranges[::-1])]


def linear(index: tuple[int, ...], sizes: list[int], order: int) -> int:
    return int(np.ravel_multi_index(index, sizes, order="C" if order == C.ORDER_C else "F"))


def owned(gsize: int, distrib: int, darg: int, psize: int, coord: int) -> list[int]:
    """Global indices of one dimension owned by a process coordinate (MPI-2 §4.1.4)."""
    if distrib == C.DISTRIBUTE_NONE:
        return list(range(gsize))
    if distrib == C.DISTRIBUTE_BLOCK:
        block = -(-gsize // psize) if darg == C.DISTRIBUTE_DFLT_DARG else darg
        return [i for i in range(gsize) if i // block == coord]
    block = 1 if darg == C.DISTRIBUTE_DFLT_DARG else darg
    return [i for i in range(gsize) if (i // block) % psize == coord]


VEC = ["vector", "DOUBLE", 2, 1, 3]
ROUND_TRIPS = {
    "contiguous": ["contiguous", "INT", 5],
    "vector": ["vector", "DOUBLE", 4, 2, 3],
    "vector_negative_stride": ["vector", "SHORT", 3, 1, -2],
    "hvector": ["hvector", "FLOAT", 3, 2, 13],
    "indexed": ["indexed", "INT", [3, 0, 1, 2], [4, 9, 0, 12]],
    "hindexed": ["hindexed", "DOUBLE", [1, 2], [40, -8]],
    "indexed_block": ["indexed_block", "INT", 2, [6, 0, 3]],
    "hindexed_block": ["hindexed_block", "SHORT", 3, [21, 1]],
    "struct": ["struct", [1, 3, 2], [0, 4, 20], ["CHAR", "FLOAT", "DOUBLE"]],
    "struct_of_vector": ["struct", [2, 1], [0, 56], [VEC, "INT"]],
    "vector_of_struct_of_vector": ["vector", ["struct", [1, 1], [8, 0], [VEC, "SHORT"]], 2, 1, 2],
    "subarray_c": ["subarray", "DOUBLE", [4, 6], [3, 2], [1, 3], C.ORDER_C],
    "subarray_fortran": ["subarray", "INT", [4, 6], [3, 2], [1, 3], C.ORDER_F],
    "subarray_3d_fortran": ["subarray", "SHORT", [3, 4, 2], [2, 2, 1], [1, 1, 1], C.ORDER_F],
    "darray_block": ["darray", "DOUBLE", 6, 4, [7, 5],
                     [C.DISTRIBUTE_BLOCK, C.DISTRIBUTE_BLOCK],
                     [C.DISTRIBUTE_DFLT_DARG, C.DISTRIBUTE_DFLT_DARG], [3, 2], C.ORDER_C],
    "darray_cyclic": ["darray", "INT", 4, 3, [9, 10],
                      [C.DISTRIBUTE_CYCLIC, C.DISTRIBUTE_CYCLIC], [2, 3], [2, 2], C.ORDER_C],
    "darray_cyclic_fortran": ["darray", "INT", 3, 2, [11, 4],
                              [C.DISTRIBUTE_CYCLIC, C.DISTRIBUTE_NONE],
                              [C.DISTRIBUTE_DFLT_DARG, C.DISTRIBUTE_DFLT_DARG], [3, 1],
                              C.ORDER_F],
    "resized_negative_lb": ["resized", VEC, -16, 40],
    "contiguous_of_resized": ["contiguous", ["resized", "INT", -4, 12], 3],
    "dup_like_contiguous": ["contiguous", ["contiguous", "DOUBLE", 2], 2],
    "pairs": ["vector", "DOUBLE_INT", 2, 1, 2],
    "struct_with_pair": ["struct", [1, 1], [0, 16], ["DOUBLE_INT", "CHAR"]],
}  # fmt: skip


def reference_pack(typemap: list[Entry], datatype: D.Datatype, data: np.ndarray,
                   origin: int, count: int) -> bytes:  # fmt: skip
    """The packed bytes by the definition (pair leaves keep their padding, zeroed)."""
    out = b""
    for element in range(count):
        base = origin + element * datatype.extent
        for offset, size, pad in typemap:
            out += data[base + offset : base + offset + size].tobytes() + bytes(pad)
    return out


def origin_for(datatype: D.Datatype, count: int) -> tuple[int, int, int]:
    """(displacement in extents, origin byte, buffer bytes) holding ``count`` elements."""
    spread = (count - 1) * datatype.extent
    low = datatype.true_lb + min(spread, 0)
    high = datatype.true_ub + max(spread, 0)
    displ = -(-max(0, -low) // datatype.extent)
    origin = displ * datatype.extent
    return displ, origin, origin + max(high, count * datatype.extent)


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_round_trip(name: str) -> None:
    datatype, typemap = expand(ROUND_TRIPS[name])
    datatype.Commit()
    count = 3
    displ, origin, nbytes = origin_for(datatype, count)
    data = (np.arange(nbytes) % 253 + 1).astype(np.uint8)
    raw = datatype._impl.layout.raw
    expected = reference_pack(typemap, datatype, data, origin, count)
    sent = send_buffer([data, (count, displ), datatype])
    if raw:  # dense memory goes as it is, padding bytes included
        expected = data[origin : origin + count * datatype.extent].tobytes()
        assert sent.unpack is None and sent.repack is None
    assert bytes(sent.mem) == expected
    assert sent.nbytes == count * datatype._packed_size == len(expected)
    # Receive: only the typemap's bytes change.
    target = np.zeros(nbytes, dtype=np.uint8)
    received = recv_buffer([target, (count, displ), datatype])
    received.mem[:] = expected
    if received.unpack is not None:
        received.unpack(received.nbytes)
    want = np.zeros(nbytes, dtype=np.uint8)
    for element in range(count):
        base = origin + element * datatype.extent
        for offset, size, _ in typemap:
            want[base + offset : base + offset + size] = data[base + offset : base + offset + size]
    if raw:
        want[origin : origin + count * datatype.extent] = data[origin:][: count * datatype.extent]
    assert (target == want).all()
    if datatype.true_lb >= 0 and displ == 0:  # Pack/Unpack see the buffer from its start
        view = data[: count * datatype.extent]
        if datatype_fits(datatype, view.nbytes, count):
            out = bytearray(datatype.Pack_size(count, None) + 3)
            assert datatype.Pack(view, out, 3, None) == len(out)
            assert bytes(out[3:]) == expected
            back = np.zeros(nbytes, dtype=np.uint8)
            assert datatype.Unpack(out, 3, [back, count], None) == len(out)
            assert (back == want).all()


def datatype_fits(datatype: D.Datatype, nbytes: int, count: int) -> bool:
    return datatype.true_ub + (count - 1) * datatype.extent <= nbytes


# --- Pack and Unpack -----------------------------------------------------------------------


def test_packing_unit_of_several_calls() -> None:
    ints = np.arange(3, dtype=np.int32)
    doubles = np.arange(6.0)
    vector = D.DOUBLE.Create_vector(3, 1, 2).Commit()
    size = D.INT.Pack_size(3, None) + vector.Pack_size(1, None) + D.CHAR.Pack_size(2, None)
    assert size == 12 + 24 + 2
    unit = bytearray(size)
    position = D.INT.Pack(ints, unit, 0, None)
    position = vector.Pack(doubles, unit, position, None)
    position = D.CHAR.Pack(b"hi", unit, position, None)
    assert position == size
    assert np.frombuffer(unit[12:36]).tolist() == [0.0, 2.0, 4.0]
    # Unpack in several related calls, walking the position forward.
    got_ints, got_doubles, got_chars = np.zeros(3, np.int32), np.full(6, -1.0), bytearray(2)
    position = D.INT.Unpack(unit, 0, got_ints, None)
    position = vector.Unpack(unit, position, got_doubles, None)
    position = D.CHAR.Unpack(unit, position, got_chars, None)
    assert position == size
    assert got_ints.tolist() == [0, 1, 2] and got_chars == b"hi"
    assert got_doubles.tolist() == [0.0, -1.0, 2.0, -1.0, 4.0, -1.0]


def test_count_comes_from_the_buffer_length_or_a_list() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 3).Commit()  # extent 32
    out = bytearray(64)
    assert vector.Pack(np.arange(5.0), out, 0, None) == 16  # 40 bytes hold one element
    assert vector.Pack(np.arange(8.0), out, 0, None) == 32
    assert vector.Pack(np.arange(3.0), out, 0, None) == 0
    assert vector.Pack([np.arange(8.0), 1], out, 0, None) == 16
    assert D.DOUBLE.Pack([np.arange(8.0), 3], out, 0, None) == 24
    assert np.frombuffer(out[:24]).tolist() == [0.0, 1.0, 2.0]


def test_pack_size_is_exact() -> None:
    struct = D.Datatype.Create_struct([1, 1], [0, 8], [D.DOUBLE, D.CHAR]).Commit()
    assert struct.Pack_size(3, None) == 27
    assert D.DOUBLE.Pack_size(0, None) == 0
    assert D.DOUBLE_INT.Pack_size(3, None) == 48  # pairs keep their C padding
    assert err_class(lambda: D.DOUBLE.Pack_size(-1, None)) == ERR_COUNT
    assert err_class(lambda: D.DOUBLE.Create_vector(2, 1, 2).Pack_size(1, None)) == ERR_TYPE


def test_pack_errors() -> None:
    a = np.arange(4.0)
    assert err_class(lambda: D.DOUBLE.Pack(a, bytearray(31), 0, None)) == ERR_TRUNCATE
    assert err_class(lambda: D.DOUBLE.Pack(a, bytearray(40), 9, None)) == ERR_TRUNCATE
    assert err_class(lambda: D.DOUBLE.Pack(a, bytearray(40), -1, None)) == ERR_ARG
    with pytest.raises(BufferError):  # read-only output, refused as mpi4py refuses it
        D.DOUBLE.Pack(a, b"x" * 32, 0, None)
    assert err_class(lambda: D.DOUBLE.Unpack(bytearray(16), 0, a, None)) == ERR_TRUNCATE
    assert err_class(lambda: D.DOUBLE.Unpack(bytearray(32), 8, a, None)) == ERR_TRUNCATE
    with pytest.raises(BufferError):
        D.DOUBLE.Unpack(bytearray(32), 0, b"x" * 32, None)
    uncommitted = D.DOUBLE.Create_contiguous(2)
    assert err_class(lambda: uncommitted.Pack(a, bytearray(32), 0, None)) == ERR_TYPE
    assert err_class(lambda: D.DATATYPE_NULL.Pack(a, bytearray(32), 0, None)) == ERR_TYPE
    below = D.INT.Create_vector(2, 1, -2).Commit()  # data below the origin
    assert err_class(lambda: below.Pack(np.zeros(4, np.int32), bytearray(8), 0, None)) == (
        ERR_BUFFER
    )
    resized = D.INT.Create_vector(2, 1, 4).Create_resized(0, 4).Commit()
    assert err_class(lambda: resized.Pack(np.zeros(4, np.int32), bytearray(64), 0, None)) == (
        ERR_BUFFER
    )


def test_any_message_can_be_unpacked_from_packed_bytes() -> None:
    vector = D.DOUBLE.Create_vector(3, 1, 2).Commit()
    a = np.arange(6.0)
    message = bytes(send_buffer([a, 1, vector]).mem)
    out = bytearray(vector.Pack_size(1, None))
    vector.Pack(a, out, 0, None)
    assert bytes(out) == message
    as_packed = recv_buffer([bytearray(24), D.PACKED])
    assert as_packed.unpack is None
    as_packed.mem[:] = message
    back = np.zeros(6)
    vector.Unpack(as_packed.mem, 0, back, None)
    assert back.tolist() == [0.0, 0.0, 2.0, 0.0, 4.0, 0.0]


# --- external32 ----------------------------------------------------------------------------


def test_external32_is_big_endian_with_standard_sizes() -> None:
    out = bytearray(12)
    assert D.INT.Pack_external("external32", np.arange(3, dtype="i4"), out, 0) == 12
    assert bytes(out) == bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2])
    assert D.LONG.Pack_external_size("external32", 2) == 8
    out = bytearray(8)
    D.LONG.Pack_external("external32", np.array([1, -2], dtype="l"), out, 0)
    assert bytes(out) == b"\x00\x00\x00\x01\xff\xff\xff\xfe"
    sizes = {"DOUBLE": 8, "WCHAR": 2, "C_BOOL": 1, "AINT": 8, "DOUBLE_INT": 12,
             "SHORT_INT": 6, "LONG_INT": 8, "C_DOUBLE_COMPLEX": 16, "FLOAT16_T": 2,
             "LONG_DOUBLE": 16, "C_LONG_DOUBLE_COMPLEX": 32, "LONG_DOUBLE_INT": 20}  # fmt: skip
    for name, size in sizes.items():
        assert getattr(D, name).Pack_external_size("external32", 1) == size, name


def test_external32_long_double_is_ieee_quad() -> None:
    values = np.array([1, -2.5, np.inf], dtype=np.longdouble)
    out = bytearray(48)
    assert D.LONG_DOUBLE.Pack_external("external32", values, out, 0) == 48
    assert out.hex() == (  # the bytes MPICH writes
        "3fff0000000000000000000000000000c00040000000000000000000000000007fff" + "0" * 28
    )
    back = np.zeros(3, dtype=np.longdouble)
    assert D.LONG_DOUBLE.Unpack_external("external32", out, 0, back) == 48
    assert back.tolist() == values.tolist()
    pairs = np.zeros(2, np.dtype([("value", "g"), ("index", "i")], align=True))
    pairs["value"], pairs["index"] = [1 / 3, -7], [5, -6]
    out = bytearray(40)
    assert D.LONG_DOUBLE_INT.Pack_external("external32", pairs, out, 0) == 40
    assert bytes(out[16:20]) == bytes([0, 0, 0, 5])
    back = np.zeros_like(pairs)
    D.LONG_DOUBLE_INT.Unpack_external("external32", out, 0, back)
    assert back.tolist() == pairs.tolist()


def test_external32_round_trip_of_a_mixed_struct() -> None:
    dtype = np.dtype([("d", "f8"), ("i", "i4"), ("c", "S1")], align=True)
    records = np.zeros(2, dtype)
    records["d"], records["i"], records["c"] = [1.5, -2.25], [7, -8], [b"x", b"y"]
    struct = D.Datatype.Create_struct([1, 1, 1], [0, 8, 12], [D.DOUBLE, D.INT, D.CHAR]).Commit()
    assert struct.extent == dtype.itemsize == 16
    size = struct.Pack_external_size("external32", 2)
    assert size == 26
    out = bytearray(size + 2)
    assert struct.Pack_external("external32", records, out, 2) == size + 2
    assert bytes(out[2:15]) == np.array(1.5, ">f8").tobytes() + bytes([0, 0, 0, 7]) + b"x"
    back = np.zeros(2, dtype)
    assert struct.Unpack_external("external32", out, 2, back) == size + 2
    assert back.tolist() == records.tolist()


def test_external32_errors() -> None:
    a = np.zeros(2)
    assert err_class(lambda: D.DOUBLE.Pack_external("native", a, bytearray(16), 0)) == ERR_ARG
    assert err_class(lambda: D.INTEGER16.Pack_external_size("external32", 1)) == ERR_TYPE
    assert err_class(lambda: D.DOUBLE.Pack_external("external32", a, bytearray(8), 0)) == (
        ERR_TRUNCATE
    )
    assert err_class(lambda: D.DOUBLE.Unpack_external("external32", bytes(8), 0, a)) == (
        ERR_TRUNCATE
    )


# --- Message buffers of derived datatypes --------------------------------------------------


def test_dense_derived_types_view_user_memory() -> None:
    a = np.zeros(8)
    triple = D.DOUBLE.Create_contiguous(2).Commit()
    spec = recv_buffer([a, 2, triple])
    assert spec.unpack is None and spec.count == 2 and spec.nbytes == 32
    spec.mem[:8] = np.float64(3.0).tobytes()
    assert a[0] == 3.0
    shifted = D.DOUBLE.Create_hindexed([2], [8]).Commit()  # lb 8: memory from byte 8 on
    spec = recv_buffer([a, 3, shifted])
    spec.mem[:8] = np.float64(5.0).tobytes()
    assert a[1] == 5.0 and spec.nbytes == 48
    assert as_ndarray(spec).dtype == np.float64 and spec.element_dtype == np.float64


def test_send_spec_is_a_packed_copy_refreshed_by_repack() -> None:
    a = np.arange(8.0)
    vector = D.DOUBLE.Create_vector(2, 1, 4).Commit()
    spec = send_buffer([a, 1, vector])
    assert spec.count == 1 and spec.nbytes == 16 and spec.unpack is None
    assert as_ndarray(spec).tolist() == [0.0, 4.0]
    a[4] = 40.0
    assert as_ndarray(spec).tolist() == [0.0, 4.0]
    spec.repack()
    assert as_ndarray(spec).tolist() == [0.0, 40.0]
    assert spec.element_dtype == np.float64
    assert send_buffer([a, 2, D.DOUBLE.Create_resized(0, 32).Commit()]).count == 2


def test_receive_spec_unpacks_whole_elements_only() -> None:
    struct = D.Datatype.Create_struct([1, 1], [0, 8], [D.DOUBLE, D.INT]).Commit()
    assert (struct.size, struct.extent) == (12, 16)
    target = np.full(48, 0xEE, dtype=np.uint8)
    spec = recv_buffer([target, 3, struct])
    assert spec.count == 3 and spec.nbytes == 36 and spec.element_dtype is None
    assert bytes(spec.mem) == bytes(36)  # a fresh zeroed area
    spec.mem[:] = bytes(range(1, 37))
    spec.unpack(22)  # element 0 and the double of element 1; 2 bytes of an int are not stored
    assert target[:12].tolist() == list(range(1, 13))
    assert target[16:24].tolist() == list(range(13, 21))
    assert (target[12:16] == 0xEE).all() and (target[24:] == 0xEE).all()
    spec.unpack(12, offset=24)  # the last element on its own (v-variants receive blocks)
    assert target[32:44].tolist() == list(range(25, 37))
    assert (target[24:32] == 0xEE).all() and (target[44:] == 0xEE).all()
    with pytest.raises(ValueError):
        spec.unpack(12, offset=8)


def test_partial_receive_of_a_vector() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 3).Commit()
    target = np.full(8, -1.0)
    spec = recv_buffer([target, vector])
    assert spec.count == 2
    spec.mem[:24] = np.array([1.0, 2.0, 3.0]).tobytes()
    spec.unpack(24)
    assert target.tolist() == [1.0, -1.0, -1.0, 2.0, 3.0, -1.0, -1.0, -1.0]


def test_negative_lower_bound_with_a_displacement() -> None:
    backwards = D.INT.Create_vector(3, 1, -1).Commit()  # ints at 0, -4, -8; extent 12
    a = np.arange(6, dtype=np.int32)
    spec = send_buffer([a, (1, 1), backwards])  # origin one extent in: a[3]
    assert np.frombuffer(spec.mem, dtype=np.int32).tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="need bytes -8 to 4"):
        send_buffer([a, 1, backwards])


def test_buffer_errors_of_derived_types() -> None:
    vector = D.DOUBLE.Create_vector(2, 1, 3).Commit()
    with pytest.raises(ValueError, match="not a multiple"):  # 40 % 32
        send_buffer([np.zeros(5), vector])
    with pytest.raises(ValueError, match="need bytes"):
        send_buffer([np.zeros(3), 1, vector])
    with pytest.raises(BufferError):
        recv_buffer([bytes(32), 1, vector])
    assert err_class(lambda: send_buffer([np.zeros(4), 1, D.DOUBLE.Create_vector(2, 1, 3)])) == (
        ERR_TYPE
    )
    assert send_buffer([np.zeros(4), 0, vector]).nbytes == 0
    empty = D.DOUBLE.Create_contiguous(0).Commit()
    assert recv_buffer([np.zeros(1), 5, empty]).nbytes == 0


# --- Addresses -----------------------------------------------------------------------------


def test_get_address_and_aint_arithmetic() -> None:
    a = np.zeros(10)
    assert D.Get_address(a) == a.ctypes.data
    assert D.Aint_diff(D.Get_address(a[3:]), D.Get_address(a)) == 24
    assert D.Aint_add(D.Get_address(a), 24) == D.Get_address(a[3:])
    assert D.Get_address(a[::2]) == a.ctypes.data
    raw = bytearray(8)
    assert D.Get_address(raw) == D.Get_address(np.frombuffer(raw, np.uint8))
    assert D.Get_address(memoryview(raw)[2:]) == D.Get_address(raw) + 2
    assert D.Get_address(BOTTOM) == 0
    with pytest.raises(TypeError):
        D.Get_address(42)
    assert err_class(lambda: D.Aint_add("x", 1)) == ERR_ARG


def test_struct_from_addresses_describes_a_record() -> None:
    record = np.zeros(1, np.dtype([("x", "f8"), ("n", "i4"), ("tag", "i2")]))
    record["x"], record["n"], record["tag"] = 2.5, 11, -3
    base = D.Get_address(record)
    disps = [D.Aint_diff(D.Get_address(record[name]), base) for name in ("x", "n", "tag")]
    assert disps == [0, 8, 12]
    struct = D.Datatype.Create_struct([1, 1, 1], disps, [D.DOUBLE, D.INT, D.SHORT]).Commit()
    assert struct.size == record.itemsize == 14 and struct.extent == 16
    packed = bytes(send_buffer([record, 1, struct]).mem)
    assert packed == record.tobytes()


# --- Vectorized moves ----------------------------------------------------------------------


def test_a_vector_of_a_million_doubles_moves_as_one_strided_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vector's blocks form an arithmetic progression: packing and unpacking move them as
    one strided numpy view, never through the index window that irregular layouts need (nor
    a Python loop per element). Its speed is measured in ``benchmarks/``."""
    from ipympi.core import typemap_copy

    def irregular(*args: object) -> None:
        raise AssertionError("a vector was moved through the irregular-layout window")

    monkeypatch.setattr(typemap_copy, "_window", irregular)
    n = 1_000_000
    a = np.arange(2.0 * n)
    vector = D.DOUBLE.Create_vector(n, 1, 2).Commit()
    out = bytearray(vector.Pack_size(1, None))
    vector.Pack(a, out, 0, None)
    spec = send_buffer([a, 1, vector])
    back = np.zeros(2 * n)
    target = recv_buffer([back, 1, vector])
    target.mem[:] = spec.mem
    target.unpack(target.nbytes)
    assert (back[::2] == a[::2]).all() and not back[1::2].any()
    assert bytes(out) == bytes(spec.mem)
    gathered = np.frombuffer(out)
    assert gathered[-1] == a[-2]
