"""Attribute caching on datatypes, in-process (mpi4py's names and callback conventions).

``Datatype.Create_keyval``/``Free_keyval``, ``Set_attr``/``Get_attr``/``Delete_attr``;
copy callbacks run on ``Dup`` only (``MPI_Type_dup``), returning the new value,
``NotImplemented`` leaving the attribute out, ``None`` never copying and ``True``
copying unchanged; a raising copy callback fails the ``Dup``; delete callbacks on
``Free``, ``Delete_attr`` and overwrite; keyvals of communicators and datatypes do
not mix; predefined datatypes carry attributes too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ipympi import MPI
from ipympi.core.errors import ERR_KEYVAL, ERR_OTHER, ERR_TYPE
from ipympi.core.errors import Exception as MPIException

Datatype = MPI.Datatype


def err_class(excinfo: pytest.ExceptionInfo[MPIException]) -> int:
    return excinfo.value.Get_error_class()


@pytest.fixture
def log() -> list[tuple[Any, ...]]:
    return []


@pytest.fixture
def keys(log: list[tuple[Any, ...]]) -> Iterator[dict[str, int]]:
    """Keyvals with each kind of copy callback, all logging their deletes."""

    def delete(dt: Any, key: int, value: Any) -> None:
        assert isinstance(dt, Datatype) and dt  # still valid in the callback
        log.append(("delete", key, value))

    def plus(old: Any, key: int, value: Any) -> Any:
        assert isinstance(old, Datatype)
        log.append(("copy", key, value))
        return value + 1

    made = {
        "plus": Datatype.Create_keyval(plus, delete),
        "never": Datatype.Create_keyval(None, delete),
        "same": Datatype.Create_keyval(True, delete),
        "skip": Datatype.Create_keyval(lambda o, k, v: NotImplemented, delete),
    }
    yield made
    for key in made.values():
        Datatype.Free_keyval(key)


def test_create_keyval_defaults_and_distinct_numbers() -> None:
    a = Datatype.Create_keyval()
    b = Datatype.Create_keyval(copy_fn=None, delete_fn=None, nopython=True)
    assert isinstance(a, int) and a != b
    assert MPI.KEYVAL_INVALID not in (a, b)
    assert Datatype.Free_keyval(a) == MPI.KEYVAL_INVALID
    assert Datatype.Free_keyval(b) == MPI.KEYVAL_INVALID


def test_copy_false_never_copies_and_non_callables_fail_when_run() -> None:
    # as in mpi4py: False is None's "never copy"; anything else is called when due
    never = Datatype.Create_keyval(copy_fn=False)
    bad_copy = Datatype.Create_keyval(copy_fn=3)
    bad_delete = Datatype.Create_keyval(delete_fn="x")
    dt = MPI.INT.Dup()
    try:
        dt.Set_attr(never, "v")
        copy = dt.Dup()
        assert copy.Get_attr(never) is None
        copy.Free()
        dt.Set_attr(bad_copy, "v")
        with pytest.raises(MPIException) as info:
            dt.Dup()
        assert info.value.Get_error_class() == MPI.ERR_OTHER
        dt.Delete_attr(bad_copy)
        dt.Set_attr(bad_delete, "v")
        with pytest.raises(MPIException) as info:
            dt.Delete_attr(bad_delete)
        assert info.value.Get_error_class() == MPI.ERR_OTHER
        assert dt.Get_attr(bad_delete) is None
    finally:
        dt.Free()
        for key in (never, bad_copy, bad_delete):
            Datatype.Free_keyval(key)


def test_set_get_delete(keys: dict[str, int], log: list[tuple[Any, ...]]) -> None:
    dt = MPI.INT.Create_contiguous(2)
    k = keys["plus"]
    assert dt.Get_attr(k) is None
    obj = [1, 2]
    dt.Set_attr(k, obj)
    assert dt.Get_attr(k) is obj
    assert Datatype(dt).Get_attr(k) is obj  # another handle, same datatype
    dt.Delete_attr(k)
    assert log == [("delete", k, obj)]
    assert dt.Get_attr(k) is None
    dt.Delete_attr(k)  # absent: no error, no callback
    assert len(log) == 1
    dt.Free()


def test_attributes_are_per_datatype(keys: dict[str, int]) -> None:
    a, b = MPI.INT.Create_contiguous(2), MPI.INT.Create_contiguous(2)
    a.Set_attr(keys["same"], "a")
    assert b.Get_attr(keys["same"]) is None
    a.Free()
    b.Free()


def test_overwrite_runs_delete_callback(keys: dict[str, int], log: list[tuple[Any, ...]]) -> None:
    dt = MPI.DOUBLE.Dup()
    k = keys["never"]
    dt.Set_attr(k, 1)
    dt.Set_attr(k, 2)
    assert log == [("delete", k, 1)]
    assert dt.Get_attr(k) == 2
    dt.Free()
    assert log == [("delete", k, 1), ("delete", k, 2)]


def test_free_runs_delete_callbacks_last_set_first(
    keys: dict[str, int], log: list[tuple[Any, ...]]
) -> None:
    dt = MPI.INT.Create_vector(2, 1, 3)
    dt.Set_attr(keys["plus"], 1)
    dt.Set_attr(keys["same"], 2)
    dt.Set_attr(keys["never"], 3)
    dt.Free()
    assert dt == MPI.DATATYPE_NULL
    assert log == [
        ("delete", keys["never"], 3),
        ("delete", keys["same"], 2),
        ("delete", keys["plus"], 1),
    ]


def test_lowercase_free_runs_delete_callbacks(
    keys: dict[str, int], log: list[tuple[Any, ...]]
) -> None:
    dt = MPI.INT.Dup()
    dt.Set_attr(keys["same"], "x")
    dt.free()
    assert log == [("delete", keys["same"], "x")]


def test_dup_runs_copy_callbacks(keys: dict[str, int], log: list[tuple[Any, ...]]) -> None:
    dt = MPI.INT.Create_contiguous(3)
    obj = object()
    dt.Set_attr(keys["plus"], 10)
    dt.Set_attr(keys["never"], "never")
    dt.Set_attr(keys["same"], obj)
    dt.Set_attr(keys["skip"], 3.5)
    new = dt.Dup()
    assert new.Get_attr(keys["plus"]) == 11
    assert new.Get_attr(keys["never"]) is None
    assert new.Get_attr(keys["same"]) is obj
    assert new.Get_attr(keys["skip"]) is None
    assert log == [("copy", keys["plus"], 10)]
    # the old datatype keeps its own values
    assert dt.Get_attr(keys["plus"]) == 10 and dt.Get_attr(keys["never"]) == "never"
    # Create_dup is the same operation
    again = dt.Create_dup()
    assert again.Get_attr(keys["plus"]) == 11
    for t in (dt, new, again):
        t.Free()


def test_copy_callback_receives_old_datatype(keys: dict[str, int]) -> None:
    seen = []
    k = Datatype.Create_keyval(lambda old, key, value: seen.append((old, key, value)) or value)
    dt = MPI.INT.Dup()
    dt.Set_attr(k, "v")
    new = dt.Dup()
    assert seen == [(dt, k, "v")]
    assert new.Get_attr(k) == "v"
    Datatype.Free_keyval(k)
    dt.Free()
    new.Free()


@pytest.mark.parametrize(
    "ctor",
    [
        lambda t: t.Create_contiguous(1),
        lambda t: t.Create_vector(1, 1, 1),
        lambda t: t.Create_resized(0, t.extent),
        lambda t: t.Create_indexed([1], [0]),
        lambda t: Datatype.Create_struct([1], [0], [t]),
    ],
)
def test_other_constructors_do_not_copy(keys: dict[str, int], log: list[tuple[Any, ...]], ctor):
    dt = MPI.INT.Dup()
    dt.Set_attr(keys["same"], "kept")
    dt.Set_attr(keys["plus"], 1)
    new = ctor(dt)
    assert new.Get_attr(keys["same"]) is None and new.Get_attr(keys["plus"]) is None
    assert log == []
    new.Free()
    dt.Free()


def test_raising_copy_fails_dup_and_cleans_up(
    keys: dict[str, int], log: list[tuple[Any, ...]]
) -> None:
    def boom(old: Any, key: int, value: Any) -> Any:
        raise ValueError("no copy")

    def delete(dt: Any, key: int, value: Any) -> None:
        log.append(("delete-bad", key, value))

    bad = Datatype.Create_keyval(boom, delete)
    dt = MPI.INT.Dup()
    dt.Set_attr(keys["same"], "s")
    dt.Set_attr(bad, "b")
    with pytest.raises(MPIException) as excinfo:
        dt.Dup()
    assert err_class(excinfo) == ERR_OTHER
    assert isinstance(excinfo.value.__cause__, ValueError)
    # the copy already made was deleted again; the old datatype is untouched
    assert log == [("delete", keys["same"], "s")]
    assert dt.Get_attr(keys["same"]) == "s" and dt.Get_attr(bad) == "b"

    def mpi_boom(old: Any, key: int, value: Any) -> Any:
        raise MPIException(ERR_TYPE, "refused")

    k2 = Datatype.Create_keyval(mpi_boom)
    dt2 = MPI.INT.Dup()
    dt2.Set_attr(k2, 0)
    with pytest.raises(MPIException) as excinfo:
        dt2.Dup()
    assert err_class(excinfo) == ERR_TYPE
    dt2.Free()
    dt.Delete_attr(bad)
    dt.Free()
    Datatype.Free_keyval(bad)
    Datatype.Free_keyval(k2)


def test_raising_delete_fails_delete_attr_only(capsys: Any) -> None:
    # as with mpi4py on MPICH: Delete_attr fails (the attribute is gone all the
    # same); an overwrite and Free go on; each failure's traceback is printed
    def boom(dt: Any, key: int, value: Any) -> None:
        raise RuntimeError("no delete")

    k = Datatype.Create_keyval(delete_fn=boom)
    dt = MPI.INT.Dup()
    dt.Set_attr(k, 1)
    dt.Set_attr(k, 2)
    assert dt.Get_attr(k) == 2
    with pytest.raises(MPIException) as excinfo:
        dt.Delete_attr(k)
    assert err_class(excinfo) == ERR_OTHER
    assert dt.Get_attr(k) is None
    dt.Set_attr(k, 3)
    dt.Free()
    assert dt == MPI.DATATYPE_NULL
    assert capsys.readouterr().err.count("RuntimeError: no delete") == 3
    Datatype.Free_keyval(k)


def test_predefined_datatypes_carry_attributes(
    keys: dict[str, int], log: list[tuple[Any, ...]]
) -> None:
    k = keys["plus"]
    MPI.DOUBLE.Set_attr(k, 5)
    try:
        assert MPI.DOUBLE.Get_attr(k) == 5
        assert MPI.FLOAT64_T.Get_attr(k) == 5  # an alias is the same datatype
        assert MPI.FLOAT.Get_attr(k) is None
        dup = MPI.DOUBLE.Dup()
        assert dup.Get_attr(k) == 6
        dup.Free()
    finally:
        MPI.DOUBLE.Delete_attr(k)
    assert MPI.DOUBLE.Get_attr(k) is None
    assert ("delete", k, 5) in log


def test_comm_and_datatype_keyvals_do_not_mix() -> None:
    ck = MPI.Comm.Create_keyval()
    tk = Datatype.Create_keyval()
    dt = MPI.INT.Dup()
    for call in (
        lambda: dt.Set_attr(ck, 1),
        lambda: dt.Get_attr(ck),
        lambda: dt.Delete_attr(ck),
        lambda: Datatype.Free_keyval(ck),
        lambda: MPI.Comm.Free_keyval(tk),
        lambda: MPI.INT.Get_attr(MPI.TAG_UB),
        lambda: dt.Set_attr(MPI.TAG_UB, 1),
    ):
        with pytest.raises(MPIException) as excinfo:
            call()
        assert err_class(excinfo) == ERR_KEYVAL
    MPI.Comm.Free_keyval(ck)
    Datatype.Free_keyval(tk)
    dt.Free()


def test_invalid_and_freed_keyvals() -> None:
    dt = MPI.INT.Dup()
    for key in (MPI.KEYVAL_INVALID, 12345, 12345.0):
        for call in (dt.Get_attr, dt.Delete_attr, lambda k: dt.Set_attr(k, 0)):
            with pytest.raises(MPIException) as excinfo:
                call(key)
            assert err_class(excinfo) == ERR_KEYVAL
    for key in ("key", None):  # not integers: a TypeError, as in mpi4py
        for call in (dt.Get_attr, dt.Delete_attr, lambda k: dt.Set_attr(k, 0)):
            with pytest.raises(TypeError):
                call(key)
    k = Datatype.Create_keyval()
    Datatype.Free_keyval(k)
    with pytest.raises(MPIException) as excinfo:
        dt.Set_attr(k, 1)
    assert err_class(excinfo) == ERR_KEYVAL
    with pytest.raises(MPIException) as excinfo:
        Datatype.Free_keyval(k)
    assert err_class(excinfo) == ERR_KEYVAL
    dt.Free()


def test_freed_keyval_attribute_keeps_its_callbacks(log: list[tuple[Any, ...]]) -> None:
    k = Datatype.Create_keyval(True, lambda d, key, v: log.append(("delete", key, v)))
    dt = MPI.INT.Dup()
    dt.Set_attr(k, "v")
    Datatype.Free_keyval(k)
    new = dt.Dup()  # the attribute still copies under its (freed) key
    dt.Free()
    new.Free()
    assert log == [("delete", k, "v"), ("delete", k, "v")]


def test_null_datatype_is_err_type() -> None:
    k = Datatype.Create_keyval()
    for call in (
        lambda: MPI.DATATYPE_NULL.Set_attr(k, 1),
        lambda: MPI.DATATYPE_NULL.Get_attr(k),
        lambda: MPI.DATATYPE_NULL.Delete_attr(k),
        MPI.DATATYPE_NULL.Dup,
    ):
        with pytest.raises(MPIException) as excinfo:
            call()
        assert err_class(excinfo) == ERR_TYPE
    Datatype.Free_keyval(k)
