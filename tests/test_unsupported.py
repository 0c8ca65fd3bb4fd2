"""Unavailable object types and functions: null handles work, everything else says why not."""

from __future__ import annotations

import copy
import pickle
import re
from typing import Any, Callable

import pytest

from ipympi import MPI
from ipympi.mpi import unsupported as U

FEATURES = {
    "Win": "one-sided communication",
    "File": "parallel I/O",
}
NULLS = {"Win": "WIN_NULL", "File": "FILE_NULL"}


def expect_unavailable(call: Callable[[], Any], what: str, feature: str) -> str:
    with pytest.raises(NotImplementedError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"MPI.{what} is not available in ipympi: {feature} is outside")
    return message


def test_message_format() -> None:
    message = expect_unavailable(lambda: U.Win.Create(None), "Win", "one-sided communication")
    assert message == (
        "MPI.Win is not available in ipympi: one-sided communication is outside its scope "
        "(called Win.Create)"
    )


@pytest.mark.parametrize("cls_name", sorted(NULLS))
def test_null_handles(cls_name: str) -> None:
    cls = getattr(U, cls_name)
    null = getattr(U, NULLS[cls_name])
    assert isinstance(null, cls)
    assert not null
    assert cls() == null and cls(null) == null
    with pytest.raises(TypeError):
        hash(null)
    assert repr(null) == f"MPI.{NULLS[cls_name]}"
    assert pickle.loads(pickle.dumps(null)) == null
    assert copy.deepcopy(null) == null and copy.copy(null) == null
    assert (null == 0) is False
    assert cls.fromhandle(null.handle) == null and null.py2f() == null.toint() == null.handle
    null.free()  # a null handle: nothing to do
    with pytest.raises(TypeError):
        cls(42)


def test_handles_of_different_types_differ() -> None:
    assert U.WIN_NULL != U.FILE_NULL


CREATORS = [
    ("Win", lambda: U.Win.Create(bytearray(8))),
    ("Win", lambda: U.Win.Allocate(8)),
    ("Win", lambda: U.Win.Allocate_shared(8)),
    ("Win", lambda: U.Win.Create_dynamic()),
    ("File", lambda: U.File.Open(None, "x")),
    ("File", lambda: U.File.Delete("x")),
]


@pytest.mark.parametrize(("cls_name", "call"), CREATORS, ids=[c for c, _ in CREATORS])
def test_constructors_raise(cls_name: str, call: Callable[[], Any]) -> None:
    expect_unavailable(call, cls_name, FEATURES[cls_name])


HANDLE_CALLS = [
    ("Win", lambda: U.WIN_NULL.Put(b"", 0)),
    ("Win", lambda: U.WIN_NULL.Fence()),
    ("Win", lambda: U.WIN_NULL.Get_name()),
    ("Win", lambda: U.WIN_NULL.Free()),
    ("Win", lambda: U.WIN_NULL.tomemory()),
    ("Win", lambda: U.WIN_NULL.group),
    ("Win", lambda: U.WIN_NULL.flavor),
    ("File", lambda: U.FILE_NULL.Read(bytearray(1))),
    ("File", lambda: U.FILE_NULL.Close()),
    ("File", lambda: U.FILE_NULL.size),
]


@pytest.mark.parametrize(("cls_name", "call"), HANDLE_CALLS, ids=[c for c, _ in HANDLE_CALLS])
def test_methods_and_properties_raise(cls_name: str, call: Callable[[], Any]) -> None:
    expect_unavailable(call, cls_name, FEATURES[cls_name])


def test_probing_with_hasattr_does_not_raise() -> None:
    assert hasattr(U.Win, "Allocate_shared")
    assert hasattr(U.WIN_NULL, "Put")
    assert not hasattr(U.WIN_NULL, "no_such_method")
    assert callable(U.Win.Create)


FUNCTIONS = {
    "Register_datarep": "parallel I/O",
    "Get_abi_version": "the standard ABI",
    "Get_abi_info": "the standard ABI",
    "Get_abi_fortran_info": "the standard ABI",
}
FUNCTION_ARGS: dict[str, tuple[Any, ...]] = {
    "Register_datarep": ("rep",),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_raise(name: str) -> None:
    function = getattr(U, name)
    args = FUNCTION_ARGS.get(name, ())
    expect_unavailable(lambda: function(*args), name, FUNCTIONS[name])


def test_classes_missing_from_the_core_are_all_here() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    core = {
        "Comm", "Intracomm", "Intercomm", "Topocomm", "Cartcomm", "Graphcomm",
        "Distgraphcomm", "Group", "Request", "Prequest", "Status", "Message", "Datatype",
        "Op", "Errhandler", "Exception", "Pickle", "buffer", "memory", "Info", "Grequest",
        "BottomType", "InPlaceType", "BufferAutomaticType",  # sentinel types in _buffers
        "Session",
    }  # fmt: skip
    classes = {n for n in dir(mpi) if isinstance(getattr(mpi, n), type)}
    assert classes - core <= set(U.__all__)


@pytest.mark.parametrize("cls_name", sorted(FEATURES))
def test_stubs_cover_mpi4py_methods(cls_name: str) -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    theirs = {n for n in dir(getattr(mpi, cls_name)) if not n.startswith("_")}
    ours = {n for n in dir(getattr(U, cls_name)) if not n.startswith("_")}
    assert theirs - ours == set()


def test_functions_cover_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for name in FUNCTIONS:
        assert hasattr(mpi, name), name


@pytest.mark.parametrize(
    ("owner", "name", "feature"),
    [
        ("COMM_WORLD", "Spawn", "spawning processes"),
        ("COMM_WORLD", "Spawn_multiple", "spawning processes"),
        ("COMM_WORLD", "Agree", "fault tolerance (ULFM)"),
        ("COMM_WORLD", "Shrink", "fault tolerance (ULFM)"),
    ],
)
def test_methods_of_missing_features_on_existing_classes_raise(
    owner: str, name: str, feature: str
) -> None:
    """Probing code (``try: comm.Spawn(...) except NotImplementedError``) works as with
    mpi4py on an MPI without the feature; the message names the method and the feature."""

    obj = MPI.COMM_WORLD if owner == "COMM_WORLD" else MPI.COMM_SELF.Send_init(b"", MPI.PROC_NULL)
    cls = "Comm" if owner == "COMM_WORLD" else "Prequest"
    with pytest.raises(NotImplementedError, match=rf"MPI\.{cls}\.{name} .*{re.escape(feature)}"):
        getattr(obj, name)(1)


def test_every_method_of_mpi4py_communicators_and_requests_exists() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")

    for cls_name in ("Comm", "Intracomm", "Intercomm", "Cartcomm", "Prequest", "Request"):
        theirs = {n for n in dir(getattr(mpi, cls_name)) if not n.startswith("_")}
        ours = {n for n in dir(getattr(MPI, cls_name)) if not n.startswith("_")}
        # collectives live on Intracomm/Intercomm, not on the Comm base class
        missing = theirs - ours if cls_name != "Comm" else theirs - ours - set(dir(MPI.Intracomm))
        assert missing == set(), (cls_name, sorted(missing))
