"""``MPI.Alloc_mem`` and ``MPI.Free_mem``: memory blocks for message passing.

MPI lets an implementation hand out memory that is faster for communication (MPI-3.0
§2.2). ipympi has no special memory, so a block is a ``bytearray`` presented as a
writable ``memoryview``; what this module adds is the bookkeeping the standard asks for:
``Free_mem`` accepts only blocks from ``Alloc_mem`` (else ``ERR_BASE``), and a freed
block's view is released so that later use fails instead of silently working.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

from ._errors import ERR_ARG, ERR_BASE, ERR_INFO, ERR_NO_MEM
from ._errors import Exception as MPIException
from ._info import INFO_NULL, Info

__all__ = ["Alloc_mem", "Free_mem"]

_lock = threading.Lock()
_blocks: dict[int, tuple[bytearray, memoryview]] = {}  # id(block) -> (block, its view)


def Alloc_mem(size: int, info: Info = INFO_NULL) -> memoryview:
    """Allocate ``size`` bytes and return them as a writable, zero-filled memoryview.

    Raises ``Exception(ERR_ARG)`` for a negative size and ``Exception(ERR_NO_MEM)`` when
    the memory cannot be allocated. ``info`` hints are accepted and ignored.
    """
    nbytes = operator.index(size)
    if not isinstance(info, Info):
        raise MPIException(ERR_INFO, f"Alloc_mem: info must be an MPI.Info, not {info!r}")
    if nbytes < 0:
        raise MPIException(ERR_ARG, f"Alloc_mem: size must not be negative; got {nbytes}")
    try:
        block = bytearray(nbytes)
    except (MemoryError, OverflowError):
        raise MPIException(ERR_NO_MEM, f"Alloc_mem: cannot allocate {nbytes} bytes") from None
    view = memoryview(block)
    with _lock:
        _blocks[id(block)] = (block, view)
    return view


def Free_mem(mem: Any) -> None:
    """Free a block returned by ``Alloc_mem``; its memoryview is released.

    ``mem`` is the view ``Alloc_mem`` returned (or another view of the whole block).
    Anything else, including a block freed before, raises ``Exception(ERR_BASE)``.
    """
    entry = None
    if isinstance(mem, memoryview):
        try:
            block = mem.obj
        except ValueError:  # a released view: freed already
            block = None
        with _lock:
            entry = _blocks.get(id(block))
            if entry is not None and (mem is entry[1] or mem.nbytes == len(entry[0])):
                del _blocks[id(block)]
            else:
                entry = None
    if entry is None:
        raise MPIException(
            ERR_BASE, f"Free_mem: {type(mem).__name__} object is not memory from Alloc_mem"
        )
    try:
        entry[1].release()
    except BufferError:
        pass  # still exported (e.g. to a numpy array): leave it to the garbage collector
