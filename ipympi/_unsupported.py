"""Object types and functions of mpi4py's ``MPI`` module that ipympi does not implement.

One-sided communication (``Win``), parallel I/O (``File``), info objects (``Info``), the
sessions model (``Session``), generalized requests (``Grequest``) and dynamic process
management are outside ipympi's scope. The names still exist so that programs written
for mpi4py import cleanly and can probe for the features: the null handles
(``WIN_NULL``, ``INFO_NULL``, ...) behave as handles (comparison, ``bool``), and every
other method, property or function raises ``NotImplementedError`` naming the missing
feature. ``INFO_NULL`` is the usual default ``info`` argument, so it must exist.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

__all__ = [
    "FILE_NULL",
    "INFO_ENV",
    "INFO_NULL",
    "SESSION_NULL",
    "WIN_NULL",
    "Close_port",
    "File",
    "Get_abi_fortran_info",
    "Get_abi_info",
    "Get_abi_version",
    "Get_hw_resource_info",
    "Grequest",
    "Info",
    "Lookup_name",
    "Open_port",
    "Publish_name",
    "Register_datarep",
    "Session",
    "Unpublish_name",
    "Win",
]


def _unavailable(what: str, feature: str, called: str | None = None) -> NoReturn:
    message = f"MPI.{what} is not available in ipympi: {feature} is outside its scope"
    if called is not None:
        message += f" (called {called})"
    raise NotImplementedError(message)


def _stub_method(cls_name: str, name: str, feature: str) -> Callable[..., NoReturn]:
    def method(*args: Any, **kwargs: Any) -> NoReturn:
        _unavailable(cls_name, feature, f"{cls_name}.{name}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not available: {feature} is outside ipympi's scope."
    return method


def _stub_property(cls_name: str, name: str, feature: str) -> property:
    def getter(self: Any) -> NoReturn:
        _unavailable(cls_name, feature, f"{cls_name}.{name}")

    return property(getter, doc=f"Not available: {feature} is outside ipympi's scope.")


class _Unsupported:
    """A handle of an object type ipympi does not implement.

    ``Cls()`` is the null handle and ``Cls(handle)`` copies a handle; handles compare
    equal when they refer to the same object and are false when null. Subclasses list
    mpi4py's method and property names, which are generated as stubs raising
    ``NotImplementedError``.
    """

    __slots__ = ("_token",)
    _feature = ""
    _methods: tuple[str, ...] = ()
    _properties: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._methods:
            setattr(cls, name, _stub_method(cls.__name__, name, cls._feature))
        for name in cls._properties:
            setattr(cls, name, _stub_property(cls.__name__, name, cls._feature))

    def __init__(self, handle: Any = None) -> None:
        if handle is None:
            self._token: object | None = None
        elif type(handle) is type(self):
            self._token = handle._token
        else:
            raise TypeError(f"expected MPI.{type(self).__name__}, got {type(handle).__name__}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._token is other._token  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._token is not other._token  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), id(self._token)))

    def __bool__(self) -> bool:
        return self._token is not None

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"MPI.{name.upper()}_NULL" if self._token is None else f"<MPI.{name}>"

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (type(self), ())


_HANDLE_METHODS = ("py2f", "toint", "f2py", "fromhandle", "fromint", "free")
_ERRHANDLER_METHODS = ("Call_errhandler", "Create_errhandler", "Get_errhandler", "Set_errhandler")


class Win(_Unsupported):
    """Window for one-sided communication (not available)."""

    __slots__ = ()
    _feature = "one-sided communication"
    _methods = (
        *_HANDLE_METHODS, *_ERRHANDLER_METHODS,
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
        "attrs", "flavor", "group", "group_rank", "group_size", "handle", "info", "model", "name",
    )  # fmt: skip


class File(_Unsupported):
    """File handle for parallel I/O (not available)."""

    __slots__ = ()
    _feature = "parallel I/O"
    _methods = (
        *_HANDLE_METHODS, *_ERRHANDLER_METHODS,
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
        "amode", "atomicity", "group", "group_rank", "group_size", "handle", "info", "size",
    )  # fmt: skip


class Info(_Unsupported):
    """Info object of (key, value) hints (not available; only the handles exist)."""

    __slots__ = ()
    _feature = "support for info objects"
    _methods = (
        *_HANDLE_METHODS,
        "Create", "Create_env", "Dup", "Free", "Get", "Set", "Delete", "Get_nkeys",
        "Get_nthkey", "get", "keys", "values", "items", "update", "pop", "popitem", "clear",
        "copy", "__len__", "__iter__", "__contains__", "__getitem__", "__setitem__",
        "__delitem__",
    )  # fmt: skip
    _properties = ("handle",)

    def __repr__(self) -> str:
        return "MPI.INFO_ENV" if self._token is not None else "MPI.INFO_NULL"

    def __reduce__(self) -> Any:
        return "INFO_ENV" if self._token is not None else (Info, ())


class Session(_Unsupported):
    """MPI session (not available: ipympi uses the world model)."""

    __slots__ = ()
    _feature = "the sessions model"
    _methods = (
        *_HANDLE_METHODS, *_ERRHANDLER_METHODS,
        "Init", "Finalize", "Create_group", "Get_info", "Get_num_psets", "Get_nth_pset",
        "Get_pset_info", "Attach_buffer", "Detach_buffer", "Flush_buffer", "Iflush_buffer",
    )  # fmt: skip
    _properties = ("handle",)


class Grequest(_Unsupported):
    """Generalized request (not available)."""

    __slots__ = ()
    _feature = "support for generalized requests"
    _methods = (
        *_HANDLE_METHODS,
        "Start", "Complete", "complete", "Cancel", "cancel", "Free",
        "Wait", "wait", "Test", "test", "Get_status", "get_status",
        "Waitall", "waitall", "Waitany", "waitany", "Waitsome", "waitsome",
        "Testall", "testall", "Testany", "testany", "Testsome", "testsome",
        "Get_status_all", "get_status_all", "Get_status_any", "get_status_any",
        "Get_status_some", "get_status_some",
    )  # fmt: skip
    _properties = ("handle",)

    def __repr__(self) -> str:
        return "<MPI.Grequest (null)>"


WIN_NULL: Win = Win()
FILE_NULL: File = File()
INFO_NULL: Info = Info()
INFO_ENV: Info = Info()
INFO_ENV._token = object()
SESSION_NULL: Session = Session()


# --- Module-level functions of unavailable features --------------------------------------

_DYNAMIC = "dynamic process management"


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


def Get_hw_resource_info() -> NoReturn:
    """Return hardware resource information as an Info object (not available)."""
    _unavailable("Get_hw_resource_info", "support for info objects")


def Get_abi_version() -> NoReturn:
    """Return the version of the standard MPI ABI (not available)."""
    _unavailable("Get_abi_version", "the standard ABI")


def Get_abi_info() -> NoReturn:
    """Return information about the standard MPI ABI (not available)."""
    _unavailable("Get_abi_info", "the standard ABI")


def Get_abi_fortran_info() -> NoReturn:
    """Return Fortran ABI information (not available)."""
    _unavailable("Get_abi_fortran_info", "the standard ABI")
