"""Unavailable functions and methods raise ``NotImplementedError`` saying why not."""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest

from ipympi import MPI
from ipympi.mpi import unsupported as U


def expect_unavailable(call: Callable[[], Any], what: str, feature: str) -> str:
    with pytest.raises(NotImplementedError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"MPI.{what} is not available in ipympi: {feature} is outside")
    return message


def test_message_format() -> None:
    message = expect_unavailable(lambda: U.Get_abi_info(), "Get_abi_info", "the standard ABI")
    assert message.endswith("is outside its scope")


FUNCTIONS = {
    "Get_abi_version": "the standard ABI",
    "Get_abi_info": "the standard ABI",
    "Get_abi_fortran_info": "the standard ABI",
}
FUNCTION_ARGS: dict[str, tuple[Any, ...]] = {}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_raise(name: str) -> None:
    function = getattr(U, name)
    args = FUNCTION_ARGS.get(name, ())
    expect_unavailable(lambda: function(*args), name, FUNCTIONS[name])


def test_every_class_of_mpi4py_exists() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    classes = {n for n in dir(mpi) if isinstance(getattr(mpi, n), type)}
    assert {n for n in classes if not hasattr(MPI, n)} == set()


def test_functions_cover_mpi4py() -> None:
    mpi = pytest.importorskip("mpi4py.MPI")
    for name in FUNCTIONS:
        assert hasattr(mpi, name), name


@pytest.mark.parametrize(
    ("owner", "name", "feature"),
    [
        ("COMM_WORLD", "Agree", "fault tolerance (ULFM)"),
        ("COMM_WORLD", "Shrink", "fault tolerance (ULFM)"),
    ],
)
def test_methods_of_missing_features_on_existing_classes_raise(
    owner: str, name: str, feature: str
) -> None:
    """Probing code (``try: comm.Agree(...) except NotImplementedError``) works as with
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
