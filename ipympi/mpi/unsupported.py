"""Object types and functions of mpi4py's ``MPI`` module that ipympi does not implement.

One-sided communication (``Win``), parallel I/O (``File``) and spawning processes
(``Spawn``) are outside ipympi's scope. The names
still exist so that programs written for mpi4py import cleanly and can probe for the
features: the classes are handle classes (:class:`~ipympi.core.handle.Handle`) whose only
object is the null one (``WIN_NULL``, ...), and every other method, property or
function raises ``NotImplementedError`` naming the missing feature.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

from ..core.errors import ERR_FILE, ERR_WIN
from ..core.handle import Handle, Kind, register

__all__ = [
    "FILE_NULL",
    "WIN_NULL",
    "File",
    "Get_abi_fortran_info",
    "Get_abi_info",
    "Get_abi_version",
    "Register_datarep",
    "Win",
]


def _unavailable(what: str, feature: str, called: str | None = None) -> NoReturn:
    message = f"MPI.{what} is not available in ipympi: {feature} is outside its scope"
    if called is not None:
        message += f" (called {called})"
    raise NotImplementedError(message)


def _stub_method(
    cls_name: str, name: str, feature: str, whole_class: bool = True
) -> Callable[..., NoReturn]:
    """A method raising ``NotImplementedError``: the class is unavailable, or (not
    ``whole_class``) only this method of an available class."""

    def method(*args: Any, **kwargs: Any) -> NoReturn:
        if whole_class:
            _unavailable(cls_name, feature, f"{cls_name}.{name}")
        _unavailable(f"{cls_name}.{name}", feature)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not available: {feature} is outside ipympi's scope."
    return method


def _stub_property(cls_name: str, name: str, feature: str) -> property:
    def getter(self: Any) -> NoReturn:
        _unavailable(cls_name, feature, f"{cls_name}.{name}")

    return property(getter, doc=f"Not available: {feature} is outside ipympi's scope.")


class _Unsupported(Handle):
    """A handle class of a feature ipympi does not implement: only its null handle exists.

    Subclasses list mpi4py's method and property names, which are generated as stubs
    raising ``NotImplementedError``.
    """

    __slots__ = ("_impl",)
    _feature = ""
    _methods: tuple[str, ...] = ()
    _properties: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_methods" not in cls.__dict__:
            return  # a program's subclass: its methods are its own
        for name in cls._methods:
            setattr(cls, name, _stub_method(cls.__name__, name, cls._feature))
        for name in cls._properties:
            setattr(cls, name, _stub_property(cls.__name__, name, cls._feature))

    def __repr__(self) -> str:
        return f"MPI.{type(self).__name__.upper()}_NULL"


_DYNAMIC = "spawning processes"
_ERRHANDLER_METHODS = ("Call_errhandler", "Create_errhandler", "Get_errhandler", "Set_errhandler")


class Win(_Unsupported):
    """Window for one-sided communication (not available)."""

    __slots__ = ()
    _mpi_kind = Kind("Win", 8, ERR_WIN, None)
    _feature = "one-sided communication"
    _methods = (
        *_ERRHANDLER_METHODS,
        "Create", "Allocate", "Allocate_shared", "Create_dynamic", "Attach", "Detach", "Free",
        "Put", "Get", "Accumulate", "Get_accumulate", "Fetch_and_op", "Compare_and_swap",
        "Rput", "Rget", "Raccumulate", "Rget_accumulate",
        "Fence", "Start", "Complete", "Post", "Wait", "Test",
        "Lock", "Unlock", "Lock_all", "Unlock_all",
        "Flush", "Flush_all", "Flush_local", "Flush_local_all", "Sync", "Shared_query",
        "Get_group", "Get_info", "Set_info", "Get_name", "Set_name",
        "Create_keyval", "Free_keyval", "Get_attr", "Set_attr", "Delete_attr", "tomemory",
    )  # fmt: skip
    _properties = (
        "attrs", "flavor", "group", "group_rank", "group_size", "info", "model", "name",
    )  # fmt: skip


class File(_Unsupported):
    """File handle for parallel I/O (not available)."""

    __slots__ = ()
    _mpi_kind = Kind("File", 4, ERR_FILE, None)
    _feature = "parallel I/O"
    _methods = (
        *_ERRHANDLER_METHODS,
        "Open", "Close", "Delete", "Sync", "Preallocate", "Get_size", "Set_size",
        "Get_amode", "Get_atomicity", "Set_atomicity", "Get_group", "Get_info", "Set_info",
        "Get_view", "Set_view", "Get_type_extent", "Get_byte_offset",
        "Seek", "Seek_shared", "Get_position", "Get_position_shared",
        "Read", "Read_all", "Read_at", "Read_at_all", "Read_shared", "Read_ordered",
        "Read_all_begin", "Read_all_end", "Read_at_all_begin", "Read_at_all_end",
        "Read_ordered_begin", "Read_ordered_end",
        "Write", "Write_all", "Write_at", "Write_at_all", "Write_shared", "Write_ordered",
        "Write_all_begin", "Write_all_end", "Write_at_all_begin", "Write_at_all_end",
        "Write_ordered_begin", "Write_ordered_end",
        "Iread", "Iread_all", "Iread_at", "Iread_at_all", "Iread_shared",
        "Iwrite", "Iwrite_all", "Iwrite_at", "Iwrite_at_all", "Iwrite_shared",
    )  # fmt: skip
    _properties = (
        "amode", "atomicity", "group", "group_rank", "group_size", "info", "size",
    )  # fmt: skip


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
                setattr(cls, name, _stub_method(cls._owner, name, feature, whole_class=False))


class CommFeatures(_UnsupportedMethods):
    """The communicator methods of spawning processes and fault tolerance (ULFM), which
    ``Comm`` inherits as ``NotImplementedError``."""

    __slots__ = ()
    _owner = "Comm"
    _features = {
        _DYNAMIC: ("Spawn", "Spawn_multiple"),
        "fault tolerance (ULFM)": (
            "Ack_failed", "Get_failed", "Agree", "Iagree", "Revoke", "Is_revoked",
            "Shrink", "Ishrink",
        ),
    }  # fmt: skip


WIN_NULL: Win = Win()
FILE_NULL: File = File()
register(globals(), ("WIN_NULL", "FILE_NULL"))  # constants (see core.handle)


# --- Module-level functions of unavailable features --------------------------------------


def Register_datarep(datarep: str, *args: Any, **kwargs: Any) -> NoReturn:
    """Register a file data representation (not available)."""
    _unavailable("Register_datarep", "parallel I/O")


def Get_abi_version() -> NoReturn:
    """Return the version of the standard MPI ABI (not available)."""
    _unavailable("Get_abi_version", "the standard ABI")


def Get_abi_info() -> NoReturn:
    """Return information about the standard MPI ABI (not available)."""
    _unavailable("Get_abi_info", "the standard ABI")


def Get_abi_fortran_info() -> NoReturn:
    """Return Fortran ABI information (not available)."""
    _unavailable("Get_abi_fortran_info", "the standard ABI")
