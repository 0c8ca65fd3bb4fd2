"""Handle semantics shared by MPI object classes (``Datatype``, ``Op``, ...).

A Python handle points at an implementation object (``_impl``); two handles
are equal when they point at the same one, as C handles compare, and the
class's null handle (``_null_impl``) is false.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["ImplHandle"]


class ImplHandle:
    """Equality, hashing and truth of a handle by the identity of its ``_impl``."""

    __slots__ = ()
    _impl: Any
    _null_impl: ClassVar[Any] = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)) and not isinstance(self, type(other)):
            return NotImplemented
        return self._impl is other._impl  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(id(self._impl))

    def __bool__(self) -> bool:
        return self._impl is not self._null_impl
