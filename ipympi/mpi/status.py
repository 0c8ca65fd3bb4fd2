"""``MPI.Status``: the outcome of a receive, probe or completed request.

A status is stored as C MPI stores it (MPICH's ``MPI_Status``): five C ints,
``count_lo``, ``count_hi_and_cancelled``, ``MPI_SOURCE``, ``MPI_TAG``,
``MPI_ERROR``. The byte count is 63 bits, its low 32 in ``count_lo`` and the
rest above the cancelled flag (bit 0) of ``count_hi_and_cancelled``.
``tomemory()`` exposes that buffer (writes to it change the status),
``py2f()`` copies it into the Fortran integer array (``F_SOURCE``, ``F_TAG``
and ``F_ERROR`` index it) and ``f2py`` reads one back.
"""

from __future__ import annotations

import copyreg
import struct
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from ..core.errors import ERR_COUNT, SUCCESS
from ..core.errors import Exception as MPIException

if TYPE_CHECKING:
    from .datatype import Datatype

__all__ = ["Status"]

_EMPTY = array("i", (0, 0, ANY_SOURCE, ANY_TAG, SUCCESS))  # that of a null or inactive request
_LO, _HI, _SOURCE, _TAG, _ERROR = range(5)
_INT_MAX = 0x7FFFFFFF
_HEAD = struct.Struct("4i")  # count_lo, count_hi_and_cancelled, source, tag: one write


def _split(count: int, cancelled: bool) -> tuple[int, int]:
    """``(count_lo, count_hi_and_cancelled)`` of a byte count (``ERR_COUNT`` if < 0)."""
    if 0 <= count <= _INT_MAX:
        return count, int(cancelled)
    if count < 0:
        raise MPIException(ERR_COUNT, f"a status count cannot be negative ({count})")
    lo = count & 0xFFFFFFFF
    return lo - (1 << 32) if lo > _INT_MAX else lo, (count >> 32) << 1 | bool(cancelled)


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(value.__index__())
    except AttributeError:
        raise TypeError(f"status {what} must be an integer, not {type(value).__name__}") from None


class Status:
    """Source, tag, error, byte count and cancellation flag of an operation.

    ``Status()`` is an *empty* status (that of a null or inactive request):
    source ``ANY_SOURCE``, tag ``ANY_TAG``, error ``SUCCESS``, count 0, not
    cancelled; ``Status(status)`` is a copy of ``status``.
    """

    __slots__ = ("__weakref__", "_mem")
    _mem: array[int]  # the C struct's five ints
    _C_SIZE = 4 * len(_EMPTY)  # bytes of the C struct (MPI._sizeof)

    def __new__(cls, status: Status | None = None) -> Status:
        self = object.__new__(cls)
        if status is None:
            self._mem = _EMPTY[:]
        elif isinstance(status, Status):
            self._mem = status._mem[:]
        else:
            raise TypeError(f"expected an MPI.Status, got {type(status).__name__}")
        return self

    # -- filled by the library ---------------------------------------------------------
    def _set(self, source: int, tag: int, count: int, cancelled: bool = False) -> None:
        if 0 <= count <= _INT_MAX:
            _HEAD.pack_into(self._mem, 0, count, cancelled, source, tag)
        else:
            _HEAD.pack_into(self._mem, 0, *_split(count, cancelled), source, tag)

    def _set_empty(self, cancelled: bool = False) -> None:
        self._set(ANY_SOURCE, ANY_TAG, 0, cancelled)
        self._mem[_ERROR] = SUCCESS

    def _set_count(self, count: int, cancelled: bool) -> None:
        self._mem[_LO], self._mem[_HI] = _split(count, cancelled)

    def _address(self) -> int:
        """Address of the buffer of C ints."""
        return self._mem.buffer_info()[0]

    # -- fields ---------------------------------------------------------------------------
    @property
    def source(self) -> int:
        """The rank of the message's sender."""
        return self._mem[_SOURCE]

    @source.setter
    def source(self, value: int) -> None:
        self._mem[_SOURCE] = _as_int(value, "source")

    @property
    def tag(self) -> int:
        """The message's tag."""
        return self._mem[_TAG]

    @tag.setter
    def tag(self, value: int) -> None:
        self._mem[_TAG] = _as_int(value, "tag")

    @property
    def error(self) -> int:
        """The error code of the operation (set by the multiple-completion calls)."""
        return self._mem[_ERROR]

    @error.setter
    def error(self, value: int) -> None:
        self._mem[_ERROR] = _as_int(value, "error")

    @property
    def count(self) -> int:
        """The number of bytes received."""
        mem = self._mem
        lo, hi = mem[_LO], mem[_HI]
        if lo >= 0 and 0 <= hi <= 1:
            return lo
        return ((hi & 0xFFFFFFFF) >> 1) << 32 | (lo & 0xFFFFFFFF)

    @count.setter
    def count(self, value: int) -> None:
        self._set_count(_as_int(value, "count"), self.cancelled)

    @property
    def cancelled(self) -> bool:
        """Whether the operation was cancelled."""
        return bool(self._mem[_HI] & 1)

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self._set_count(self.count, bool(value))

    # -- accessors -------------------------------------------------------------------------
    def Get_source(self) -> int:
        """Return the source of the message."""
        return self.source

    def Set_source(self, source: int) -> None:
        """Set the source of the message."""
        self.source = source

    def Get_tag(self) -> int:
        """Return the tag of the message."""
        return self.tag

    def Set_tag(self, tag: int) -> None:
        """Set the tag of the message."""
        self.tag = tag

    def Get_error(self) -> int:
        """Return the error code."""
        return self.error

    def Set_error(self, error: int) -> None:
        """Set the error code."""
        self.error = error

    def Get_count(self, datatype: Datatype | None = None) -> int:
        """Number of whole ``datatype`` entries received (``BYTE`` by default), or
        ``UNDEFINED``.

        Messages carry each element in its packed form (``_packed_size`` bytes:
        the extent for predefined types, pair types keeping their C struct
        padding; the packed size for derived types).
        """
        size = 1 if datatype is None else datatype._packed_size
        count = self.count
        if size == 0:
            return 0 if count == 0 else UNDEFINED
        if count % size:
            return UNDEFINED
        return count // size

    def Get_elements(self, datatype: Datatype) -> int:
        """Number of basic elements received (equal to Get_count for basic types)."""
        getter = getattr(datatype, "_elements_in", None)
        if getter is not None:
            return int(getter(self.count))
        return self.Get_count(datatype)

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        """Set the count so that ``Get_elements(datatype)`` returns ``count``."""
        count = _as_int(count, "count")
        if count < 0:
            raise MPIException(ERR_COUNT, f"Set_elements: negative count {count}")
        nbytes = count if datatype is None else datatype._bytes_of_elements(count)
        self._set_count(nbytes, self.cancelled)

    def Is_cancelled(self) -> bool:
        """Return whether the operation was cancelled."""
        return self.cancelled

    def Set_cancelled(self, flag: bool) -> None:
        """Set the cancelled flag."""
        self.cancelled = flag

    # -- C and Fortran views ---------------------------------------------------------------
    def tomemory(self) -> memoryview:
        """The status's buffer of five C ints (writable: writes change the status)."""
        return memoryview(self._mem)

    def py2f(self) -> list[int]:
        """The status as a Fortran integer array of ``F_STATUS_SIZE`` entries."""
        return list(self._mem)

    @classmethod
    def f2py(cls, arg: Sequence[int]) -> Status:
        """A status from a Fortran integer array (see :meth:`py2f`)."""
        status = cls()
        status._mem[:] = array("i", [arg[i] for i in range(len(_EMPTY))])
        return status

    # -- Python protocols ------------------------------------------------------------------
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self._mem == other._mem

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return self._mem != other._mem

    def __repr__(self) -> str:
        return (
            f"<MPI.Status source={self.source} tag={self.tag} error={self.error} "
            f"count={self.count}{' cancelled' if self.cancelled else ''}>"
        )

    def __reduce__(self) -> Any:
        state = {
            "source": self.source,
            "tag": self.tag,
            "error": self.error,
            "count": self.count,
            "cancelled": self.cancelled,
        }
        return (copyreg.__newobj__, (type(self),), state)  # type: ignore[attr-defined]

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in ("source", "tag", "error", "count", "cancelled"):
            setattr(self, name, state[name])
