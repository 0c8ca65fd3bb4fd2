"""What the matcher queues for a message that arrived before its receive was posted.

An :class:`~ipympi.core.matching.Envelope`'s ``payload`` is opaque to the matcher;
the progress engine puts one of these two in it: an :class:`Arrival` for a frame from
another rank (an eager message, or a large one's announcement), a
:class:`SelfMessage` for a message this rank sent to itself. Both carry ``kind``
(``wire.EAGER``, ``wire.RTS`` or :data:`SELF`), so a reader tells them apart with one
comparison. Plain slotted classes: one is built for every message that arrives
unexpected, on the hot path.
"""

from __future__ import annotations

from typing import Any

from .wire import signature_of

__all__ = ["SELF", "Arrival", "SelfMessage"]

SELF = 0  # the ``kind`` of a message a rank sent to itself (no frame kind is 0)


class Arrival:
    """A frame from world rank ``wsource`` (process ``pid``): its kind (``EAGER`` or
    ``RTS``), its flags (``SYNC``) and the sender's message id, which an answer names."""

    __slots__ = ("flags", "frame", "kind", "msgid", "pid", "wsource")

    def __init__(self, frame: bytes, kind: int, flags: int, wsource: int, pid: int, msgid: int):
        self.frame = frame
        self.kind = kind
        self.flags = flags
        self.wsource = wsource
        self.pid = pid
        self.msgid = msgid

    @property
    def sig(self) -> int:
        """The collective signature the message was sent with (0: point-to-point)."""
        return signature_of(self.frame)


class SelfMessage:
    """A message this rank sent to itself: its bytes, the synchronous sender's
    operation (completed once the message is received) or None, its signature."""

    __slots__ = ("data", "sender", "sig")
    kind = SELF

    def __init__(self, data: bytes, sender: Any, sig: int) -> None:
        self.data = data
        self.sender = sender
        self.sig = sig
