"""``MPI.Status``: the outcome of a receive, probe or completed request."""

from __future__ import annotations

from typing import Any

from ._constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from ._errors import SUCCESS

__all__ = ["Status"]


class Status:
    """Source, tag, error, byte count and cancellation flag of an operation.

    An *empty* status (the one of a null or inactive request) has source
    ``ANY_SOURCE``, tag ``ANY_TAG``, error ``SUCCESS`` and count 0.
    """

    __slots__ = ("_cancelled", "count", "error", "source", "tag")

    def __init__(self, status: Status | None = None) -> None:
        if status is None:
            self.source = ANY_SOURCE
            self.tag = ANY_TAG
            self.error = SUCCESS
            self.count = 0
            self._cancelled = False
        else:
            self.source = status.source
            self.tag = status.tag
            self.error = status.error
            self.count = status.count
            self._cancelled = status._cancelled

    def _set(self, source: int, tag: int, count: int, cancelled: bool = False) -> None:
        self.source = source
        self.tag = tag
        self.count = count
        self._cancelled = cancelled

    def _set_empty(self) -> None:
        self._set(ANY_SOURCE, ANY_TAG, 0)
        self.error = SUCCESS

    # -- accessors -----------------------------------------------------------
    def Get_source(self) -> int:
        return self.source

    def Set_source(self, source: int) -> None:
        self.source = source

    def Get_tag(self) -> int:
        return self.tag

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Get_error(self) -> int:
        return self.error

    def Set_error(self, error: int) -> None:
        self.error = error

    def Get_count(self, datatype: Any = None) -> int:
        """Number of whole ``datatype`` entries received, or ``UNDEFINED``.

        Messages carry each element in its packed form (``_packed_size`` bytes:
        the extent for predefined types, pair types keeping their C struct
        padding; the packed size for derived types).
        """
        size = 1 if datatype is None else datatype._packed_size
        if size == 0:
            return 0 if self.count == 0 else UNDEFINED
        if self.count % size:
            return UNDEFINED
        return self.count // size

    def Get_elements(self, datatype: Any) -> int:
        """Number of basic elements received (equal to Get_count for basic types)."""
        getter = getattr(datatype, "_elements_in", None)
        if getter is not None:
            return int(getter(self.count))
        return self.Get_count(datatype)

    def Set_elements(self, datatype: Any, count: int) -> None:
        if datatype is None:
            self.count = count
        else:
            self.count = datatype._bytes_of_elements(count)

    def Is_cancelled(self) -> bool:
        return self._cancelled

    def Set_cancelled(self, flag: bool) -> None:
        self._cancelled = bool(flag)

    # -- Python conveniences (as in mpi4py) ----------------------------------
    cancelled = property(Is_cancelled)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return (self.source, self.tag, self.error, self.count, self._cancelled) == (
            other.source,
            other.tag,
            other.error,
            other.count,
            other._cancelled,
        )

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return (
            f"<MPI.Status source={self.source} tag={self.tag} error={self.error} "
            f"count={self.count}>"
        )

    def __reduce__(self) -> Any:
        return (_rebuild, (self.source, self.tag, self.error, self.count, self._cancelled))

    def py2f(self) -> list[int]:
        return [self.count, int(self._cancelled), self.source, self.tag, self.error]

    @classmethod
    def f2py(cls, arg: list[int]) -> Status:
        return _rebuild(arg[2], arg[3], arg[4], arg[0], bool(arg[1]))


def _rebuild(source: int, tag: int, error: int, count: int, cancelled: bool) -> Status:
    status = Status()
    status._set(source, tag, count, cancelled)
    status.error = error
    return status
