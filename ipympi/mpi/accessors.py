"""mpi4py's low-level accessors of MPI objects: ``MPI._sizeof``, ``_addressof``, ``_handleof``.

What C code sees of an object: a handle is a C ``int`` (its number), a ``Status`` a struct
of five C ``int``s held in a buffer of its own.
"""

from __future__ import annotations

from typing import Any

from ..core.handle import HANDLE_SIZE, Handle
from .status import Status

__all__ = ["addressof", "handleof", "sizeof"]


def sizeof(arg: Any) -> int:
    """Size in bytes of an MPI object's C storage (``MPI._sizeof``); ``arg`` is an
    MPI object or class.

    A handle is a C ``int`` (4 bytes, its :attr:`Handle.handle` number); a
    ``Status`` is the five C ``int`` its ``tomemory()`` buffer holds (20 bytes).
    """
    cls = arg if isinstance(arg, type) else type(arg)
    if issubclass(cls, Handle):
        return HANDLE_SIZE
    if issubclass(cls, Status):
        return cls._C_SIZE
    raise TypeError(f"expecting an MPI type or instance, got {arg!r}")


def addressof(arg: Any) -> int:
    """Memory address of an MPI object's storage (``MPI._addressof``).

    For a ``Status``, the address of its buffer of C ints; a handle has no C
    storage apart from the Python object, so it is that object's address.
    """
    if isinstance(arg, Handle):
        return id(arg)
    if isinstance(arg, Status):
        return arg._address()
    raise TypeError(f"expecting an MPI instance, got {arg!r}")


def handleof(arg: Any) -> int:
    """The C value an MPI object stands for (``MPI._handleof``): a handle's number,
    or the address of a ``Status``'s buffer (C code passes statuses by pointer)."""
    if isinstance(arg, Handle):
        return arg.handle
    if isinstance(arg, Status):
        return arg._address()
    raise TypeError(f"expecting an MPI instance, got {arg!r}")
