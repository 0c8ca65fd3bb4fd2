"""The buffer of buffered-mode sends (``Attach_buffer``/``Detach_buffer``).

Each buffered message holds ``nbytes + BSEND_OVERHEAD`` bytes of the attached
buffer from the ``Bsend`` call until its transfer completes; a message that
does not fit raises ``ERR_BUFFER``. The data itself is copied at ``Bsend`` time
(into the eager frame or a private snapshot), so the caller may reuse its
buffer at once, as the standard requires of a local call.
"""

from __future__ import annotations

from typing import Any

from ._constants import BSEND_OVERHEAD
from ._errors import ERR_BUFFER
from ._errors import Exception as MPIException
from ._ops import Op

__all__ = ["attach", "detach", "release", "reserve"]


class _Attached:
    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.used = 0
        self.ops: set[Op] = set()


_attached: _Attached | None = None


def attach(buf: Any) -> None:
    """Attach ``buf`` (any writable or read-only buffer) for buffered sends."""
    global _attached
    if _attached is not None:
        raise MPIException(ERR_BUFFER, "Attach_buffer: a buffer is already attached")
    from ._buffers import byte_view

    size = byte_view(buf, True).nbytes  # BufferError for read-only memory, as in mpi4py
    _attached = _Attached(buf, size)


def detach(engine: Any) -> Any:
    """Wait until every buffered message is sent, then give the buffer back."""
    global _attached
    attached = _attached
    if attached is None:
        return None
    if attached.ops and engine is not None:
        engine.enter()
        try:
            engine.wait_until(lambda: not attached.ops)
        finally:
            engine.leave()
    _attached = None
    return attached.buf


def reserve(op: Op, nbytes: int) -> None:
    """Claim space for a buffered message of ``nbytes`` or raise ``ERR_BUFFER``."""
    attached = _attached
    need = nbytes + BSEND_OVERHEAD
    if attached is None:
        raise MPIException(
            ERR_BUFFER, f"Bsend of {nbytes} bytes: no buffer attached (use MPI.Attach_buffer)"
        )
    free = attached.size - attached.used
    if need > free:
        raise MPIException(
            ERR_BUFFER,
            f"Bsend of {nbytes} bytes needs {need} bytes of the attached buffer; "
            f"{free} of {attached.size} are free",
        )
    attached.used += need
    op.bsend_bytes = need
    attached.ops.add(op)


def release(op: Op) -> None:
    """Give back the space of a completed buffered message."""
    attached = _attached
    if attached is not None and op in attached.ops:
        attached.ops.discard(op)
        attached.used -= op.bsend_bytes
    op.bsend_bytes = 0
