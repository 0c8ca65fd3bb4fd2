"""File views and data representations (MPI-4.1 §14.3, §14.5).

A :class:`View` holds what ``Set_view`` gave (displacement, etype, filetype, data
representation) and what data access needs from it: the tiling of the filetype's data
runs in the file (:class:`~ipympi.core.fileview.Tiling`), the size of an etype in the
file, and the conversion of a message's packed bytes to and from the file's bytes.

Representations: ``native`` and ``internal`` store the bytes of memory; ``external32``
the standard's big-endian portable form (the conversion of ``Pack_external``), whose
sizes may differ from memory's (a ``long`` takes 4 bytes); ``Register_datarep`` adds
representations whose conversion functions the program gives.
"""

from __future__ import annotations

import errno
from typing import Any, Callable

from ..core import errors as E
from ..core import typemap_copy as tc
from ..core.errors import Exception as MPIException
from ..core.fileview import Tiling
from ..core.lazynumpy import np
from .datatype import BYTE, Datatype

__all__ = ["Register_datarep"]

_BUILTIN = ("native", "internal", "external32")
_REGISTERED: dict[str, tuple[Any, Any, Callable[[Datatype], int]]] = {}


def Register_datarep(
    datarep: str,
    read_fn: Callable[..., None] | None,
    write_fn: Callable[..., None] | None,
    extent_fn: Callable[[Datatype], int],
) -> None:
    """Register a data representation: ``write_fn(userbuf, datatype, count, filebuf,
    position)`` converts to it, ``read_fn`` back, ``extent_fn(datatype)`` gives a
    datatype's extent in it (``ERR_DUP_DATAREP`` if the name is taken)."""
    name = str(datarep)
    if name in _BUILTIN or name in _REGISTERED:
        from .errhandling import raise_through_world

        raise_through_world(
            MPIException(E.ERR_DUP_DATAREP, f"Register_datarep: {name!r} is already defined"),
            "Register_datarep",
        )
    if not callable(extent_fn):
        raise TypeError("Register_datarep: extent_fn must be callable")
    _REGISTERED[name] = (read_fn, write_fn, extent_fn)


def os_error(exc: OSError, call: str) -> MPIException:
    """The standard's error class of a failed system call."""
    code = {
        errno.ENOENT: E.ERR_NO_SUCH_FILE,
        errno.EEXIST: E.ERR_FILE_EXISTS,
        errno.EACCES: E.ERR_ACCESS,
        errno.EPERM: E.ERR_ACCESS,
        errno.EROFS: E.ERR_READ_ONLY,
        errno.ENOSPC: E.ERR_NO_SPACE,
        errno.EDQUOT: E.ERR_QUOTA,
        errno.EISDIR: E.ERR_BAD_FILE,
        errno.ENAMETOOLONG: E.ERR_BAD_FILE,
        errno.ENOTDIR: E.ERR_BAD_FILE,
        errno.ETXTBSY: E.ERR_FILE_IN_USE,
        errno.EBUSY: E.ERR_FILE_IN_USE,
    }.get(exc.errno or 0, E.ERR_IO)
    return MPIException(code, f"{call}: {exc.strerror or exc}")


def _layout(datatype: Datatype) -> Any:
    return datatype._impl.layout


def _same_sizes(layout: Any) -> bool:
    """Whether every basic element of ``layout`` takes as many bytes in external32."""
    try:
        return bool(tc.ext32_size(layout) == layout.packed)
    except ValueError:
        return False


def type_extent(datatype: Datatype, datarep: str) -> int:
    """The extent of ``datatype`` in the file under ``datarep``."""
    impl = datatype._impl
    if datarep in ("native", "internal"):
        return int(impl.extent)
    if datarep == "external32":
        layout = impl.layout
        if _same_sizes(layout):
            return int(impl.extent)
        try:
            return tc.ext32_size(layout)
        except ValueError as exc:
            raise MPIException(E.ERR_UNSUPPORTED_DATAREP, f"external32: {exc}") from None
    return int(_REGISTERED[datarep][2](datatype))


class View:
    """A file view: displacement, etype, filetype, representation and tiling."""

    __slots__ = ("datarep", "disp", "esize", "etype", "filetype", "tiling")

    def __init__(self, disp: int, etype: Datatype, filetype: Datatype, datarep: str) -> None:
        self.disp = disp
        self.etype = etype
        self.filetype = filetype
        self.datarep = datarep
        self.esize = self.file_size(etype)
        if self.esize <= 0:
            raise MPIException(E.ERR_ARG, "Set_view: the etype holds no data")
        layout = _layout(filetype)
        if datarep in ("native", "internal") or _same_sizes(layout):
            self.tiling = Tiling(disp, layout.off, layout.len, int(filetype._impl.extent))
        elif layout.dense or (layout.packed == layout.extent and len(layout.off) == 1):
            size = type_extent(filetype, datarep)
            self.tiling = Tiling(disp, np.array([0]), np.array([size]), size)
        else:
            raise MPIException(
                E.ERR_UNSUPPORTED_DATAREP,
                f"Set_view: a non-contiguous filetype whose elements change size in {datarep}",
            )
        if self.tiling.size % self.esize:
            raise MPIException(E.ERR_TYPE, "Set_view: the filetype is not made of etypes")

    def file_size(self, datatype: Datatype) -> int:
        """Bytes of one element of ``datatype``'s data in the file."""
        if self.datarep in ("native", "internal"):
            return int(_layout(datatype).packed)
        if self.datarep == "external32":
            try:
                return tc.ext32_size(_layout(datatype))
            except ValueError as exc:
                raise MPIException(E.ERR_UNSUPPORTED_DATAREP, f"external32: {exc}") from None
        return int(_REGISTERED[self.datarep][2](datatype))

    def to_file(self, packed: memoryview, datatype: Datatype, count: int) -> memoryview:
        """The file's bytes of ``count`` packed elements of ``datatype``."""
        rep = self.datarep
        if rep in ("native", "internal"):
            return packed
        out = np.zeros(count * self.file_size(datatype), dtype=np.uint8)
        if rep == "external32":
            src = np.frombuffer(packed, dtype=np.uint8)
            tc.to_external(_layout(datatype), src, count, out, 0)
        else:
            write_fn = _REGISTERED[rep][1]
            if write_fn is None:
                raise MPIException(E.ERR_CONVERSION, f"{rep}: no write conversion")
            write_fn(packed, datatype, count, out, 0)
        return out.data

    def from_file(self, data: np.ndarray, datatype: Datatype, count: int, into: memoryview) -> None:
        """Convert ``count`` elements in the file's form into packed memory ``into``."""
        rep = self.datarep
        target = np.frombuffer(into, dtype=np.uint8)
        if rep == "external32":
            tc.from_external(_layout(datatype), data, 0, count, target)
            return
        read_fn = _REGISTERED[rep][0]
        if read_fn is None:
            raise MPIException(E.ERR_CONVERSION, f"{rep}: no read conversion")
        read_fn(target, datatype, count, data, 0)


def native_view() -> View:
    """The view of a newly opened file: bytes from displacement 0."""
    return View(0, BYTE, BYTE, "native")


def make_view(disp: int, etype: Datatype, filetype: Datatype | None, datarep: str) -> View:
    """A view from ``Set_view``'s arguments (datatypes kept as new handles)."""
    if not isinstance(datarep, str):
        raise TypeError("Set_view: datarep must be a string")
    if datarep not in _BUILTIN and datarep not in _REGISTERED:
        raise MPIException(
            E.ERR_UNSUPPORTED_DATAREP, f"Set_view: unknown representation {datarep!r}"
        )
    if disp < 0:
        raise MPIException(E.ERR_ARG, f"Set_view: negative displacement {disp}")
    if filetype is None:
        filetype = etype
    for what, dt in (("etype", etype), ("filetype", filetype)):
        if not isinstance(dt, Datatype) or not dt:
            raise MPIException(E.ERR_TYPE, f"Set_view: invalid {what}")
        if not dt._impl.committed:
            raise MPIException(E.ERR_TYPE, f"Set_view: the {what} is not committed")
    return View(disp, _keep(etype), _keep(filetype), datarep)


def _keep(datatype: Datatype) -> Datatype:
    if datatype._impl.key is not None:
        return datatype
    return datatype.Dup()


def returned(datatype: Datatype) -> Datatype:
    """What ``Get_view`` returns: the predefined handle, or a new handle."""
    return _keep(datatype)
