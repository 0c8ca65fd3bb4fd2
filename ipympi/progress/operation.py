"""Internal state of one communication operation (what a ``Request`` points at).

An :class:`Operation` is created by a send or receive call, completed by the engine
when the data has moved (or when a synchronous send is acknowledged), and read
by ``Request``/``Status`` to report the outcome. It holds no sockets and no
locks; the engine mutates it under its own lock.

An operation ends in one of three ways, each one method: :meth:`Operation.complete`
(the outcome fields are set), :meth:`Operation.fail` (with an error class and its
text) and :meth:`Operation.complete_cancelled`; a send that waited for its
receiver's answer ends with :meth:`Operation.complete_send`, which also lets go of
its buffer. Subclasses (a collective, a partitioned request) extend
:meth:`Operation.complete`, which every way of ending goes through.
"""

from __future__ import annotations

from typing import Any

from ..core.constants import ANY_SOURCE, ANY_TAG, PROC_NULL

__all__ = ["COLL", "RECV", "SEND", "Operation"]

SEND, RECV, COLL = 1, 2, 3  # COLL: a whole collective call (see mpi.coll.runner)


class Operation:
    """One send or receive in flight.

    ``mem`` is the user's buffer (a byte memoryview) for buffer operations, or
    ``None`` for pickled-object receives, whose bytes land in ``data``. Fields
    default at class level so that creating an operation (on every call) sets
    only what differs.
    """

    done = False
    cancelled = False
    error = 0
    error_detail = ""
    source = ANY_SOURCE  # status fields, filled on completion
    count = 0  # bytes received (status count)
    mem: memoryview | None = None
    data: Any = None  # received bytes for object receives
    keep: Any = None  # keeps a send buffer alive until the send completes
    posted: Any = None  # the PostedReceive while a receive is queued
    msgid = 0
    bsend_bytes = 0  # attached-buffer space held by a buffered send
    bsend_pool: Any = None  # the attached buffer (``mpi.bsend.Pool``) it is held in
    rsig = 0  # collective signature of the received message
    peer_died = False  # failed because the peer rank died (not a mismatch)
    send_context = -1  # the context of a send that waits for its receiver's answer
    # Scatters received packed bytes into the user's memory (receives with a
    # non-contiguous derived datatype); run once by settle().
    unpack: Any = None

    def __init__(self, kind: int, comm: Any, call: str, peer: int, tag: int) -> None:
        self.kind = kind
        self.comm = comm
        self.call = call
        self.peer = peer  # dest for sends, requested source for receives
        self.tag = tag  # requested tag; the received tag once complete

    def settle(self) -> None:
        """Finish a completed receive: unpack derived-datatype data, once."""
        unpack = self.unpack
        if unpack is not None and self.done:
            self.unpack = None
            if not self.cancelled and self.count:
                unpack(self.count)

    def awaited(self) -> Any:
        """The posted receive this operation waits on now, or None: its own, for a
        receive (a collective overrides it with its current round's)."""
        return self.posted

    def complete_empty(self) -> None:
        """Complete with an empty status (PROC_NULL peers)."""
        self.source = PROC_NULL if self.kind == RECV else ANY_SOURCE
        self.tag = ANY_TAG
        self.count = 0
        self.complete()

    def complete(self) -> None:
        """Mark the operation done; its outcome fields are already set."""
        self.done = True

    def fail(self, error: int, detail: str, peer_died: bool = False) -> None:
        """End with error class ``error`` (``detail`` says why); ``peer_died`` when
        the peer rank died (not a mismatch)."""
        self.error = error
        self.error_detail = detail
        if peer_died:
            self.peer_died = True
        self.complete()

    def complete_cancelled(self) -> None:
        """End as cancelled (Request.Cancel succeeded, or a cell's leftover dropped)."""
        self.cancelled = True
        self.complete()

    def complete_send(self, cancelled: bool = False) -> None:
        """End a send that waited for its receiver's answer: let go of the buffer and
        of its space in an attached buffer (a buffered send)."""
        self.mem = None
        if cancelled:
            self.cancelled = True
        self.complete()
        if self.bsend_pool is not None:
            self.bsend_pool.release(self)

    def __repr__(self) -> str:
        state = "done" if self.done else "pending"
        return f"<Operation {self.call} peer={self.peer} tag={self.tag} {state}>"
