"""The modes of MPI calls, as enums: how a send completes.

A send is standard, synchronous (it completes once the receive has matched), ready
(the receive is known to be posted) or buffered (the data is copied into an attached
buffer and the call completes at once) — MPI-3.1 §3.4.
"""

from __future__ import annotations

import enum

__all__ = ["SendMode"]


class SendMode(enum.Enum):
    """The communication mode of a send (``Send``/``Ssend``/``Rsend``/``Bsend``)."""

    STANDARD = "standard"
    SYNCHRONOUS = "synchronous"
    READY = "ready"
    BUFFERED = "buffered"
