"""The buffers of buffered-mode sends (``Attach_buffer``/``Detach_buffer``/``Flush_buffer``).

A buffer is attached to the process (``MPI.Attach_buffer``) or, as MPI 4.1 allows,
to one communicator (``Comm.Attach_buffer``); a buffered send uses its
communicator's buffer when it has one, and the process's otherwise. Each
buffered message holds ``nbytes + BSEND_OVERHEAD`` bytes of that buffer from the
``Bsend`` call until its transfer completes; a message that does not fit raises
``ERR_BUFFER``. ``BUFFER_AUTOMATIC`` attaches a buffer that MPI sizes itself: here
one without a limit. The data itself is copied at ``Bsend`` time (into the eager
frame or a private snapshot), so the caller may reuse its buffer at once, as the
standard requires of a local call.

``Flush_buffer`` waits until every message buffered so far has left, and
``Detach_buffer`` flushes before it gives the buffer back; ``Iflush_buffer`` is
the nonblocking flush, a request that completes when the buffer has no message
left.
"""

from __future__ import annotations

from typing import Any

from ..core.constants import ANY_TAG, BSEND_OVERHEAD, PROC_NULL
from ..core.errors import ERR_BUFFER
from ..core.errors import Exception as MPIException
from ..progress.operation import SEND, Operation
from .process import PROCESS
from .rawmem import BUFFER_AUTOMATIC, byte_view

__all__ = ["Pool", "attach", "detach", "flush", "iflush", "reserve"]


class Pool:
    """An attached buffer: its size (``None``: automatic, no limit) and its messages."""

    __slots__ = ("buf", "flushes", "ops", "size", "used")

    def __init__(self, buf: Any, size: int | None) -> None:
        self.buf = buf
        self.size = size
        self.used = 0
        self.ops: set[Operation] = set()
        self.flushes: list[Operation] = []  # Iflush_buffer operations waiting for ops to drain

    def release(self, op: Operation) -> None:
        """Give back the space of ``op``, a completed buffered message held here.

        The progress engine calls this when the message has left (``op.bsend_pool``);
        an ``Iflush_buffer`` waiting for the pool to drain completes with its last one.
        """
        if op in self.ops:
            self.ops.discard(op)
            self.used -= op.bsend_bytes
            if not self.ops:
                for waiting in self.flushes:
                    waiting.complete()
                self.flushes.clear()
        op.bsend_bytes = 0
        op.bsend_pool = None


def attach(holder: Any, buf: Any, call: str = "Attach_buffer") -> None:
    """Attach ``buf`` (a buffer, or ``BUFFER_AUTOMATIC``) to ``holder``."""
    if holder.bsend is not None:
        raise MPIException(ERR_BUFFER, f"{call}: a buffer is already attached")
    # TypeError for what is not memory, BufferError for read-only memory, as in mpi4py
    size = None if buf is BUFFER_AUTOMATIC else byte_view(buf, True).nbytes
    holder.bsend = Pool(buf, size)


def flush(engine: Any, holder: Any) -> None:
    """Wait until every message buffered in ``holder``'s buffer has been sent."""
    pool = holder.bsend
    if pool is None or not pool.ops or engine is None:
        return
    engine.enter()
    try:
        engine.wait_until(lambda: not pool.ops)
    finally:
        engine.leave()


def iflush(holder: Any, comm: Any, call: str) -> Operation:
    """An operation that completes once ``holder``'s buffer has no message left."""
    op = Operation(SEND, comm, call, PROC_NULL, ANY_TAG)
    pool = holder.bsend
    if pool is None or not pool.ops:
        op.complete()
    else:
        pool.flushes.append(op)
    return op


def detach(engine: Any, holder: Any) -> Any:
    """Flush ``holder``'s buffer, then give it back (``None`` when none is attached)."""
    pool = holder.bsend
    if pool is None:
        return None
    flush(engine, holder)
    holder.bsend = None
    return pool.buf


def reserve(op: Operation, nbytes: int, holder: Any) -> None:
    """Claim space for a buffered message of ``nbytes`` in the buffer that applies to
    ``holder`` (a communicator's state), or raise ``ERR_BUFFER``."""
    pool = holder.bsend or PROCESS.bsend
    need = nbytes + BSEND_OVERHEAD
    if pool is None:
        raise MPIException(
            ERR_BUFFER, f"Bsend of {nbytes} bytes: no buffer attached (use MPI.Attach_buffer)"
        )
    if pool.size is not None:
        free = pool.size - pool.used
        if need > free:
            raise MPIException(
                ERR_BUFFER,
                f"Bsend of {nbytes} bytes needs {need} bytes of the attached buffer; "
                f"{free} of {pool.size} are free",
            )
    pool.used += need
    op.bsend_bytes = need
    op.bsend_pool = pool
    pool.ops.add(op)
