"""The object model of the handle classes (``_handle``): construction, identity, handle
numbers, freeing, pickling, subclassing, and ``MPI._sizeof``/``_addressof``/``_handleof``.

Everything here is local to a process, so it runs in this process (a world of one
rank); ``test_handle_numbers_agree_across_ranks`` checks the predefined numbers on
several ranks.
"""

from __future__ import annotations

import copy
import pickle
import weakref
from typing import Any

import pytest
from conftest import MPI_PRELUDE, RunMPI, assert_ok, mpi_program

from ipympi import MPI

NULLS = [
    MPI.DATATYPE_NULL, MPI.REQUEST_NULL, MPI.INFO_NULL, MPI.ERRHANDLER_NULL, MPI.SESSION_NULL,
    MPI.GROUP_NULL, MPI.WIN_NULL, MPI.OP_NULL, MPI.FILE_NULL, MPI.MESSAGE_NULL, MPI.COMM_NULL,
]  # fmt: skip
PREDEFINED = [
    MPI.INT, MPI.DOUBLE_INT, MPI.SUM, MPI.NO_OP, MPI.ERRORS_RETURN, MPI.ERRORS_ABORT,
    MPI.GROUP_EMPTY, MPI.INFO_ENV, MPI.MESSAGE_NO_PROC, MPI.COMM_SELF, MPI.COMM_WORLD,
]  # fmt: skip


def error_class(fn: Any, *args: Any) -> int:
    with pytest.raises(MPI.Exception) as info:
        fn(*args)
    return info.value.Get_error_class()


# --- construction and identity -------------------------------------------------------------
@pytest.mark.parametrize("obj", NULLS + PREDEFINED, ids=repr)
def test_construction_copies_and_compares_by_object(obj: Any) -> None:
    cls = type(obj)
    copied = cls(obj)
    assert copied == obj and copied is not obj and (copied != obj) is False
    assert bool(copied) == bool(obj)
    if obj:
        assert cls() != obj and not cls()
    with pytest.raises(TypeError):
        hash(obj)
    with pytest.raises(TypeError):
        obj < obj  # noqa: B015  (handles are unordered)
    with pytest.raises(TypeError):
        cls(1234)
    assert weakref.ref(obj)() is obj


def test_handles_of_different_kinds_never_match() -> None:
    for i, a in enumerate(NULLS):
        for b in NULLS[i + 1 :]:
            assert a != b and not a == b  # noqa: SIM201
            with pytest.raises(TypeError):
                type(a)(b)


def test_subclass_views_must_suit_the_object() -> None:
    assert type(MPI.Intracomm(MPI.COMM_NULL)) is MPI.Intracomm
    with pytest.raises(TypeError):
        MPI.Intercomm(MPI.COMM_WORLD)
    with pytest.raises(TypeError):
        MPI.Cartcomm(MPI.COMM_WORLD)
    cart = MPI.COMM_WORLD.Create_cart([1])
    assert MPI.Intracomm(cart) == cart and MPI.Topocomm(cart) == cart
    with pytest.raises(TypeError):
        MPI.Graphcomm(cart)
    cart.Free()
    request = MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL)
    with pytest.raises(TypeError):
        MPI.Prequest(request)
    assert MPI.Prequest(MPI.REQUEST_NULL) == MPI.REQUEST_NULL
    request.Wait()


def test_subclasses_define_new_and_pass_what_they_like() -> None:
    class MyComm(MPI.Intracomm):
        def __new__(cls, comm: Any = None) -> Any:
            return super().__new__(cls, None if comm is None else comm.Dup())

    mine = MyComm(MPI.COMM_SELF)
    assert type(mine) is MyComm and mine != MPI.COMM_SELF and mine.Get_size() == 1
    assert type(mine.Dup()) is MyComm  # as in mpi4py: Dup keeps the class, fromhandle not
    assert type(MyComm.fromhandle(mine.handle)) is MPI.Intracomm
    mine.Free()
    assert not mine and type(MyComm()) is MyComm


# --- handle numbers --------------------------------------------------------------------------
@pytest.mark.parametrize("obj", NULLS + PREDEFINED, ids=repr)
def test_numbers_map_back(obj: Any) -> None:
    number = obj.handle
    assert number >= 0 and number < 2**31
    assert obj.toint() == obj.py2f() == number == MPI._handleof(obj)
    for back in (type(obj).fromhandle(number), type(obj).fromint(number), type(obj).f2py(number)):
        assert back == obj and back is not obj and back.handle == number
    with pytest.raises(AttributeError):
        obj.handle = number


def test_numbers_of_created_objects() -> None:
    vector = MPI.INT.Create_vector(2, 1, 3)
    number = vector.handle
    assert number == vector.handle == MPI.Datatype(vector).handle
    assert MPI.Datatype.fromhandle(number) == vector
    assert MPI.INT.Create_vector(2, 1, 3).handle != number  # another datatype
    assert number >> 26 == MPI.INT.handle >> 26  # the kind's tag
    with pytest.raises(TypeError):
        MPI.Datatype.fromhandle("12")
    with pytest.raises(MPI.Exception) as info:
        MPI.Op.fromhandle(number)  # a datatype's number is no operation's
    assert info.value.Get_error_class() == MPI.ERR_OP


def test_numbers_follow_the_object_class() -> None:
    assert type(MPI.Comm.fromhandle(MPI.COMM_WORLD.handle)) is MPI.Intracomm
    assert type(MPI.Cartcomm.fromhandle(MPI.COMM_WORLD.handle)) is MPI.Intracomm
    persistent = MPI.COMM_SELF.Recv_init(bytearray(1), 0, 0)
    assert type(MPI.Request.fromhandle(persistent.handle)) is MPI.Prequest
    greq = MPI.Grequest.Start()
    assert type(MPI.Request.fromhandle(greq.handle)) is MPI.Grequest
    greq.Complete()
    greq.Wait()
    persistent.Free()


def test_number_of_a_dead_object_is_refused() -> None:
    number = MPI.INT.Dup().handle  # the datatype is garbage once the expression is done
    assert error_class(MPI.Datatype.fromhandle, number) == MPI.ERR_TYPE


def test_handle_numbers_agree_across_ranks(run_mpi: RunMPI) -> None:
    body = """
    numbers = [MPI.COMM_WORLD.handle, MPI.COMM_SELF.handle, MPI.DOUBLE.handle, MPI.MAX.handle]
    assert comm.allgather(numbers) == [numbers] * size
    """
    assert_ok(run_mpi(3, mpi_program(MPI_PRELUDE, body)), 3)


# --- freeing ---------------------------------------------------------------------------------
def test_free_leaves_constants_and_drops_handles_to_predefined_objects() -> None:
    for constant in PREDEFINED:
        constant.free()
        assert constant
        handle = type(constant)(constant)
        handle.free()
        assert not handle
    for null in NULLS:
        null.free()
        assert not null


def test_free_frees_created_objects() -> None:
    created = [
        MPI.INT.Dup(), MPI.Op.Create(lambda a, b, d: None), MPI.COMM_SELF.Get_group(),
        MPI.Info.Create(), MPI.COMM_SELF.Dup(), MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL),
        MPI.COMM_SELF.Get_errhandler(),
    ]  # fmt: skip
    for obj in created:
        for _ in range(2):
            obj.free()
            assert not obj


def test_freeing_predefined_objects() -> None:
    assert error_class(MPI.INT.Free) == MPI.ERR_TYPE
    assert error_class(MPI.SUM.Free) == MPI.ERR_OP
    assert error_class(MPI.Info(MPI.INFO_ENV).Free) == MPI.ERR_INFO
    MPI.GROUP_EMPTY.Free()  # legal; the constant stays
    MPI.ERRORS_RETURN.Free()
    assert MPI.GROUP_EMPTY and MPI.ERRORS_RETURN


# --- pickling --------------------------------------------------------------------------------
COPIERS = [
    lambda obj: pickle.loads(pickle.dumps(obj, 0)),
    lambda obj: pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)),
    copy.copy,
    copy.deepcopy,
]


@pytest.mark.parametrize("obj", NULLS + PREDEFINED, ids=repr)
def test_pickling_predefined(obj: Any) -> None:
    for copier in COPIERS:
        assert copier(obj) is obj
        again = copier(type(obj)(obj))
        assert again == obj and again is not obj and type(again) is type(obj)


def test_pickling_created_objects() -> None:
    vector = MPI.DOUBLE.Create_vector(2, 1, 4).Commit()
    again = pickle.loads(pickle.dumps(vector))
    assert again != vector and again.decode()[1:] == vector.decode()[1:]
    info = MPI.Info.Create({"a": "1"})
    assert pickle.loads(pickle.dumps(info)).items() == [("a", "1")]
    for local in (MPI.COMM_SELF.Dup(), MPI.COMM_SELF.Get_group(), MPI.Grequest.Start()):
        with pytest.raises(ValueError):
            pickle.dumps(local)


# --- low-level accessors ---------------------------------------------------------------------
def test_sizeof_addressof_handleof() -> None:
    status = MPI.Status()
    assert MPI._sizeof(MPI.Comm) == MPI._sizeof(MPI.COMM_WORLD) == 4
    assert MPI._sizeof(status) == MPI._sizeof(MPI.Status) == len(status.tomemory()) * 4
    assert MPI._addressof(MPI.INT) == id(MPI.INT)
    assert MPI._addressof(status) == MPI._handleof(status) != 0
    for accessor in (MPI._sizeof, MPI._addressof, MPI._handleof):
        with pytest.raises(TypeError):
            accessor(None)
    with pytest.raises(TypeError):
        MPI._addressof(MPI.Comm)
