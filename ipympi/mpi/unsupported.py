"""Object types and functions of mpi4py's ``MPI`` module that ipympi does not implement.

Parallel I/O (``File``), the sessions model (``Session``) and dynamic process
management are outside ipympi's scope. The names
still exist so that programs written for mpi4py import cleanly and can probe for the
features: the classes are handle classes (:class:`~ipympi.core.handle.Handle`) whose only
object is the null one (``FILE_NULL``, ...), and every other method, property or
function raises ``NotImplementedError`` naming the missing feature.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

from ..core.errors import ERR_FILE, ERR_SESSION
from ..core.handle import Handle, Kind, register
from .info import INFO_NULL

__all__ = [
    "FILE_NULL",
    "SESSION_NULL",
    "Close_port",
    "File",
    "Get_abi_fortran_info",
    "Get_abi_info",
    "Get_abi_version",
    "Lookup_name",
    "Open_port",
    "Publish_name",
    "Register_datarep",
    "Session",
    "Unpublish_name",
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


_DYNAMIC = "dynamic process management"
_ERRHANDLER_METHODS = ("Call_errhandler", "Create_errhandler", "Get_errhandler", "Set_errhandler")


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


class Session(_Unsupported):
    """MPI session (not available: ipympi uses the world model)."""

    __slots__ = ()
    _mpi_kind = Kind("Session", 14, ERR_SESSION, None)
    _feature = "the sessions model"
    _methods = (
        *_ERRHANDLER_METHODS,
        "Init", "Finalize", "Create_group", "Get_info", "Get_num_psets", "Get_nth_pset",
        "Get_pset_info", "Attach_buffer", "Detach_buffer", "Flush_buffer", "Iflush_buffer",
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
    """The communicator methods of dynamic processes, partitioned communication and
    fault tolerance (ULFM), which ``Comm`` inherits as ``NotImplementedError``."""

    __slots__ = ()
    _owner = "Comm"
    _features = {
        _DYNAMIC: ("Spawn", "Spawn_multiple", "Accept", "Connect", "Join"),
        "partitioned communication": ("Psend_init", "Precv_init"),
        "fault tolerance (ULFM)": (
            "Ack_failed", "Get_failed", "Agree", "Iagree", "Revoke", "Is_revoked",
            "Shrink", "Ishrink",
        ),
    }  # fmt: skip


class PartitionedFeatures(_UnsupportedMethods):
    """The partitioned-communication methods of ``Prequest`` (``NotImplementedError``)."""

    __slots__ = ()
    _owner = "Prequest"
    _features = {"partitioned communication": ("Pready", "Pready_range", "Pready_list", "Parrived")}


FILE_NULL: File = File()
SESSION_NULL: Session = Session()
register(globals(), ("FILE_NULL", "SESSION_NULL"))  # constants (see core.handle)


# --- Module-level functions of unavailable features --------------------------------------


def Open_port(info: Any = INFO_NULL) -> NoReturn:
    """Open a port for accepting connections (not available)."""
    _unavailable("Open_port", _DYNAMIC)


def Close_port(port_name: str) -> NoReturn:
    """Close a port (not available)."""
    _unavailable("Close_port", _DYNAMIC)


def Publish_name(service_name: str, port_name: str, info: Any = INFO_NULL) -> NoReturn:
    """Publish a service name (not available)."""
    _unavailable("Publish_name", _DYNAMIC)


def Unpublish_name(service_name: str, port_name: str, info: Any = INFO_NULL) -> NoReturn:
    """Unpublish a service name (not available)."""
    _unavailable("Unpublish_name", _DYNAMIC)


def Lookup_name(service_name: str, info: Any = INFO_NULL) -> NoReturn:
    """Look up a published service name (not available)."""
    _unavailable("Lookup_name", _DYNAMIC)


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
