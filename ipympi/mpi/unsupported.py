"""Functions and methods of mpi4py's ``MPI`` module that ipympi does not implement.

Fault tolerance (ULFM) and the standard ABI's queries are outside ipympi's scope. The
names still exist so that programs written for mpi4py import cleanly and can probe for
the features: each raises ``NotImplementedError`` naming the missing feature, as mpi4py
raises it on an MPI without the feature.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

__all__ = [
    "Get_abi_fortran_info",
    "Get_abi_info",
    "Get_abi_version",
]


def _unavailable(what: str, feature: str) -> NoReturn:
    message = f"MPI.{what} is not available in ipympi: {feature} is outside its scope"
    raise NotImplementedError(message)


def _stub_method(cls_name: str, name: str, feature: str) -> Callable[..., NoReturn]:
    """A method of an available class raising ``NotImplementedError``."""

    def method(*args: Any, **kwargs: Any) -> NoReturn:
        _unavailable(f"{cls_name}.{name}", feature)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not available: {feature} is outside ipympi's scope."
    return method


class _UnsupportedMethods:
    """A mixin of methods of features ipympi lacks, for one of its existing classes.

    ``_features`` maps each feature to the names of its methods; each becomes a method
    raising ``NotImplementedError`` naming ``_owner.method`` and the feature, as mpi4py
    raises it on an MPI without the feature.
    """

    __slots__ = ()
    _owner = ""
    _features: dict[str, tuple[str, ...]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for feature, names in cls.__dict__.get("_features", {}).items():
            for name in names:
                setattr(cls, name, _stub_method(cls._owner, name, feature))


class CommFeatures(_UnsupportedMethods):
    """The communicator methods of fault tolerance (ULFM), which ``Comm`` inherits as
    ``NotImplementedError``."""

    __slots__ = ()
    _owner = "Comm"
    _features = {
        "fault tolerance (ULFM)": (
            "Ack_failed", "Get_failed", "Agree", "Iagree", "Revoke", "Is_revoked",
            "Shrink", "Ishrink",
        ),
    }  # fmt: skip


# --- Module-level functions of unavailable features --------------------------------------


def Get_abi_version() -> NoReturn:
    """Return the version of the standard MPI ABI (not available)."""
    _unavailable("Get_abi_version", "the standard ABI")


def Get_abi_info() -> NoReturn:
    """Return information about the standard MPI ABI (not available)."""
    _unavailable("Get_abi_info", "the standard ABI")


def Get_abi_fortran_info() -> NoReturn:
    """Return Fortran ABI information (not available)."""
    _unavailable("Get_abi_fortran_info", "the standard ABI")
