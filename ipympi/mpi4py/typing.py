"""``mpi4py.typing``: type aliases for the arguments of the ``MPI`` module.

For type hints in programs that call ipympi's (or mpi4py's) ``MPI`` module: what a
buffer is (:data:`Buffer`), the forms a buffer argument takes (:data:`BufSpec` and its
vector variants), and the integer kinds of counts, displacements and offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol, SupportsIndex, TypeVar, Union

from ..mpi.datatype import Datatype
from ..mpi.rawmem import BottomType, InPlaceType

__all__ = [
    "Aint",
    "Bottom",
    "BufSpec",
    "BufSpecB",
    "BufSpecV",
    "BufSpecW",
    "Buffer",
    "Count",
    "Displ",
    "InPlace",
    "Offset",
    "SupportsBuffer",
    "SupportsCAI",
    "SupportsDLPack",
    "TargetSpec",
    "TypeSpec",
]


class SupportsBuffer(Protocol):
    """An object exposing the Python buffer protocol."""

    def __buffer__(self, flags: int) -> memoryview: ...


class SupportsDLPack(Protocol):
    """An object exposing the DLPack data interchange protocol."""

    def __dlpack__(self, *, stream: Optional[int] = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


class SupportsCAI(Protocol):
    """An object exposing the CUDA Array Interface protocol."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


Buffer = Union[SupportsBuffer, SupportsDLPack, SupportsCAI]
"""Memory to communicate from or into: any of the three protocols."""

Bottom = Optional[BottomType]
"""``MPI.BOTTOM`` (or ``None``): absolute addresses given by a datatype."""

InPlace = Optional[InPlaceType]
"""``MPI.IN_PLACE`` (or ``None``): the receive buffer is also the send buffer."""

Aint = SupportsIndex
"""An address-sized integer."""

Count = SupportsIndex
"""A count of elements."""

Displ = SupportsIndex
"""A displacement, in elements of a datatype."""

Offset = SupportsIndex
"""An offset in a file."""

TypeSpec = Union[Datatype, str]
"""A datatype, or its type code (``'i'``, ``'f8'``, ...)."""

BufSpec = Union[
    Buffer,
    tuple[Buffer, Count],
    tuple[Buffer, TypeSpec],
    tuple[Buffer, Count, TypeSpec],
    tuple[Bottom, Count, Datatype],
    list[Any],
]
"""A buffer argument: the buffer, with a count and/or datatype (tuple or list)."""

BufSpecB = Union[
    Buffer,
    tuple[Buffer, Count],
    tuple[Buffer, TypeSpec],
    tuple[Buffer, Count, TypeSpec],
    list[Any],
]
"""A buffer argument of a collective: the count is per process."""

BufSpecV = Union[
    Buffer,
    tuple[Buffer, Sequence[Count]],
    tuple[Buffer, tuple[Sequence[Count], Sequence[Displ]]],
    tuple[Buffer, TypeSpec],
    tuple[Buffer, Sequence[Count], TypeSpec],
    tuple[Buffer, tuple[Sequence[Count], Sequence[Displ]], TypeSpec],
    tuple[Buffer, Sequence[Count], Sequence[Displ], TypeSpec],
    tuple[Bottom, tuple[Sequence[Count], Sequence[Displ]], Datatype],
    tuple[Bottom, Sequence[Count], Sequence[Displ], Datatype],
    list[Any],
]
"""A buffer argument of a vector collective: counts (and displacements) per process."""

BufSpecW = Union[
    tuple[Buffer, Sequence[Datatype]],
    tuple[Buffer, tuple[Sequence[Count], Sequence[Displ]], Sequence[Datatype]],
    tuple[Buffer, Sequence[Count], Sequence[Displ], Sequence[Datatype]],
    tuple[Bottom, tuple[Sequence[Count], Sequence[Displ]], Sequence[Datatype]],
    tuple[Bottom, Sequence[Count], Sequence[Displ], Sequence[Datatype]],
    list[Any],
]
"""A buffer argument of ``Alltoallw``: counts, displacements and datatypes per process."""

TargetSpec = Union[
    Displ,
    tuple[()],
    tuple[Displ],
    tuple[Displ, Count],
    tuple[Displ, Count, TypeSpec],
    list[Any],
]
"""The target of a one-sided operation: displacement, count and datatype."""

S = TypeVar("S")
"""Type variable."""

T = TypeVar("T")
"""Type variable."""

U = TypeVar("U")
"""Type variable."""

V = TypeVar("V")
"""Type variable."""
