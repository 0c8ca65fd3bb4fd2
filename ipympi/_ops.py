"""Internal state of one communication operation (what a ``Request`` points at).

An :class:`Op` is created by a send or receive call, completed by the engine
when the data has moved (or when a synchronous send is acknowledged), and read
by ``Request``/``Status`` to report the outcome. It holds no sockets and no
locks; the engine mutates it under its own lock.
"""

from __future__ import annotations

from typing import Any

from ._constants import ANY_SOURCE, ANY_TAG

__all__ = ["RECV", "SEND", "Op"]

SEND, RECV = 1, 2


class Op:
    """One send or receive in flight.

    ``mem`` is the user's buffer (a byte memoryview) for buffer operations, or
    ``None`` for pickled-object receives, whose bytes land in ``data``.
    """

    __slots__ = (
        "bsend_bytes",
        "call",
        "cancelled",
        "comm",
        "count",
        "data",
        "done",
        "error",
        "error_detail",
        "keep",
        "kind",
        "mem",
        "msgid",
        "peer",
        "posted",
        "source",
        "tag",
    )

    def __init__(self, kind: int, comm: Any, call: str, peer: int, tag: int) -> None:
        self.kind = kind
        self.comm = comm
        self.call = call
        self.peer = peer  # dest for sends, requested source for receives
        self.tag = tag  # requested tag
        self.done = False
        self.cancelled = False
        self.error = 0
        self.error_detail = ""
        self.source = ANY_SOURCE  # status fields, filled on completion
        self.count = 0  # bytes received (status count)
        self.mem: memoryview | None = None
        self.data: Any = None  # received bytes for object receives
        self.keep: Any = None  # keeps a send buffer alive until the send completes
        self.posted: Any = None  # the PostedReceive while a receive is queued
        self.msgid = 0
        self.bsend_bytes = 0  # attached-buffer space held by a buffered send

    def complete_empty(self) -> None:
        """Complete with an empty status (PROC_NULL peers)."""
        from ._constants import PROC_NULL

        self.source = PROC_NULL if self.kind == RECV else ANY_SOURCE
        self.tag = ANY_TAG
        self.count = 0
        self.done = True

    def __repr__(self) -> str:
        state = "done" if self.done else "pending"
        return f"<Op {self.call} peer={self.peer} tag={self.tag} {state}>"
