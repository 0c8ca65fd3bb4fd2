"""Reduction operations: predefined ops on every datatype group, user ops, Reduce_local."""

from __future__ import annotations

import operator
import pickle
import sys
import time
from typing import Any, Callable

import numpy as np
import pytest

from ipympi.core.errors import ERR_BUFFER, ERR_OP, ERR_TYPE
from ipympi.core.errors import Exception as MPIException
from ipympi.mpi import datatype as D
from ipympi.mpi.op import (
    BAND,
    BOR,
    BXOR,
    LAND,
    LOR,
    LXOR,
    MAX,
    MAXLOC,
    MIN,
    MINLOC,
    NO_OP,
    OP_NULL,
    PROD,
    REPLACE,
    SUM,
    Op,
)
from ipympi.mpi.rawmem import IN_PLACE

OPS = {
    "MAX": MAX, "MIN": MIN, "SUM": SUM, "PROD": PROD, "LAND": LAND, "BAND": BAND,
    "LOR": LOR, "BOR": BOR, "LXOR": LXOR, "BXOR": BXOR, "MAXLOC": MAXLOC, "MINLOC": MINLOC,
    "REPLACE": REPLACE, "NO_OP": NO_OP,
}  # fmt: skip

# Datatype groups of MPI-3.1 §5.9.2-§5.9.4 (aliases included); "none" is in no group.
GROUPS = {
    "c_int": [
        "INT", "LONG", "SHORT", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "LONG_LONG_INT",
        "LONG_LONG", "UNSIGNED_LONG_LONG", "SIGNED_CHAR", "UNSIGNED_CHAR", "INT8_T", "INT16_T",
        "INT32_T", "INT64_T", "UINT8_T", "UINT16_T", "UINT32_T", "UINT64_T", "SIGNED_INT",
        "SIGNED_LONG", "SIGNED_LONG_LONG", "SIGNED_SHORT", "SINT8_T", "SINT16_T", "SINT32_T",
        "SINT64_T", "UNSIGNED_INT",
    ],
    "f_int": ["INTEGER", "F_INT", "INTEGER1", "INTEGER2", "INTEGER4", "INTEGER8", "INTEGER16"],
    "float": [
        "FLOAT", "DOUBLE", "REAL", "DOUBLE_PRECISION", "LONG_DOUBLE", "REAL2", "REAL4", "REAL8",
        "REAL16", "FLOAT16_T", "BFLOAT16_T", "FLOAT32_T", "FLOAT64_T", "F_FLOAT", "F_DOUBLE",
    ],
    "logical": [
        "LOGICAL", "C_BOOL", "CXX_BOOL", "BOOL", "F_BOOL", "LOGICAL1", "LOGICAL2", "LOGICAL4",
        "LOGICAL8", "LOGICAL16",
    ],
    "complex": [
        "COMPLEX", "C_COMPLEX", "C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX",
        "CXX_FLOAT_COMPLEX", "CXX_DOUBLE_COMPLEX", "CXX_LONG_DOUBLE_COMPLEX", "DOUBLE_COMPLEX",
        "COMPLEX4", "COMPLEX8", "COMPLEX16", "COMPLEX32", "F_COMPLEX", "F_FLOAT_COMPLEX",
        "F_DOUBLE_COMPLEX",
    ],
    "byte": ["BYTE"],
    "multi": ["AINT", "OFFSET", "COUNT"],
    "pair": [
        "FLOAT_INT", "DOUBLE_INT", "LONG_INT", "INT_INT", "TWOINT", "SHORT_INT", "LONG_DOUBLE_INT",
    ],
    "none": ["CHAR", "WCHAR", "CHARACTER", "PACKED", "LB", "UB"],
}  # fmt: skip
GROUP_OF = {name: group for group, names in GROUPS.items() for name in names}

ALLOWED = {
    "MAX": {"c_int", "f_int", "float", "multi"},
    "MIN": {"c_int", "f_int", "float", "multi"},
    "SUM": {"c_int", "f_int", "float", "complex", "multi"},
    "PROD": {"c_int", "f_int", "float", "complex", "multi"},
    "LAND": {"c_int", "logical"},
    "LOR": {"c_int", "logical"},
    "LXOR": {"c_int", "logical"},
    "BAND": {"c_int", "f_int", "byte", "multi"},
    "BOR": {"c_int", "f_int", "byte", "multi"},
    "BXOR": {"c_int", "f_int", "byte", "multi"},
    "MAXLOC": {"pair"},
    "MINLOC": {"pair"},
    "REPLACE": set(),
    "NO_OP": set(),
}

# Element-wise references in plain Python; logical results are 0/1.
REFERENCE: dict[str, Callable[[Any, Any], Any]] = {
    "MAX": max,
    "MIN": min,
    "SUM": operator.add,
    "PROD": operator.mul,
    "LAND": lambda x, y: int(bool(x) and bool(y)),
    "LOR": lambda x, y: int(bool(x) or bool(y)),
    "LXOR": lambda x, y: int(bool(x) != bool(y)),
    "BAND": operator.and_,
    "BOR": operator.or_,
    "BXOR": operator.xor,
}


def err_class(excinfo: pytest.ExceptionInfo) -> int:
    return excinfo.value.Get_error_class()


def datatype_names() -> list[str]:
    return [n for n in D.__all__ if n.isupper() and n != "DATATYPE_NULL"]


def test_every_datatype_is_classified() -> None:
    assert set(datatype_names()) == set(GROUP_OF)


# --- every predefined op x every datatype ------------------------------------------------


def sample(datatype: D.Datatype, seed: int) -> np.ndarray:
    """Sixteen elements of ``datatype`` covering its range (edge values first)."""
    dtype = datatype._impl.np_dtype
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, 16).astype(bool)
    if dtype.kind in "iu":
        if GROUP_OF[datatype._impl.key] == "logical":
            return rng.integers(0, 2, 16).astype(dtype)
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, 16, endpoint=True, dtype=dtype)
        values[:4] = [info.max, info.min, 0, 1] if seed % 2 else [1, info.max, 0, 7]
        return values
    halves = rng.integers(-8, 9, 16) / 2
    if dtype.kind == "c":
        return (halves + 1j * rng.integers(-8, 9, 16) / 2).astype(dtype)
    return halves.astype(dtype)


def python_values(array: np.ndarray) -> list[Any]:
    kind = array.dtype.kind
    convert = {"b": bool, "i": int, "u": int, "f": float, "c": complex}[kind]
    return [convert(x) for x in array]


def reference(name: str, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``left op right`` element by element in Python, stored as C would (ints wrap)."""
    values = [REFERENCE[name](x, y) for x, y in zip(python_values(left), python_values(right))]
    dtype = right.dtype
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        span = 1 << info.bits
        values = [(v - info.min) % span + info.min for v in values]
    with np.errstate(all="ignore"):
        return np.array(values, dtype=object).astype(dtype)


def needs_data(datatype: D.Datatype) -> bool:
    impl = datatype._impl
    return impl.np_dtype is not None and impl.msg_ok


@pytest.mark.parametrize("dt_name", datatype_names())
@pytest.mark.parametrize("op_name", sorted(OPS))
def test_predefined_op_on_datatype(op_name: str, dt_name: str) -> None:
    op, datatype = OPS[op_name], getattr(D, dt_name)
    allowed = GROUP_OF[dt_name] in ALLOWED[op_name]
    if not allowed:
        with pytest.raises(MPIException) as excinfo:
            op._check_datatype(datatype)
        assert err_class(excinfo) == ERR_OP
        assert f"MPI.{op_name}" in str(excinfo.value)
        if needs_data(datatype):
            inbuf = np.zeros(4, datatype._impl.np_dtype)
            inout = np.zeros(4, datatype._impl.np_dtype)
            before = inout.tobytes()
            with pytest.raises(MPIException) as excinfo:
                op.Reduce_local([inbuf, datatype], [inout, datatype])
            assert err_class(excinfo) == ERR_OP
            assert inout.tobytes() == before
        return
    op._check_datatype(datatype)
    if not needs_data(datatype) or op_name in ("MAXLOC", "MINLOC"):
        return  # no numpy representation; pairs are checked below
    left, right = sample(datatype, 1), sample(datatype, 2)
    expected = reference(op_name, left, right)
    inout = right.copy()
    op.Reduce_local([left, datatype], [inout, datatype])
    np.testing.assert_array_equal(inout, expected)
    inout = right.copy()
    op._reduce_arrays(left, inout, datatype)
    np.testing.assert_array_equal(inout, expected)


def test_error_message_names_op_type_and_group() -> None:
    with pytest.raises(MPIException) as excinfo:
        BAND._check_datatype(D.DOUBLE)
    assert "MPI.BAND is not defined for MPI.DOUBLE (floating point)" in str(excinfo.value)
    with pytest.raises(MPIException, match="derived"):
        SUM._check_datatype(D.DOUBLE.Dup())
    with pytest.raises(MPIException) as excinfo:
        SUM._check_datatype(D.DATATYPE_NULL)
    assert err_class(excinfo) == ERR_TYPE


def test_user_ops_accept_every_datatype() -> None:
    op = Op.Create(lambda invec, inoutvec, datatype: None)
    for name in datatype_names():
        op._check_datatype(getattr(D, name))
    op._check_datatype(D.DOUBLE.Dup())


def test_integer_overflow_wraps_and_floats_overflow_silently() -> None:
    inout = np.array([127, -128], dtype=np.int8)
    SUM.Reduce_local(np.array([1, -1], dtype=np.int8), inout)
    assert inout.tolist() == [-128, 127]
    big = np.array([np.iinfo(np.uint64).max], dtype=np.uint64)
    inout = big.copy()
    PROD.Reduce_local(big, inout)
    assert inout.tolist() == [1]
    inout = np.array([1e308, np.inf, 0.0])
    PROD.Reduce_local(np.array([10.0, 0.0, np.inf]), inout)
    assert inout[0] == np.inf
    assert np.isnan(inout[1:]).all()
    inout = np.array([np.finfo(np.float32).max], dtype=np.float32)
    SUM.Reduce_local(inout.copy(), inout)
    assert inout[0] == np.inf


def test_logical_ops_on_integers_store_zero_or_one() -> None:
    left = np.array([5, 0, -3, 0], dtype=np.int32)
    for op, expected in [(LAND, [1, 0, 0, 0]), (LOR, [1, 1, 1, 0]), (LXOR, [0, 1, 1, 0])]:
        inout = np.array([7, 9, 0, 0], dtype=np.int32)
        op.Reduce_local(left, inout)
        assert inout.tolist() == expected


# --- MAXLOC and MINLOC -------------------------------------------------------------------

PAIRS = ["FLOAT_INT", "DOUBLE_INT", "LONG_INT", "INT_INT", "SHORT_INT", "LONG_DOUBLE_INT"]
# (left, right) cases: left better, right better, tie either way, identical.
LOC_CASES = [
    ((5, 3), (1, 0)),
    ((1, 0), (5, 3)),
    ((2, 7), (2, 4)),
    ((2, 4), (2, 7)),
    ((2, 4), (2, 4)),
]


def loc_reference(name: str, left: tuple[int, int], right: tuple[int, int]) -> tuple[int, int]:
    """MPI-3.1 §5.9.4: w = max(u, v) (min for MINLOC); k = min(i, j) when u == v."""
    (u, i), (v, j) = left, right
    better = operator.gt if name == "MAXLOC" else operator.lt
    if u == v:
        return (u, min(i, j))
    return (u, i) if better(u, v) else (v, j)


def pairs(datatype: D.Datatype, items: list[tuple[int, int]]) -> np.ndarray:
    return np.array(items, dtype=datatype._impl.np_dtype)


@pytest.mark.parametrize("dt_name", PAIRS)
@pytest.mark.parametrize("op_name", ["MAXLOC", "MINLOC"])
def test_loc_ops_on_pair_types(op_name: str, dt_name: str) -> None:
    op, datatype = OPS[op_name], getattr(D, dt_name)
    left = pairs(datatype, [case[0] for case in LOC_CASES])
    right = pairs(datatype, [case[1] for case in LOC_CASES])
    expected = [loc_reference(op_name, *case) for case in LOC_CASES]
    inout = right.copy()
    op.Reduce_local([left, datatype], [inout, datatype])
    assert [(int(v), int(i)) for v, i in inout.tolist()] == expected
    inout = right.copy()
    op._reduce_arrays(left, inout, datatype)
    assert [(int(v), int(i)) for v, i in inout.tolist()] == expected


@pytest.mark.parametrize("op_name", ["MAXLOC", "MINLOC"])
def test_loc_reduction_over_ranks_finds_first_extreme(op_name: str) -> None:
    values = [3.0, 7.5, 1.0, 7.5, 1.0, 7.5]
    contributions = [pairs(D.DOUBLE_INT, [(v, rank)]) for rank, v in enumerate(values)]
    forward = contributions[-1].copy()
    for contribution in reversed(contributions[:-1]):
        OPS[op_name]._reduce_arrays(contribution, forward, D.DOUBLE_INT)
    backward = contributions[0].copy()
    for contribution in contributions[1:]:
        OPS[op_name]._reduce_arrays(contribution, backward, D.DOUBLE_INT)
    expected = (7.5, 1) if op_name == "MAXLOC" else (1.0, 2)
    assert forward.tolist() == backward.tolist() == [expected]


# --- user-defined operations -------------------------------------------------------------


def test_create_commutativity_flags() -> None:
    def fn(invec: Any, inoutvec: Any, datatype: Any) -> None:
        pass

    assert Op.Create(fn).Is_commutative() is False
    assert Op.Create(fn, commute=True).is_commutative is True
    assert Op.Create(fn, 1)._commutative is True
    assert Op.Create(fn).is_predefined is False
    with pytest.raises(TypeError):
        Op.Create(5)  # type: ignore[arg-type]


def test_predefined_commutativity_flags() -> None:
    for name, op in OPS.items():
        assert op.is_predefined
        assert op.Is_commutative() is (name not in ("REPLACE", "NO_OP"))
        assert op._commutative is op.is_commutative
    with pytest.raises(MPIException) as excinfo:
        OP_NULL.Is_commutative()
    assert err_class(excinfo) == ERR_OP


def test_user_op_invec_is_the_left_operand() -> None:
    seen: list[tuple[Any, ...]] = []

    def shift(invec: Any, inoutvec: Any, datatype: Any) -> None:
        seen.append((type(invec), invec.dtype, inoutvec.dtype, datatype))
        inoutvec[:] = invec * 10 + inoutvec

    op = Op.Create(shift)
    inout = np.array([3, 4], dtype=np.int32)
    op.Reduce_local(np.array([1, 2], dtype=np.int32), inout)
    assert inout.tolist() == [13, 24]
    assert seen == [(np.ndarray, np.dtype(np.int32), np.dtype(np.int32), D.INT)]
    inout = np.array([3.0, 4.0])
    op._reduce_arrays(np.array([1.0, 2.0]), inout, D.DOUBLE)
    assert inout.tolist() == [13.0, 24.0]


def test_user_op_buffers_work_with_frombuffer() -> None:
    def add(invec: Any, inoutvec: Any, datatype: Any) -> None:
        x = np.frombuffer(invec, dtype="d")
        y = np.frombuffer(inoutvec, dtype="d")
        y += x

    inout = bytearray(np.array([1.0, 2.0, 3.0]).tobytes())
    Op.Create(add, commute=True).Reduce_local(
        [np.array([10.0, 20.0, 30.0]).tobytes(), D.DOUBLE], [inout, D.DOUBLE]
    )
    assert np.frombuffer(inout).tolist() == [11.0, 22.0, 33.0]


def test_user_op_on_pair_type_sees_fields() -> None:
    def keep_larger_index(invec: Any, inoutvec: Any, datatype: Any) -> None:
        names = invec.dtype.names
        np.copyto(inoutvec, invec, where=invec[names[1]] > inoutvec[names[1]])

    inout = pairs(D.DOUBLE_INT, [(1.0, 5), (2.0, 0)])
    Op.Create(keep_larger_index).Reduce_local(pairs(D.DOUBLE_INT, [(9.0, 1), (8.0, 3)]), inout)
    assert inout.tolist() == [(1.0, 5), (8.0, 3)]


def test_user_op_not_called_for_empty_buffers_and_errors_propagate() -> None:
    calls: list[int] = []
    op = Op.Create(lambda invec, inoutvec, datatype: calls.append(len(invec)))
    op.Reduce_local(np.empty(0), np.empty(0))
    assert calls == []

    def broken(invec: Any, inoutvec: Any, datatype: Any) -> None:
        raise ZeroDivisionError("user bug")

    with pytest.raises(ZeroDivisionError):
        Op.Create(broken).Reduce_local(np.ones(2), np.ones(2))


def test_user_op_on_objects_gets_left_right_none() -> None:
    op = Op.Create(lambda left, right, datatype: (left, right, datatype))
    assert op(1, 2) == (1, 2, None)
    assert op._reduce_objects("a", "b") == ("a", "b", None)
    concat = Op.Create(lambda left, right, datatype: left + right)
    result = "x0"
    for rank in range(1, 4):
        result = concat._reduce_objects(result, f"x{rank}")
    assert result == "x0x1x2x3"


# --- Reduce_local ------------------------------------------------------------------------


def test_reduce_local_buffer_forms() -> None:
    inout = np.array([1.0, 2.0, 3.0, 4.0])
    SUM.Reduce_local([np.array([10.0, 20.0, 30.0, 40.0]), 2, D.DOUBLE], [inout, 2, D.DOUBLE])
    assert inout.tolist() == [11.0, 22.0, 3.0, 4.0]
    inout = np.array([1, 2, 3], dtype=np.int32)
    MAX.Reduce_local([np.array([5, 0, 5], dtype=np.int32), "i"], [inout, "i"])
    assert inout.tolist() == [5, 2, 5]
    inout = np.array([1.0, 2.0, 3.0])
    PROD.Reduce_local([np.array([2.0, 3.0]), 1, D.DOUBLE], [inout, (1, 2), D.DOUBLE])
    assert inout.tolist() == [1.0, 2.0, 6.0]
    inout = bytearray(b"\x0f\xf0")
    BOR.Reduce_local([b"\x01\x02", D.BYTE], [inout, D.BYTE])
    assert bytes(inout) == b"\x0f\xf2"


@pytest.mark.parametrize(
    ("inbuf", "inoutbuf", "error"),
    [
        (np.ones(3), np.ones(4), ValueError),
        ([np.ones(4), 2, D.DOUBLE], [np.ones(4), 3, D.DOUBLE], ValueError),
        (np.ones(3), np.ones(3, dtype=np.int32), ValueError),
        (IN_PLACE, np.ones(3), ERR_BUFFER),
        (np.ones(3), IN_PLACE, ERR_BUFFER),
        (np.ones(3), np.ones(3).tobytes(), BufferError),
        ([1.0, 2.0], np.ones(2), TypeError),
    ],
)
def test_reduce_local_errors(inbuf: Any, inoutbuf: Any, error: Any) -> None:
    # Buffer mismatches are Python errors, as in mpi4py; IN_PLACE is MPI's refusal.
    with pytest.raises((MPIException, ValueError, TypeError, BufferError)) as excinfo:
        SUM.Reduce_local(inbuf, inoutbuf)
    if isinstance(excinfo.value, MPIException):
        assert err_class(excinfo) == error
    else:
        assert type(excinfo.value) is error


@pytest.mark.parametrize("op", [OP_NULL, REPLACE, NO_OP, MAXLOC])
def test_reduce_local_rejects_ops(op: Op) -> None:
    inout = np.ones(3)
    with pytest.raises(MPIException) as excinfo:
        op.Reduce_local(np.zeros(3), inout)
    assert err_class(excinfo) == ERR_OP
    assert inout.tolist() == [1.0, 1.0, 1.0]


# --- handles and Free --------------------------------------------------------------------


def test_free_rules() -> None:
    for op in (SUM, MAXLOC, REPLACE, OP_NULL):
        with pytest.raises(MPIException) as excinfo:
            op.Free()
        assert err_class(excinfo) == ERR_OP
        op.free()
    assert SUM(1, 2) == 3
    op = Op.Create(lambda invec, inoutvec, datatype: None)
    copy = Op(op)
    op.Free()
    assert op == OP_NULL
    assert not op
    assert copy != OP_NULL
    assert copy
    with pytest.raises(MPIException) as excinfo:
        op.Free()
    assert err_class(excinfo) == ERR_OP
    copy.free()
    assert copy == OP_NULL


def test_handle_semantics() -> None:
    assert Op() == OP_NULL
    assert not OP_NULL
    assert OP_NULL.is_predefined
    assert all(OPS.values())
    assert Op(SUM) == SUM
    with pytest.raises(TypeError):
        hash(SUM)  # handles are unhashable, as in mpi4py
    assert SUM != MAX
    assert (SUM == 1) is False
    assert all((a == b) == (a is b) for a in OPS.values() for b in OPS.values())
    assert repr(SUM) == "MPI.SUM"
    assert "user-defined" in repr(Op.Create(lambda invec, inoutvec, datatype: None))
    for op in (*OPS.values(), OP_NULL):
        assert pickle.loads(pickle.dumps(op)) is op
    with pytest.raises(TypeError):
        Op(5)  # type: ignore[arg-type]


def test_user_operations_are_limited_as_in_mpi4py() -> None:
    ops = [Op.Create(lambda invec, inoutvec, datatype: None) for _ in range(32)]
    with pytest.raises(RuntimeError):
        Op.Create(lambda invec, inoutvec, datatype: None)
    copy = Op(ops[0])
    ops[0].Free()  # frees the operation: its slot is free, even with a copy left
    ops.append(Op.Create(lambda invec, inoutvec, datatype: None))
    assert copy.Is_commutative() is False
    for op in ops:
        op.free()


def add(left: Any, right: Any, datatype: Any) -> Any:
    """A user operation for Python objects, picklable by reference."""
    return left + right


def test_user_operations_pickle_by_function() -> None:
    op = Op.Create(add, commute=True)
    again = pickle.loads(pickle.dumps(op))
    assert again != op and again.is_commutative and again(2, 3) == 5
    op.Free()
    again.Free()


def test_exports() -> None:
    from ipympi.mpi import op as _op

    assert sorted(_op.__all__) == sorted([*OPS, "OP_NULL", "Op"])
    for name in _op.__all__:
        assert getattr(_op, name) is not None


# --- Python objects: __call__ and _reduce_objects ----------------------------------------

OBJECT_CASES = [
    (MAX, 3, 4, 4), (MAX, 6, 3, 6), (MAX, 1, 1.0, 1), (MAX, 1.0, 1, 1.0),
    (MIN, 3, 4, 3), (MIN, 1.0, 1, 1.0), (SUM, 3, 4, 7), (SUM, "a", "b", "ab"),
    (SUM, [1], [2], [1, 2]), (PROD, 3, 4, 12), (PROD, 2.5, 2, 5.0),
    (LAND, 3, 4, True), (LAND, 0, 5, False), (LOR, 0, 0, False), (LOR, 0, "x", True),
    (LXOR, 3, 4, False), (LXOR, True, 0, True), (BAND, 6, 3, 2), (BOR, 6, 3, 7),
    (BXOR, 6, 3, 5), (BAND, True, False, False),
    (MAXLOC, (1, 2), (1, 0), (1, 0)), (MAXLOC, (1, 2), (3, 0), (3, 0)),
    (MAXLOC, [1, 2], [1, 5], (1, 2)), (MAXLOC, (1.0, 2), (1, 2), (1.0, 2)),
    (MINLOC, (1, 2), (3, 0), (1, 2)), (MINLOC, (1, 2), (1, 0), (1, 0)),
    (MINLOC, (2, 1), (1, 5), (1, 5)), (REPLACE, 3, 4, 4), (NO_OP, 3, 4, 3),
]  # fmt: skip


@pytest.mark.parametrize(("op", "x", "y", "expected"), OBJECT_CASES)
def test_objects(op: Op, x: Any, y: Any, expected: Any) -> None:
    for result in (op(x, y), op._reduce_objects(x, y)):
        assert result == expected
        assert type(result) is type(expected)


def test_objects_numpy_arrays_and_errors() -> None:
    a, b = np.array([1, 0, 3]), np.array([1, 1, 2])
    assert SUM(a, b).tolist() == [2, 1, 5]
    assert BXOR(a, b).tolist() == [0, 1, 1]
    with pytest.raises(TypeError):
        MAXLOC(3, 4)
    with pytest.raises(ValueError):
        OP_NULL(1, 2)  # nothing to apply (as mpi4py)


# --- vectorisation -----------------------------------------------------------------------


VECTOR_CASES = [(SUM, D.DOUBLE), (LAND, D.INT), (BXOR, D.UINT64_T), (MAXLOC, D.DOUBLE_INT)]


def python_lines_run(action: Callable[[], None]) -> int:
    """Count the Python source lines executed by ``action()`` (all frames)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        action()
    finally:
        sys.settrace(previous)
    return count


@pytest.mark.parametrize(("op", "datatype"), VECTOR_CASES)
def test_reduce_arrays_runs_no_python_per_element(op: Op, datatype: D.Datatype) -> None:
    dtype = datatype._impl.np_dtype
    invec, inoutvec = np.zeros(10_000, dtype), np.ones(10_000, dtype)
    assert python_lines_run(lambda: op._reduce_arrays(invec, inoutvec, datatype)) < 200


@pytest.mark.parametrize(("op", "datatype"), VECTOR_CASES)
def test_reduce_arrays_on_a_million_elements_is_fast(op: Op, datatype: D.Datatype) -> None:
    dtype = datatype._impl.np_dtype
    invec, inoutvec = np.zeros(1_000_000, dtype), np.ones(1_000_000, dtype)
    start = time.perf_counter()
    op._reduce_arrays(invec, inoutvec, datatype)
    assert time.perf_counter() - start < 1.0


# --- differential checks against mpi4py --------------------------------------------------

DIFF_VALUES = [
    (3, 4), (6, 3), (0, 5), (True, False), (1, 1.0), (1.0, 1), (2.5, -1.5),
    ((1, 2), (1, 0)), ((1, 2), (3, 0)), ([1, 2], [1, 5]), ((1.0, 2), (1, 2)), ("a", "b"),
]  # fmt: skip


# MPICH's REAL16 and COMPLEX32 are IEEE quad precision; numpy's longdouble is not.
QUAD = {"REAL16", "COMPLEX32"}


def outcome(op: Any, x: Any, y: Any) -> str:
    try:
        result = op(x, y)
    except (TypeError, ValueError) as exc:
        return f"raises {type(exc).__name__}"
    return f"{type(result).__name__} {result!r}"


@pytest.mark.parametrize("op_name", sorted(OPS))
def test_call_matches_mpi4py(op_name: str) -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    theirs = getattr(mpi, op_name)
    assert OPS[op_name].Is_commutative() == theirs.Is_commutative()
    for x, y in DIFF_VALUES:
        assert outcome(OPS[op_name], x, y) == outcome(theirs, x, y), (x, y)


def test_accepted_reductions_match_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for op_name in sorted(set(OPS) - {"MAXLOC", "MINLOC"}):
        for dt_name in datatype_names():
            datatype, theirs = getattr(D, dt_name), getattr(mpi, dt_name, None)
            if GROUP_OF[dt_name] not in ALLOWED[op_name] or not needs_data(datatype):
                continue
            if theirs is None or theirs == mpi.DATATYPE_NULL or dt_name in QUAD:
                continue
            left, right = sample(datatype, 3), sample(datatype, 4)
            ours, expected = right.copy(), right.copy()
            OPS[op_name].Reduce_local([left, datatype], [ours, datatype])
            getattr(mpi, op_name).Reduce_local([left, theirs], [expected, theirs])
            np.testing.assert_array_equal(ours, expected, err_msg=f"{op_name} {dt_name}")
    for dt_name in PAIRS:
        left = pairs(getattr(D, dt_name), [case[0] for case in LOC_CASES])
        right = pairs(getattr(D, dt_name), [case[1] for case in LOC_CASES])
        for op_name in ("MAXLOC", "MINLOC"):
            ours, expected = right.copy(), right.copy()
            OPS[op_name].Reduce_local([left, getattr(D, dt_name)], [ours, getattr(D, dt_name)])
            theirs = getattr(mpi, dt_name)
            getattr(mpi, op_name).Reduce_local([left, theirs], [expected, theirs])
            assert ours.tolist() == expected.tolist(), (op_name, dt_name)


# -- one element as a Python number (ScalarValues): bit for bit what the array kernel gives --
_SCALAR_TYPES = ["f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "l", "L"]
_FLOAT_SPECIALS = [0.0, -0.0, 1.0, -2.5, 1e308, -1e308, 5e-324, np.inf, -np.inf, np.nan, -np.nan]


def _operands(dtype: np.dtype) -> list[Any]:
    if dtype.kind == "f":
        return [np.float64(v) for v in _FLOAT_SPECIALS]
    info = np.iinfo(dtype)
    picks = {info.min, info.min + 1, -1, 0, 1, 2, 3, info.max - 1, info.max, info.max // 3}
    return [dtype.type(v) for v in sorted(p for p in picks if info.min <= p <= info.max)]


@pytest.mark.parametrize("op", [SUM, PROD, MAX, MIN], ids=["SUM", "PROD", "MAX", "MIN"])
@pytest.mark.parametrize("code", _SCALAR_TYPES)
def test_scalar_kernel_matches_the_array_kernel_bit_for_bit(op: Op, code: str) -> None:
    from ipympi.core.reductions import ScalarValues

    dtype = np.dtype(code)
    probe = np.zeros(1, dtype)
    values = ScalarValues.for_array(op._impl, probe, probe)
    assert values is not None
    for left in _operands(dtype):
        for right in _operands(dtype):
            want = np.array([right], dtype)
            op._impl.reduce_arrays(np.array([left], dtype), want, None)
            # each operand travels as the element's bytes, as between ranks
            a = values.received(None, bytearray(values.wire(left.item())))
            b = values.received(None, bytearray(values.wire(right.item())))
            got = values.combine(a, b)
            assert values.wire(got) == want.tobytes(), (code, left, right, got, want)


def test_scalar_values_only_where_they_give_the_same_result() -> None:
    from ipympi.core.reductions import ScalarValues

    def scalar(op: Op, arr: np.ndarray, out: np.ndarray | None = None) -> bool:
        return ScalarValues.for_array(op._impl, arr, out) is not None

    one = np.zeros(1)
    assert scalar(SUM, one) and scalar(MAX, one, np.zeros(1))
    assert not scalar(SUM, np.zeros(2))  # arrays of more elements: numpy
    assert not scalar(SUM, np.zeros(1, "f4"))  # float32 would need rounding at each step
    assert not scalar(SUM, np.zeros(1, "c16")) and not scalar(LAND, np.zeros(1, "?"))
    assert not scalar(SUM, np.zeros(1, ">f8" if sys.byteorder == "little" else "<f8"))
    assert not scalar(BAND, np.zeros(1, "i4")) and not scalar(MAXLOC, one)
    assert not scalar(SUM, one, np.zeros(1, "i8"))  # numpy's casting rules decide there
    user = Op.Create(lambda a, b, t: None, commute=True)
    try:
        assert not scalar(user, one)
    finally:
        user.Free()
